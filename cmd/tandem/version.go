package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit may be set at link time (the Dockerfile does, from its
// build arguments, because a container build has no .git to stamp from):
//
//	-ldflags "-X main.version=v0.3.0 -X main.commit=0123abc"
//
// Left empty, they come from the build info the Go toolchain stamps: the
// main module's version (from the VCS tag, or a pseudo-version) and
// vcs.revision.
var version, commit string

// buildVersion is what `tandem version` prints: the module version, the
// commit (with "-dirty" when the tree had uncommitted changes) and the Go
// toolchain. Parts that nothing stamped read "unknown", never a made-up
// default.
func buildVersion() string {
	v, c, dirty := version, commit, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if c == "" {
					c = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "unknown"
	}
	if c == "" {
		c = "unknown"
	} else if dirty && commit == "" {
		c += "-dirty"
	}
	return fmt.Sprintf("tandem %s (commit %s, %s %s/%s)", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version, commit and Go toolchain", Run: func(cmd *cobra.Command, _ []string) {
		fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
	}}
}
