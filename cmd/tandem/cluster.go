package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// addConfigFlag adds --config: a YAML file whose keys are the command's
// flag names. It is the component's configuration struct in file form:
// every flag fills one field, so the file and the command line cannot
// drift apart. Flags given on the command line win over the file.
func addConfigFlag(cmd *cobra.Command) *string {
	var path string
	cmd.Flags().StringVar(&path, "config", "", "YAML file of flag values (keys are flag names without --); command-line flags win")
	return &path
}

// setUp applies the --config file (command-line flags win) and builds the
// logger: the start of every command that takes --config.
func setUp(cmd *cobra.Command, configPath string) (*slog.Logger, error) {
	if err := applyConfigFile(cmd, configPath); err != nil {
		return nil, err
	}
	return newLogger(cmd)
}

func applyConfigFile(cmd *cobra.Command, path string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	fs := cmd.Flags()
	for k, v := range m {
		fl := fs.Lookup(k)
		if fl == nil || k == "config" {
			return fmt.Errorf("--config %s: unknown key %q (keys are the flags of `tandem %s`)", path, k, cmd.Name())
		}
		if fl.Changed {
			continue
		}
		if err := setFlag(fs, fl, v); err != nil {
			return fmt.Errorf("--config %s: %s: %w", path, k, err)
		}
	}
	return nil
}

func setFlag(fs *pflag.FlagSet, fl *pflag.Flag, v any) error {
	var s string
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = fmt.Sprint(e)
		}
		s = strings.Join(parts, ",")
	case nil:
		s = ""
	default:
		s = fmt.Sprint(x)
	}
	if err := fs.Set(fl.Name, s); err != nil {
		return err
	}
	// A file value is not a command-line value: a second file (or a later
	// reload) may still change it.
	fl.Changed = false
	return nil
}
