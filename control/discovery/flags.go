package discovery

import (
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// DefaultEtcdEndpoint is --etcd-endpoints' default.
const DefaultEtcdEndpoint = "http://127.0.0.1:2379"

// AddFlags registers the --discovery* flags shared by `frontend`, `worker`
// and `doctor`, with c's values as defaults (start from DefaultConfig).
// --etcd-endpoints fills EtcdEndpoints (DefaultEtcdEndpoint when empty).
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	if len(c.EtcdEndpoints) == 0 {
		c.EtcdEndpoints = []string{DefaultEtcdEndpoint}
	}
	fs.StringVar(&c.Backend, "discovery", c.Backend, "how frontends and workers find each other: file, etcd or kube")
	fs.StringVar(&c.Dir, "discovery-dir", c.Dir, "file: the directory of worker records, shared by the processes of one host")
	fs.Var((*commaList)(&c.EtcdEndpoints), "etcd-endpoints", "etcd: comma-separated client URLs")
	fs.StringVar(&c.Prefix, "discovery-prefix", c.Prefix, "etcd: key prefix of this deployment's records")
	fs.StringVar(&c.EtcdAuth.CA, "etcd-ca", "", "etcd: PEM CA that signs etcd's server certificate (use https:// endpoints)")
	fs.StringVar(&c.EtcdAuth.Cert, "etcd-cert", "", "etcd: PEM client certificate, for etcd's --client-cert-auth")
	fs.StringVar(&c.EtcdAuth.Key, "etcd-key", "", "etcd: PEM private key of --etcd-cert")
	fs.StringVar(&c.EtcdAuth.UserFile, "etcd-user-file", "", "etcd: file holding user:password of an etcd role-based user")
	fs.DurationVar(&c.TTL, "lease-ttl", c.TTL, "how long a worker that stopped refreshing its record (killed, partitioned) stays routable")
	fs.StringVar(&c.KubeNamespace, "kube-namespace", "", "kube: namespace of the worker pods (default: POD_NAMESPACE)")
	fs.StringVar(&c.KubeSelector, "kube-selector", c.KubeSelector, "kube: label selector of the worker pods")
	AddKubeconfigFlag(fs, &c.Kubeconfig)
	fs.StringVar(&c.KubeService, "kube-service", c.KubeService, "kube: the workers' Service, whose EndpointSlices say which pods are ready (empty: the pods' Ready condition)")
}

// AddKubeconfigFlag registers --kubeconfig, the one definition of every
// tandem command that reaches a Kubernetes API server (discovery's kube
// backend, the planner's actuators): default $KUBECONFIG, empty meaning
// the pod's service account.
func AddKubeconfigFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "kubeconfig", os.Getenv("KUBECONFIG"), "kube: kubeconfig file, for a process outside the cluster (default: $KUBECONFIG; empty: the pod's service account)")
}

// Describe is the banner's discovery line: the backend and where it looks.
func (c Config) Describe() string {
	switch c.Backend {
	case "file":
		return "file " + c.Dir
	case "etcd":
		return "etcd " + strings.Join(c.EtcdEndpoints, ",") + " " + c.Prefix
	case "kube":
		return "kube " + c.KubeSelector + " service " + c.KubeService
	}
	return c.Backend
}

// commaList is a string flag holding a comma-separated list; blanks
// around and between the items are dropped.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }
func (l *commaList) Type() string   { return "string" }

func (l *commaList) Set(s string) error {
	*l = nil
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*l = append(*l, e)
		}
	}
	return nil
}
