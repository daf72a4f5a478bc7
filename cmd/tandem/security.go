package main

import (
	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/httpapi"
)

// clientAuthFlags are the OpenAI server's client authentication: API keys
// and TLS (docs/security.md).
type clientAuthFlags struct {
	keyFile string
	fe      *httpapi.Config
}

func (c *clientAuthFlags) register(cmd *cobra.Command, fe *httpapi.Config, tls *httpapi.TLSFiles) {
	c.fe = fe
	f := cmd.Flags()
	f.StringVar(&c.keyFile, "api-key-file", "", "file of API keys, one a line (# comments): every /v1 request needs \"Authorization: Bearer <key>\"; /health and /live stay open")
	f.BoolVar(&fe.ProtectMetrics, "protect-metrics", false, "with --api-key-file: /metrics needs a key too")
	f.StringVar(&tls.Cert, "tls-cert", "", "serve the OpenAI API over HTTPS with this PEM certificate chain (with --tls-key)")
	f.StringVar(&tls.Key, "tls-key", "", "PEM private key of --tls-cert")
}

// apply loads the key file.
func (c *clientAuthFlags) apply() error {
	if c.keyFile == "" {
		return nil
	}
	k, err := httpapi.LoadAPIKeys(c.keyFile)
	if err != nil {
		return err
	}
	c.fe.APIKeys = k
	return nil
}
