//go:build tools

// Package deps pins module versions during bootstrap.
package deps

import (
	_ "github.com/ardanlabs/jinja"
	_ "github.com/dlclark/regexp2"
	_ "github.com/go-zeromq/zmq4"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/pkoukk/tiktoken-go"
	_ "github.com/pkoukk/tiktoken-go-loader"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "github.com/vmihailenco/msgpack/v5"
	_ "github.com/zeebo/xxh3"
	_ "golang.org/x/text/unicode/norm"
	_ "google.golang.org/grpc"
	_ "gopkg.in/yaml.v3"
)
