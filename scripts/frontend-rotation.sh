#!/usr/bin/env bash
# Compares the frontend's cost across builds of `tandem` in one sitting
# (issue 32's "within noise of before, in one run"): one instant upstream,
# one `tandem serve --engine upstream` per build in front of it, all
# running at once, and `tandem bench frontend-overhead` against each in a
# rotated order every round (odd rounds forward, even rounds backward, so
# neither position nor time favours one build). Prints one line a round
# and, at the end, each build's mean and its difference from the first
# build's, with how many rounds it was higher and lower.
#
#   scripts/frontend-rotation.sh ROUNDS LEVEL BIN...
#   go build -o /tmp/before ./cmd/tandem   # in the tree of the base commit
#   go build -o /tmp/after ./cmd/tandem
#   scripts/frontend-rotation.sh 16 1 /tmp/before /tmp/after    # added TTFT p50 at c = 1, ms
#   scripts/frontend-rotation.sh 10 16 /tmp/before /tmp/after   # streamed req/s at c = 16
#
# At level 1 the figure is the added TTFT p50 (frontend minus direct, ms);
# at any other level it is the frontend's streamed requests per second
# (its Little's-law output rate over the 16 output tokens). The upstream
# is the first build's worker, the bench client the last build's. Ports
# 18301 and 18311 on (18311 + the number of builds) must be free on
# loopback.
set -euo pipefail
if [ $# -lt 3 ]; then
	sed -n '2,22p' "$0" >&2
	exit 2
fi
rounds=$1 level=$2
shift 2
bins=("$@")
n=${#bins[@]}
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
logs=$(mktemp -d)
"${bins[0]}" worker --openai-addr 127.0.0.1:18301 --instant --kv-events off >"$logs/upstream.log" 2>&1 &
pids+=($!)
wait_up() {
	for _ in $(seq 300); do
		curl -sf -o /dev/null "$1" && return 0
		sleep 0.1
	done
	echo "frontend-rotation: $1 did not answer within 30 s (logs in $logs)" >&2
	exit 1
}
wait_up http://127.0.0.1:18301/health
for i in "${!bins[@]}"; do
	"${bins[$i]}" serve --engine upstream --upstream http://127.0.0.1:18301 --http-addr 127.0.0.1:$((18311 + i)) \
		--planner-listen "" >"$logs/frontend-$i.log" 2>&1 &
	pids+=($!)
done
for i in "${!bins[@]}"; do wait_up http://127.0.0.1:$((18311 + i))/health; done
run() {
	"${bins[n - 1]}" bench frontend-overhead --url http://127.0.0.1:18301 --url "http://127.0.0.1:$1" --levels "$level" \
		--output 16 --requests 1000 --warmup 20 --scrape-every 0 2>&1 |
		awk -v l="$level" '$1 == l && $2 ~ /^[0-9.]+$/ { if (l == 1) print $6; else printf "%.0f\n", $NF / 16 }'
}
results=$logs/results
for r in $(seq "$rounds"); do
	vals=()
	for j in $(seq 0 $((n - 1))); do
		if [ $((r % 2)) = 1 ]; then i=$(((j + r) % n)); else i=$(((n - 1 - j + r) % n)); fi
		vals[i]=$(run $((18311 + i)))
	done
	echo "round $r: ${vals[*]}" | tee -a "$results"
done
awk -v n="$n" '{ for (i = 1; i <= n; i++) { v[i] = $(i + 2); s[i] += v[i] }
	for (i = 2; i <= n; i++) { if (v[i] > v[1]) hi[i]++; else if (v[i] < v[1]) lo[i]++ } }
	END { for (i = 1; i <= n; i++) { printf "build %d: mean %.3f", i, s[i] / NR
		if (i > 1) printf ", minus build 1 %+.3f, higher in %d rounds, lower in %d", (s[i] - s[1]) / NR, hi[i], lo[i]
		printf "\n" } }' "$results"
