package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/authn"
)

func newCertsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "certs", Short: "Make the cluster's mTLS certificates (--mtls-ca, --mtls-cert, --mtls-key)"}
	var (
		dir                string
		frontends, workers int
		hosts              []string
		validity           time.Duration
	)
	init := &cobra.Command{
		Use:   "init",
		Short: "Create a cluster CA and a certificate per process in --dir",
		Long: `Creates DIR/ca.crt and ca.key (the cluster CA), and frontend-N.crt/.key and worker-N.crt/.key,
one pair per process. Start each process with --mtls-ca DIR/ca.crt --mtls-cert DIR/<name>.crt
--mtls-key DIR/<name>.key. Keys are written 0600 and never overwritten. Keep ca.key off the
serving hosts; ` + "`tandem certs issue`" + ` signs more certificates with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := certsDirFree(dir); err != nil {
				return err
			}
			names, err := authn.Init(dir, frontends, workers, hosts, validity)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %v\n", dir, names)
			return nil
		},
	}
	f := init.Flags()
	f.StringVar(&dir, "dir", "tandem-certs", "output directory (created 0700)")
	f.IntVar(&frontends, "frontends", 1, "frontend certificates to make")
	f.IntVar(&workers, "workers", 2, "worker certificates to make")
	f.StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1"}, "host names and IPs put in every certificate (for clients that check them)")
	f.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificates are valid")

	var name, role string
	issue := &cobra.Command{
		Use:   "issue",
		Short: "Sign one more process certificate with the CA in --dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := authn.ParseRole(role)
			if err != nil {
				return err
			}
			ca, err := authn.LoadCA(dir)
			if err != nil {
				return err
			}
			is, err := ca.Issue(name, r, hosts, validity)
			if err != nil {
				return err
			}
			if err := authn.WritePair(dir, name, is); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/%s.crt and %s.key\n", dir, name, name)
			return nil
		},
	}
	g := issue.Flags()
	g.StringVar(&dir, "dir", "tandem-certs", "directory holding ca.crt and ca.key; the pair is written there")
	g.StringVar(&name, "name", "", "the process's name (CommonName, shown in the peers' logs)")
	g.StringVar(&role, "role", "worker", "frontend, worker or monitor (reads workers' /metrics only: a Prometheus scraper)")
	g.StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1"}, "host names and IPs put in the certificate")
	g.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificate is valid")
	_ = issue.MarkFlagRequired("name")
	cmd.AddCommand(init, issue)
	return cmd
}

// certsDirFree refuses, before anything is written, a --dir that already
// holds certificates or keys: init never overwrites a key, and a CA
// there means the cluster has one.
func certsDirFree(dir string) error {
	var found []string
	for _, pat := range []string{"*.crt", "*.key"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		found = append(found, m...)
	}
	if len(found) == 0 {
		return nil
	}
	sort.Strings(found)
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); err == nil {
		return fmt.Errorf("certs init: %s already holds a cluster CA (ca.crt, ca.key) and %d certificate and key files; init never overwrites them: sign more with `tandem certs issue --dir %s --name NAME`, or pick a new --dir", dir, len(found), dir)
	}
	return fmt.Errorf("certs init: %s already holds %s; init never overwrites keys: pick a new --dir or remove them", dir, strings.Join(found, ", "))
}
