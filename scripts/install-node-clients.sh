#!/usr/bin/env bash
# Installs the official API clients that the client-compatibility tests
# (httpapi's TestNodeClients*) drive against `tandem serve`: the openai and
# @anthropic-ai/sdk npm packages and the Vercel AI SDK with its
# OpenAI-compatible provider. Exact versions (npm i -E), into a directory
# named after a hash of the version list, so a version bump installs afresh
# and an unchanged list is a no-op.
#
#   scripts/install-node-clients.sh            # into ~/.cache/tandem/node-clients-<hash>
#   TANDEM_CACHE=/x scripts/install-node-clients.sh
#
# Prints the directory (it holds node_modules) on success; the tests find it
# through $TANDEM_NODE_CLIENTS, else the newest matching directory in the
# cache. The versions run on Node.js 20 (openai 7 and ai 7 need Node 22).
set -euo pipefail

PACKAGES=(
	"openai@6.30.1"
	"@anthropic-ai/sdk@0.71.2"
	"ai@6.0.333"
	"@ai-sdk/openai-compatible@2.0.92"
	"zod@4.1.13"
)

command -v node >/dev/null 2>&1 || { echo "install-node-clients: node is missing" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "install-node-clients: npm is missing" >&2; exit 1; }

cache="${TANDEM_CACHE:-$HOME/.cache/tandem}"
hash=$(printf '%s\n' "${PACKAGES[@]}" | sha256sum | cut -c1-12)
dest="$cache/node-clients-$hash"

if [[ -f "$dest/.complete" ]]; then
	echo "$dest"
	exit 0
fi

tmp=$(mktemp -d "$cache/node-clients-tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(
	cd "$tmp"
	printf '{"name":"tandem-node-clients","private":true,"type":"module"}\n' >package.json
	npm i -E --no-audit --no-fund --loglevel=error "${PACKAGES[@]}" >&2
)
printf '%s\n' "${PACKAGES[@]}" >"$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$dest"
