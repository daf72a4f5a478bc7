// Package optest gives the operator's tests client-go configs for the
// real kube-apiserver of internal/kubetest, which (in the main module,
// which links no Kubernetes client) hands out only its URL, tokens and CA.
package optest

import (
	"time"

	"k8s.io/client-go/rest"

	"github.com/tandemllm/tandem/internal/kubetest"
)

// Config returns a client-go config for the admin identity.
func Config(s *kubetest.Server) *rest.Config { return ConfigFor(s, kubetest.AdminUser) }

// ConfigFor returns a client-go config for a user of the server's token
// file (kubetest.AdminUser, kubetest.StrangerUser, or one passed to
// kubetest.Start's extra users).
func ConfigFor(s *kubetest.Server, user string) *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     s.Token(user),
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA()},
		QPS:             1000,
		Burst:           2000,
		Timeout:         30 * time.Second,
	}
}
