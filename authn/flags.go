package authn

import "github.com/spf13/pflag"

// AddFlags registers --mtls-ca, --mtls-cert and --mtls-key, the cluster
// identity flags of frontend, worker and doctor.
func (m *Files) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&m.CA, "mtls-ca", "", "mutual TLS between frontend and workers: PEM of the cluster CA (tandem certs init); peers must chain to it")
	fs.StringVar(&m.Cert, "mtls-cert", "", "mutual TLS: this process's PEM certificate (role frontend or worker)")
	fs.StringVar(&m.Key, "mtls-key", "", "mutual TLS: this process's PEM private key")
}
