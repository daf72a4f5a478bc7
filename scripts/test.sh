#!/usr/bin/env bash
# Runs the test suite as `go test` does and ends with every skipped test
# and its reason (most name what installs the missing piece: the fixtures
# directory TANDEM_SHARED, scripts/fetch-qwen3-tokenizer.sh, ...).
#
#   scripts/test.sh                         # go test ./...
#   scripts/test.sh ./engine/...            # any go test arguments
#   scripts/test.sh -C control/operator     # the operator's module (its own go.mod)
set -uo pipefail
cd "$(dirname "$0")/.."
go build -o "${TMPDIR:-/tmp}/tandem-testsummary" ./internal/testsummary || exit 2
if [ "${1:-}" = -C ]; then
	cd "$2" || exit 2
	shift 2
fi
go test -json "${@:-./...}" | "${TMPDIR:-/tmp}/tandem-testsummary"
