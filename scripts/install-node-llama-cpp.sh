#!/usr/bin/env bash
# Installs node-llama-cpp (llama.cpp's prebuilt libllama for linux-x64, with
# a Node binding) into the Tandem cache, for the native engine's llama.cpp
# comparison tests and benchmark (engine/native/llamacpp_test.go). Pinned with
# `npm i -E`: newer releases may fail `npm ci`. Nothing goes into the
# repository; NODE_LLAMA_CPP_SKIP_DOWNLOAD keeps the postinstall from
# compiling or fetching anything beyond the npm packages.
#
#   scripts/install-node-llama-cpp.sh     # into ~/.cache/tandem/node-llama-cpp-3.21.1
#
# Idempotent: exits at once when the pinned version is installed. Prints the
# directory on success.
set -euo pipefail
VERSION=3.21.1
cache="${TANDEM_CACHE:-$HOME/.cache/tandem}"
dest="$cache/node-llama-cpp-$VERSION"
pkg="$dest/node_modules/node-llama-cpp/package.json"
if [[ -f "$pkg" ]] && grep -q "\"version\": \"$VERSION\"" "$pkg"; then
	echo "$dest"
	exit 0
fi
mkdir -p "$dest"
cd "$dest"
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i -E --no-audit --no-fund --loglevel=error "node-llama-cpp@$VERSION" >&2
grep -q "\"version\": \"$VERSION\"" "$pkg"
echo "$dest"
