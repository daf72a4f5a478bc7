package eventplane

import "github.com/spf13/pflag"

// AddFlags resets c to DefaultConfig and registers the event-plane flags
// shared by `frontend` and `worker`.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	*c = DefaultConfig()
	fs.StringVar(&c.Plane, "event-plane", c.Plane, "how KV events reach routers: zmq (routers dial each worker) or nats (workers relay to a subject per model)")
	fs.StringVar(&c.NATS, "nats", c.NATS, "nats: server URL, or embedded to run a NATS server in this process (on --nats-addr)")
	fs.StringVar(&c.EmbeddedAddr, "nats-addr", c.EmbeddedAddr, "nats embedded: listen address of the in-process NATS server")
	fs.StringVar(&c.SubjectPrefix, "nats-subject-prefix", c.SubjectPrefix, "nats: subject prefix, so deployments can share a NATS")
	fs.StringVar(&c.Auth.TokenFile, "nats-token-file", "", "nats: file holding the NATS token; the embedded server refuses clients without it, clients send it")
	fs.StringVar(&c.Auth.CA, "nats-tls-ca", "", "nats: PEM CA that signs the NATS server's certificate (clients) and, for the embedded server, the clients' (then required)")
	fs.StringVar(&c.Auth.Cert, "nats-tls-cert", "", "nats: PEM certificate: the embedded server's (it then serves TLS), or a client's")
	fs.StringVar(&c.Auth.Key, "nats-tls-key", "", "nats: PEM private key of --nats-tls-cert")
}
