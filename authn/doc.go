// Package authn is how Tandem's processes know each other: mutual TLS
// between frontends and workers from one flag set (--mtls-ca, --mtls-cert,
// --mtls-key), with each certificate naming its process (CommonName) and
// its role (OrganizationalUnit "frontend" or "worker"), and the
// certificate authority that `tandem certs init` creates for a quick start.
//
// Identity is the certificate, not the address: workers come and go under
// addresses discovery publishes, so a client checks that the server's
// chain leads to the cluster CA and that its role is the one it expects,
// and does not match host names (the SPIFFE model; see
// https://github.com/spiffe/spiffe/blob/main/standards/X509-SVID.md,
// "Validation"). Only the standard library's crypto is used.
package authn
