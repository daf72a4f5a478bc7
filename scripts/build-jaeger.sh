#!/usr/bin/env bash
# Builds the Jaeger all-in-one binary (v2, an OpenTelemetry Collector
# distribution with an in-memory store and the query UI/API) from the Go
# module proxy and caches it at ~/.cache/tandem/bin/jaeger-$VERSION, for the
# tracing test that reads a disaggregated request's trace back from Jaeger's
# query API (e2e TestJaegerTrace; TANDEM_JAEGER points at the binary).
# The build happens in a throwaway module outside the repository so that
# Jaeger's dependency tree never enters Tandem's go.mod.
#
# Cost: about 7 minutes on 2 cores the first time; a cached binary is reused
# (an existence and version check only).
set -euo pipefail
VERSION="${JAEGER_VERSION:-v1.76.0}"
CACHE="${TANDEM_CACHE:-$HOME/.cache/tandem}"
BIN="$CACHE/bin/jaeger-$VERSION"
if [ -x "$BIN" ] && [ -s "$BIN.version" ] && grep -qx "$VERSION" "$BIN.version"; then
	echo "$BIN"
	exit 0
fi
mkdir -p "$CACHE/bin"
# "go install pkg@version" refuses a module whose go.mod has replace
# directives (Jaeger's pins github.com/Shopify/sarama), so the build runs in
# a throwaway module that requires Jaeger and copies its replace lines.
WORK="$CACHE/build/jaeger-$VERSION"
mkdir -p "$WORK"
cd "$WORK"
cat >go.mod <<MOD
module tandem.local/jaeger-build

go 1.25

require github.com/jaegertracing/jaeger $VERSION
MOD
cat >tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
GO
export GOFLAGS=-mod=mod
modfile=$(go mod download -json "github.com/jaegertracing/jaeger@$VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$modfile" ] || { echo "could not download jaeger@$VERSION" >&2; exit 1; }
sed -n 's#^replace[[:space:]]*\([^ ]*\) => \([^ ]*\) \(v[^ ]*\)$#\1=\2@\3#p' "$modfile" | while read -r r; do
	go mod edit -replace "$r"
done
go mod tidy >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger >&2
mv "$BIN.tmp" "$BIN"
echo "$VERSION" >"$BIN.version"
echo "$BIN"
