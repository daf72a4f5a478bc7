package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newOperatorCmd is what became of `tandem operator`: the operator is its
// own binary, tandem-operator, so that controller-runtime is linked into it
// alone. The command stays to say where it went.
func newOperatorCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "operator",
		Short:              "Moved: the TandemDeployment operator is the tandem-operator binary",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("the operator is its own binary now: run tandem-operator with the same flags (cd control/operator && go build ./cmd/tandem-operator: its own Go module; the image ships /tandem-operator; docs/kubernetes.md)")
		},
	}
}
