package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/tandemllm/tandem/discovery"
	"github.com/tandemllm/tandem/eventplane"
	"github.com/tandemllm/tandem/health"
)

// discoveryFlags are the discovery flags shared by `frontend` and `worker`.
type discoveryFlags struct {
	cfg       discovery.Config
	endpoints string
}

func (d *discoveryFlags) register(cmd *cobra.Command) {
	d.cfg = discovery.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&d.cfg.Backend, "discovery", d.cfg.Backend, "how frontends and workers find each other: file, etcd or kube")
	f.StringVar(&d.cfg.Dir, "discovery-dir", d.cfg.Dir, "file: the directory of worker records, shared by the processes of one host")
	f.StringVar(&d.endpoints, "etcd-endpoints", "http://127.0.0.1:2379", "etcd: comma-separated client URLs")
	f.StringVar(&d.cfg.Prefix, "discovery-prefix", d.cfg.Prefix, "etcd: key prefix of this deployment's records")
	f.StringVar(&d.cfg.EtcdAuth.CA, "etcd-ca", "", "etcd: PEM CA that signs etcd's server certificate (use https:// endpoints)")
	f.StringVar(&d.cfg.EtcdAuth.Cert, "etcd-cert", "", "etcd: PEM client certificate, for etcd's --client-cert-auth")
	f.StringVar(&d.cfg.EtcdAuth.Key, "etcd-key", "", "etcd: PEM private key of --etcd-cert")
	f.StringVar(&d.cfg.EtcdAuth.UserFile, "etcd-user-file", "", "etcd: file holding user:password of an etcd role-based user")
	f.DurationVar(&d.cfg.TTL, "lease-ttl", d.cfg.TTL, "how long a worker that stopped refreshing its record (killed, partitioned) stays routable")
	f.StringVar(&d.cfg.KubeNamespace, "kube-namespace", "", "kube: namespace of the worker pods (default: POD_NAMESPACE)")
	f.StringVar(&d.cfg.KubeSelector, "kube-selector", d.cfg.KubeSelector, "kube: label selector of the worker pods")
	f.StringVar(&d.cfg.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kube: kubeconfig file, for a process outside the cluster (default: $KUBECONFIG; empty: the pod's service account)")
	f.StringVar(&d.cfg.KubeService, "kube-service", d.cfg.KubeService, "kube: the workers' Service, whose EndpointSlices say which pods are ready (empty: the pods' Ready condition)")
}

func (d *discoveryFlags) open(board *health.Board, log *slog.Logger) (discovery.Registry, error) {
	cfg := d.cfg
	for _, e := range strings.Split(d.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, e)
		}
	}
	return discovery.Open(cfg, discovery.Common{Board: board, Logger: log})
}

func (d *discoveryFlags) describe() string {
	switch d.cfg.Backend {
	case "file":
		return "file " + d.cfg.Dir
	case "etcd":
		return "etcd " + d.endpoints + " " + d.cfg.Prefix
	case "kube":
		return "kube " + d.cfg.KubeSelector + " service " + d.cfg.KubeService
	}
	return d.cfg.Backend
}

// registerEventPlane adds the event-plane flags shared by `frontend` and
// `worker`.
func registerEventPlane(cmd *cobra.Command, c *eventplane.Config) {
	*c = eventplane.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&c.Plane, "event-plane", c.Plane, "how KV events reach routers: zmq (routers dial each worker) or nats (workers relay to a subject per model)")
	f.StringVar(&c.NATS, "nats", c.NATS, "nats: server URL, or embedded to run a NATS server in this process (on --nats-addr)")
	f.StringVar(&c.EmbeddedAddr, "nats-addr", c.EmbeddedAddr, "nats embedded: listen address of the in-process NATS server")
	f.StringVar(&c.SubjectPrefix, "nats-subject-prefix", c.SubjectPrefix, "nats: subject prefix, so deployments can share a NATS")
	f.StringVar(&c.Auth.TokenFile, "nats-token-file", "", "nats: file holding the NATS token; the embedded server refuses clients without it, clients send it")
	f.StringVar(&c.Auth.CA, "nats-tls-ca", "", "nats: PEM CA that signs the NATS server's certificate (clients) and, for the embedded server, the clients' (then required)")
	f.StringVar(&c.Auth.Cert, "nats-tls-cert", "", "nats: PEM certificate: the embedded server's (it then serves TLS), or a client's")
	f.StringVar(&c.Auth.Key, "nats-tls-key", "", "nats: PEM private key of --nats-tls-cert")
}

// addConfigFlag adds --config: a YAML file whose keys are the command's
// flag names. It is the component's configuration struct in file form:
// every flag fills one field, so the file and the command line cannot
// drift apart. Flags given on the command line win over the file.
func addConfigFlag(cmd *cobra.Command) *string {
	var path string
	cmd.Flags().StringVar(&path, "config", "", "YAML file of flag values (keys are flag names without --); command-line flags win")
	return &path
}

// setUp applies the --config file (command-line flags win) and builds the
// logger: the start of every command that takes --config.
func setUp(cmd *cobra.Command, configPath string) (*slog.Logger, error) {
	if err := applyConfigFile(cmd, configPath); err != nil {
		return nil, err
	}
	return newLogger(cmd)
}

func applyConfigFile(cmd *cobra.Command, path string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	fs := cmd.Flags()
	for k, v := range m {
		fl := fs.Lookup(k)
		if fl == nil || k == "config" {
			return fmt.Errorf("--config %s: unknown key %q (keys are the flags of `tandem %s`)", path, k, cmd.Name())
		}
		if fl.Changed {
			continue
		}
		if err := setFlag(fs, fl, v); err != nil {
			return fmt.Errorf("--config %s: %s: %w", path, k, err)
		}
	}
	return nil
}

func setFlag(fs *pflag.FlagSet, fl *pflag.Flag, v any) error {
	var s string
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = fmt.Sprint(e)
		}
		s = strings.Join(parts, ",")
	case nil:
		s = ""
	default:
		s = fmt.Sprint(x)
	}
	if err := fs.Set(fl.Name, s); err != nil {
		return err
	}
	// A file value is not a command-line value: a second file (or a later
	// reload) may still change it.
	fl.Changed = false
	return nil
}
