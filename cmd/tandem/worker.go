package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/engines"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/nodes/serve"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/process"
)

func newWorkerCmd() *cobra.Command {
	cfg := serve.DefaultConfig() // the --openai-addr (vLLM-compatible) mode
	cfg.Workers = 1
	wcfg := worker.DefaultConfig() // the fleet mode
	var eng engines.Config
	disc := discovery.DefaultConfig()
	var tf tracingFlags
	var keyFile string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run one worker: registered in a fleet (default), or with --openai-addr serving the OpenAI API like vLLM",
		Long: `Runs one engine.

By default the worker joins a fleet: it serves the gRPC request plane on --rp-addr, publishes its
record (request-plane address, KV event endpoint, KV layout, capacity) through --discovery, and
a ` + "`tandem frontend`" + ` finds it there. SIGTERM deregisters it first, lets in-flight requests finish,
then exits.

With --openai-addr the worker answers the OpenAI API itself, like a vLLM server: token-id
prompts, usage with cached tokens, vllm:-named Prometheus metrics on /metrics, and (mocker) vLLM
KV events over ZMQ. Other routers can be tested against it as if it were vLLM.`,
		Args: cobra.NoArgs,
	}
	configPath := addConfigFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := setUp(cmd, *configPath)
		if err != nil {
			return err
		}
		stopTracing, err := tf.start(cmd.Context(), wcfg.ID, log)
		if err != nil {
			return err
		}
		defer stopTracing()
		if cfg.HTTPAddr != "" {
			if cmd.Flags().Changed("rp-addr") {
				return errors.New("--openai-addr and --rp-addr exclude each other: a worker either serves the OpenAI API itself or joins a fleet")
			}
			if err := cfg.Frontend.LoadKeyFile(keyFile); err != nil {
				return err
			}
			cfg.VLLMPD.TransferBudget, cfg.VLLMPD.MTLS, cfg.VLLMPD.ConnLimits = wcfg.Transfer.Budget, wcfg.MTLS, wcfg.ConnLimits
			cfg.WorkerIDs = []string{wcfg.ID}
			if cfg.WorkerIDs[0] == "" {
				cfg.WorkerIDs[0] = "worker-0"
			}
			eng.VLLMCompatible = true
			return runOpenAIWorker(cmd, cfg, &eng, log)
		}
		return runFleetWorker(cmd, wcfg, &eng, disc, log)
	}
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "openai-addr", "", "serve the OpenAI API here like a vLLM server (no fleet, no discovery)")
	f.StringVar(&wcfg.ID, "id", "", "worker id, unique in the fleet and reported in X-Tandem-Worker (default: host-pid; worker-0 with --openai-addr)")
	f.StringVar(&wcfg.RequestPlaneAddr, "rp-addr", wcfg.RequestPlaneAddr, "listen address of the gRPC request plane (port 0: any free port)")
	f.StringVar(&wcfg.AdvertiseHost, "advertise-host", "", "host put in the published addresses when a listen address is a wildcard (default: the host name)")
	f.StringVar(&wcfg.KVConfig, "kv-config-fingerprint", "", "the deployment's KV configuration fingerprint (set by the operator); workers with different ones never exchange KV")
	f.StringVar(&wcfg.Role, "role", wcfg.Role, "aggregated, prefill or decode")
	f.BoolVar(&cfg.VLLMPD.Enabled, "kv-transfer-params", false, "with --openai-addr: play both roles of vLLM's NixlConnector P/D protocol (kv_transfer_params), as a vLLM server with a KV connector does")
	f.StringVar(&cfg.VLLMPD.AdvertiseHost, "kv-transfer-advertise-host", "", "with --kv-transfer-params: the remote_host this worker puts in kv_transfer_params (default: the listen host)")
	f.StringVar(&cfg.VLLMPD.Peers, "kv-transfer-peers", "loopback", "with --kv-transfer-params: side channels a decode leg may pull from, whatever remote_host:remote_port a request names: a comma list of loopback, IP addresses, CIDR prefixes, host names, host:port, or any (unsafe: a client picks where the worker connects, token in hand)")
	f.StringVar(&cfg.VLLMPD.ListenHost, "kv-transfer-listen-host", "", "with --kv-transfer-params: where the KV transfer node listens (default 127.0.0.1)")
	f.StringVar(&wcfg.KVTransferAddr, "kv-transfer-addr", wcfg.KVTransferAddr, "--role decode: where the KV transfer node receives blocks from prefill workers (port 0: any free port)")
	wcfg.Transfer.AddFlags(f, "--role prefill|decode, or --kv-transfer-params: ", "--role prefill|decode: ")
	cl := &wcfg.ConnLimits
	f.IntVar(&cl.MaxConns, "conn-max", cl.MaxConns, "open connections each of the worker's ports (request plane, KV transfer, metrics, vLLM P/D side channel) admits (0: no cap); past it a connection is closed at accept")
	f.IntVar(&cl.MaxPerSource, "conn-max-per-source", cl.MaxPerSource, "open connections one source address may hold on each port (0: no cap), so one process cannot take --conn-max")
	f.DurationVar(&cl.Handshake, "conn-handshake-timeout", cl.Handshake, "a connection that has not finished its handshake (TLS, HTTP/2 preface, first request or frame) this long after accept is closed (0: no bound)")
	f.DurationVar(&cl.Idle, "conn-idle-timeout", cl.Idle, "a connection that reads nothing this long is closed (0: the KV transfer port's 10 minutes, no bound elsewhere)")
	f.StringVar(&wcfg.MetricsAddr, "metrics-addr", "", "serve the engine's /metrics and the worker's /health here (empty: nowhere)")
	f.DurationVar(&wcfg.DeregisterDelay, "deregister-delay", wcfg.DeregisterDelay, "on SIGTERM, how long to keep taking requests after deregistering, while frontends hear of it")
	process.AddDrainFlag(f, &cfg.DrainTimeout)
	eng.AddFlags(cmd.Flags())
	disc.AddFlags(cmd.Flags())
	wcfg.EventPlane.AddFlags(cmd.Flags())
	cfg.Frontend.AddAuthFlags(f, &keyFile, &cfg.TLS)
	wcfg.MTLS.AddFlags(cmd.Flags())
	tf.register(cmd, "tandem-worker")
	f.StringVar(&wcfg.TransferPeers, "transfer-peers", worker.PeersDiscovery, "--role prefill: where KV may be sent: discovery (only transfer addresses published in discovery) or any (whatever address a frontend names; unsafe)")
	return cmd
}

