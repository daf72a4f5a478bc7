package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/control/doctor"
	"github.com/tandemllm/tandem/engine/engines"
	"github.com/tandemllm/tandem/health"
)

// errChecksFailed makes `tandem doctor` exit 1 after printing its report.
var errChecksFailed = errors.New("doctor: checks failed")

func newDoctorCmd() *cobra.Command {
	var (
		cfg     doctor.Config
		disc    = discovery.DefaultConfig()
		mtls    authn.Files
		output  string
		asJSON  bool
		expect  []string
		tiers   []string
		tlsCA   string
		maxCA   = int64(1 << 20)
		envKey  = os.Getenv("OPENAI_API_KEY")
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a running deployment and say what to fix",
		Long: `Reads a running deployment (the frontend's /health and /metrics, the discovery records,
each worker's /metrics and /health) and runs the operational checklist: expected workers up, no stale
records, KV events flowing from every worker, one block size per model, prefill/decode layouts equal
and their links fast enough; with --probe, a re-sent synthetic prompt finds its blocks cached and the TTFT
the frontend adds; on the deployment's host, leftover tandem processes and ports. Each check prints a verdict (ok, warn, fail), its evidence and a fix.
Exit status 1 when a check fails. docs/operations.md lists the checks.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(cmd)
		if err != nil {
			return err
		}
		if asJSON {
			output = "json"
		}
		if output != "text" && output != "json" {
			return fmt.Errorf("--output %q: want text or json", output)
		}
		for _, s := range expect {
			e, err := doctor.ParseExpectation(s)
			if err != nil {
				return fmt.Errorf("--expect-workers: %w", err)
			}
			cfg.Expect = append(cfg.Expect, e)
		}
		for _, s := range tiers {
			dir, size, ok := strings.Cut(s, "=")
			n, err := engines.ParseByteSize(size)
			if !ok || dir == "" || err != nil || n <= 0 {
				return fmt.Errorf("--kv-tier-disk %q: want DIR=SIZE, e.g. /nvme/kv=512GiB", s)
			}
			cfg.TierDisks = append(cfg.TierDisks, doctor.TierDisk{Dir: dir, Bytes: n})
		}
		if cfg.APIKey == "" {
			cfg.APIKey = envKey
		}
		cfg.Timeout = timeout
		if tlsCA != "" {
			pool, err := loadCAPool(tlsCA, maxCA)
			if err != nil {
				return err
			}
			cfg.FrontendTLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
		}
		if mtls.Enabled() {
			cl, err := authn.Load(mtls)
			if err != nil {
				return fmt.Errorf("--mtls-*: %w", err)
			}
			// Workers' metrics ports admit monitor and frontend
			// certificates and present workers'.
			cfg.WorkerTLS = cl.Client(authn.RoleWorker)
		}
		if disc.Backend != "none" {
			// The doctor's own board: a backend it cannot reach is a
			// failing check, not a log line.
			reg, err := discovery.Open(disc, discovery.Common{Board: health.NewBoard(log, nil), Logger: log})
			if err != nil {
				return err
			}
			defer reg.Close()
			cfg.Registry = reg
			cfg.DiscoveryFix = discoveryFix(disc)
		}
		rep, err := doctor.Run(cmd.Context(), cfg)
		if err != nil {
			return err
		}
		if output == "json" {
			err = rep.JSON(cmd.OutOrStdout())
		} else {
			err = rep.Text(cmd.OutOrStdout())
		}
		if err != nil {
			return err
		}
		if rep.Failed() {
			return fmt.Errorf("%w: %d of %d", errChecksFailed, rep.Fail, len(rep.Checks))
		}
		return nil
	}
	f := cmd.Flags()
	f.StringVar(&cfg.FrontendURL, "frontend", "http://127.0.0.1:8000", "the frontend's base URL (its --http-addr; https:// with --tls-cert)")
	f.StringVar(&output, "output", "text", "report format: text or json")
	f.BoolVar(&asJSON, "json", false, "same as --output json")
	f.StringVar(&cfg.APIKey, "api-key", "", "API key sent to the frontend as a bearer token, for --protect-metrics (default $OPENAI_API_KEY)")
	f.StringVar(&tlsCA, "tls-ca", "", "PEM CA that signs an HTTPS frontend's certificate (default: the system roots)")
	f.StringArrayVar(&tiers, "kv-tier-disk", nil, "a KV disk tier on this host to check for space: DIR=SIZE, the --kv-offload-disk-dir and the bytes its workers may hold there together (--kv-offload-disk-bytes × workers); check kv_tiers.space (repeatable)")
	f.StringSliceVar(&expect, "expect-workers", nil, "expected live workers: N, MODEL=N, MODEL/ROLE=N or /ROLE=N (repeatable)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "bound on each network call")
	f.IntVar(&cfg.ReferencePromptTokens, "reference-prompt-tokens", 1500, "prefill/decode links are priced by this prompt's KV crossing them")
	f.DurationVar(&cfg.MaxTransferTime, "max-transfer-time", 500*time.Millisecond, "a link that takes longer to move the reference prompt's KV fails")
	f.BoolVar(&cfg.Probe, "probe", false, "send a synthetic prompt (random words, no user data) twice through /v1/completions: checks prefix reuse and the TTFT the frontend adds (costs the deployment two requests)")
	f.StringVar(&cfg.ProbeModel, "probe-model", "", "model the probe asks for (default: the first with a live worker)")
	f.IntVar(&cfg.ProbeWords, "probe-words", 600, "the probe prompt's length in words (about as many tokens)")
	f.DurationVar(&cfg.ProbeTimeout, "probe-timeout", 60*time.Second, "bound on each probe request")
	f.DurationVar(&cfg.MaxFrontendTTFT, "max-frontend-ttft", 50*time.Millisecond, "frontend.ttft_added warns when the frontend adds more than this to the engine's TTFT")
	f.StringVar(&cfg.SameHost, "same-host", "auto", "look for leftover tandem processes and ports on this host (/proc): on, off, or auto (on when --frontend is a loopback address)")
	mtls.AddFlags(cmd.Flags())
	disc.AddFlags(cmd.Flags())
	f.Lookup("discovery").Usage = "the deployment's discovery backend: file, etcd, kube, or none (read only the frontend)"
	return cmd
}

// discoveryFix says how to delete a stale record on the backend; {id} is
// the worker.
func discoveryFix(d discovery.Config) string {
	switch d.Backend {
	case "file":
		return "remove " + filepath.Join(d.Dir, "{id}.json") + " (watchers drop it within one poll)"
	case "etcd":
		return "delete its key: etcdctl del " + d.Prefix + "workers/{id} (or wait --lease-ttl for its lease to expire)"
	case "kube":
		return "delete the pod whose " + discovery.DefaultAnnotation + " annotation names {id}, or remove the annotation"
	}
	return ""
}

func loadCAPool(path string, limit int64) (*x509.CertPool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("--tls-ca %s: %d bytes (limit %d)", path, fi.Size(), limit)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate", path)
	}
	return pool, nil
}
