package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tandemllm/tandem/internal/kubeapi"
)

// Config selects and configures a backend; it is what the --discovery*
// flags of `tandem frontend` and `tandem worker` fill.
type Config struct {
	// Backend is mem, file, etcd or kube (--discovery).
	Backend string
	// Dir is the file backend's directory (--discovery-dir).
	Dir string
	// EtcdEndpoints are etcd's client URLs (--etcd-endpoints).
	EtcdEndpoints []string
	// Prefix scopes the etcd keys (--discovery-prefix), so several
	// deployments can share one etcd.
	Prefix string
	// TTL is the lease time-to-live (--lease-ttl).
	TTL time.Duration
	// PollInterval is the file backend's re-read period.
	PollInterval time.Duration
	// KubeNamespace, KubeSelector and KubeService configure the kube
	// backend (--kube-namespace, --kube-selector, --kube-service).
	KubeNamespace, KubeSelector, KubeService string
	// EtcdAuth is etcd's TLS and user (--etcd-ca, --etcd-cert,
	// --etcd-key, --etcd-user-file).
	EtcdAuth EtcdAuth
	// Kubeconfig is a kubeconfig file for the kube backend (--kubeconfig,
	// default $KUBECONFIG); empty: the pod's service account.
	Kubeconfig string
}

// DefaultConfig returns the flag defaults: the file backend in a private
// per-user directory (DefaultDir), so that a frontend and workers started
// on one host by one user with no flags find each other, and nobody else
// can plant records there.
func DefaultConfig() Config {
	return Config{Backend: "file", Dir: DefaultDir(), Prefix: "/tandem/", TTL: DefaultTTL,
		KubeSelector: "app.kubernetes.io/component=tandem-worker", KubeService: "tandem-workers"}
}

// DefaultDir is $XDG_RUNTIME_DIR/tandem-discovery when XDG_RUNTIME_DIR is
// set (a per-user 0700 tmpfs on systemd hosts), else
// tandem-discovery-<uid> under the temporary directory. NewFile creates it
// 0700 and refuses it if another user owns it.
func DefaultDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "tandem-discovery")
	}
	return filepath.Join(os.TempDir(), "tandem-discovery-"+strconv.Itoa(os.Geteuid()))
}

// Open returns the backend cfg names. mem is refused: it cannot reach
// another process, so a frontend and workers using it would silently never
// meet.
func Open(cfg Config, c Common) (Registry, error) {
	c.TTL = cfg.TTL
	switch cfg.Backend {
	case "file":
		return NewFile(FileConfig{Common: c, Dir: cfg.Dir, PollInterval: cfg.PollInterval})
	case "etcd":
		return NewEtcd(EtcdConfig{Common: c, Endpoints: cfg.EtcdEndpoints, Prefix: cfg.Prefix, Auth: cfg.EtcdAuth})
	case "kube":
		var clients *kubeapi.Client
		var err error
		if cfg.Kubeconfig != "" {
			clients, err = NewKubeconfigClients(cfg.Kubeconfig)
		} else {
			clients, err = NewInClusterClients()
		}
		if err != nil {
			return nil, err
		}
		return NewKube(KubeConfig{Common: c, Clients: clients, Namespace: cfg.KubeNamespace, Selector: cfg.KubeSelector, Service: cfg.KubeService})
	case "mem":
		return nil, fmt.Errorf("discovery: the mem backend only works inside one process; use file, etcd or kube between processes")
	}
	return nil, fmt.Errorf("discovery: unknown backend %q (want file, etcd or kube)", cfg.Backend)
}