// runFleetWorker serves one engine on the request plane and registers it.
func runFleetWorker(cmd *cobra.Command, wcfg worker.Config, eng *engines.Config, disc discovery.Config, log *slog.Logger) error {
	if wcfg.ID == "" {
		id, err := worker.DefaultID(disc.Backend == "kube")
		if err != nil {
			return err
		}
		wcfg.ID = id
	}
	wcfg.Version = version
	wcfg.KVEventsFormat = eng.KVFormat
	if wcfg.EventPlane.Plane == "nats" && eng.Mock.KVEvents.ReplayEndpoint == "" {
		// The relay joins the engine's PUB socket after the engine starts;
		// replay gives it what ZMQ drops meanwhile.
		eng.Mock.KVEvents.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	if d, err := cmd.Flags().GetDuration("drain-timeout"); err == nil {
		wcfg.DrainTimeout = d
	}
	if eng.Kind == "upstream" && len(eng.Up.URLs) != 1 {
		return fmt.Errorf("a fleet worker fronts one server: got %d --upstream", len(eng.Up.URLs))
	}
	if eng.Kind == "upstream" && eng.Up.API == upstream.APISGLang {
		if err := eng.Up.ResolveTargets(cmd.Context(), log); err != nil {
			return err
		}
		if n := eng.Up.Workers(); n > 1 {
			// One fleet worker is one routable target; an SGLang server
			// with N attention-DP ranks is N of them.
			return fmt.Errorf("--upstream %s has %d attention-DP ranks, and a fleet worker fronts one: use tandem serve --engine upstream, which makes a worker per rank", eng.Up.URLs[0], n)
		}
	}
	model, factory, err := eng.Build(log)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	board := health.NewBoard(log, nil)
	reg, err := discovery.Open(disc, discovery.Common{Board: board, Logger: log})
	if err != nil {
		return err
	}
	defer reg.Close()
	e, err := factory(0)
	if err != nil {
		return err
	}
	w, err := worker.Start(ctx, wcfg, e, model, worker.Options{Registry: reg, Board: board, Logger: log})
	if err != nil {
		_ = e.Close()
		return err
	}
	rec := w.Record()
	fmt.Fprintf(cmd.OutOrStdout(), "Tandem worker %s (%s engine, %s)\n  request-plane: %s\n  model:         %s\n  kv-layout:     %s\n  discovery:     %s\n",
		rec.ID, rec.Engine, rec.Role, rec.RequestPlane, rec.Model, rec.KVLayout.Fingerprint(), disc.Describe())
	if rec.KVEvents.Endpoint != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "  kv-events:     %s\n", rec.KVEvents.Endpoint)
	}
	if rec.KVTransfer.Addr != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "  kv-transfer:   %s\n", rec.KVTransfer.Addr)
	}
	if rec.KVEvents.Subject != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "  kv-relay:      nats %s\n", rec.KVEvents.Subject)
	}
	syncOut(cmd)
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("draining", "timeout", wcfg.DrainTimeout)
	case runErr = <-w.Done():
		log.Error("request plane stopped", "err", runErr)
	}
	if err := process.Drain(log, wcfg.DrainTimeout, w.Shutdown); err != nil {
		return err
	}
	return runErr
}

// runOpenAIWorker is the vLLM-compatible mode: one engine behind its own
// OpenAI server.
func runOpenAIWorker(cmd *cobra.Command, cfg serve.Config, eng *engines.Config, log *slog.Logger) error {
	model, factory, err := eng.Build(log)
	if err != nil {
		return err
	}
	sys, err := serve.Start(cfg, model, factory, log)
	if err != nil {
		return err
	}
	w := sys.Workers[0]
	fmt.Fprintf(cmd.OutOrStdout(), "Tandem worker %s (%s engine)\n  url:     %s/v1\n  model:   %s\n", w.ID, w.Info.Kind, sys.URL(), model.Name)
	if ep := kvEndpoint(sys); ep != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "  kv-events: %s\n", ep)
	}
	select {
	case <-cmd.Context().Done():
	case err := <-sys.Done():
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return process.Drain(log, cfg.DrainTimeout, sys.Shutdown)
}

// kvEndpoint reports where worker 0 publishes KV events, if its engine does.
func kvEndpoint(sys *serve.System) string {
	if e, ok := sys.Engine(0).(engine.KVEventsPublisher); ok {
		return e.KVEventsEndpoint()
	}
	return ""
}

// syncOut flushes the banner when stdout is a file or pipe that buffers.
func syncOut(cmd *cobra.Command) {
	if f, ok := cmd.OutOrStdout().(*os.File); ok {
		_ = f.Sync()
	}
}
