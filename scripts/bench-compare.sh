#!/usr/bin/env bash
# bench-compare.sh BASE [HEAD]: every Go benchmark of the module at two
# commits, in one run, on one machine. Test binaries of both commits are
# built first; then each package's benchmarks run BASE, HEAD, BASE, HEAD…
# (ROUNDS times, default 6: benchstat needs 6 samples for a confidence
# interval), so both see the same machine load, and benchstat
# (golang.org/x/perf, pinned) prints the comparison. A benchmark
# that exists at one commit only is listed with that commit's figures.
#
# Why alternate rather than run all of BASE then all of HEAD: on a shared
# machine load drifts over minutes; alternating spreads the drift over both.
#
#	scripts/bench-compare.sh 0bc68ad            # the issue-14 redesign's base against HEAD
#	ROUNDS=3 PKGS="./router ./router/kvindex" scripts/bench-compare.sh 0bc68ad
#
# Environment: ROUNDS, PKGS (default: every package with a Benchmark),
# BENCH (a -test.bench pattern, default .), BENCHTIME (default 1s),
# OUT (a directory for the raw outputs; default a temporary one).
# Benchmarks that need heavy external parts (llama.cpp, a Mooncake trace)
# follow their own environment variables and skip without them.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
base=${1:?usage: bench-compare.sh BASE [HEAD]}
head=${2:-HEAD}
rounds=${ROUNDS:-6}
bench=${BENCH:-.}
benchtime=${BENCHTIME:-1s}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; git worktree remove --force "$work/head" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/base" "$base"
git worktree add -q --detach "$work/head" "$head"
# Tests that read the shared reference files find them beside the checkout.
# (TANDEM_SHARED, or the folder beside this checkout, as internal/sharedfiles looks.)
sib="${TANDEM_SHARED:-$(cd .. && pwd)/shared}"
[ -d "$sib" ] && ln -sfn "$sib" "$work/shared"

pkgs=${PKGS:-$(grep -rlE '^func Benchmark' --include='*_test.go' . | xargs -n1 dirname | sort -u | tr '\n' ' ')}
echo "bench-compare: $base ($(git rev-parse --short "$base")) vs $head ($(git rev-parse --short "$head")), $rounds rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/summary.txt"

for p in $pkgs; do
	name=$(echo "${p#./}" | tr '/' '_')
	for c in base head; do
		if [ -d "$work/$c/$p" ]; then
			(cd "$work/$c" && go test -c -o "$work/$c-$name.test" "$p" >/dev/null 2>&1) || rm -f "$work/$c-$name.test"
		fi
	done
done

for r in $(seq "$rounds"); do
	for p in $pkgs; do
		name=$(echo "${p#./}" | tr '/' '_')
		for c in base head; do
			bin="$work/$c-$name.test"
			[ -x "$bin" ] || continue
			# Each binary runs in its package directory, as go test does.
			(cd "$work/$c/$p" && "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.benchmem) \
				>>"$out/$c.txt" 2>>"$out/$c.err" || echo "WARN: $c $p round $r failed (see $out/$c.err)" | tee -a "$out/summary.txt"
		done
	done
done

go run "$benchstat" "$out/base.txt" "$out/head.txt" | tee "$out/benchstat.txt"
echo "raw outputs in $out"
