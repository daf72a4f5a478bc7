#!/usr/bin/env bash
# The first hour's timings (issue 38) on a fresh clone with empty Go module
# and build caches, each phase with caches of its own so that none warms
# another:
#
#   serve    `go run ./cmd/tandem serve` (the README's first command) until
#            the README's curl gets a chat completion: seconds to the
#            banner and to that first answer, and the CPU seconds go run
#            and its compiles took (module download, compile, link)
#   test     `go test ./...` (the README's test command) to its end
#   compile  the compile alone, cumulative in one cache: `go build
#            ./cmd/tandem`, then every test binary of the main module
#            (`go test -run '^$' ./...`), then the operator's module
#            (control/operator, its own go.mod: `go build
#            ./cmd/tandem-operator` there, what controller-runtime and
#            client-go add, and its test binaries); CPU seconds (user+sys)
#            and wall for each step, so the cost of a dependency reads on a
#            loaded machine too
#
#   scripts/cold-start.sh                 # serve, then test
#   scripts/cold-start.sh serve           # any of serve, test, compile
#   KEEP=DIR scripts/cold-start.sh test   # keep the logs in DIR
#
# The clone is of HEAD (commit first: uncommitted changes are not in it).
# Modules come from GOPROXY (network needed); GOFLAGS gets -modcacherw so the
# caches can be removed. The test phase runs with the caller's environment:
# TANDEM_SHARED, TANDEM_KUBE_APISERVER, ... decide what runs rather than
# skips, as in .ci/run. Each phase prints one line:
#   cold-start serve: banner 41.2 s, first completion 41.9 s, go run's CPU 75 s (load 1.02 -> 1.95, 2 CPUs, go1.26.8, 1a2b3c4)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(serve test)
for p in "${phases[@]}"; do
	case $p in serve | test | compile) ;; *)
		echo "cold-start: unknown phase $p (serve, test, compile)" >&2
		exit 2
		;;
	esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-cold.XXXXXX")
cleanup() {
	if [ -n "${KEEP:-}" ]; then
		mkdir -p "$KEEP"
		cp "$work"/*.log "$KEEP"/ 2>/dev/null || true
	fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

git clone -q --no-local "$src" "$work/tandem"
commit=$(git -C "$work/tandem" rev-parse --short HEAD)
gover=$(go env GOVERSION)
load() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
about() { echo "load $1 -> $(load), $(nproc) CPUs, $gover, $commit"; }

# fresh NAME points the Go caches at empty directories of their own.
fresh() {
	mkdir -p "$work/$1/mod" "$work/$1/build"
	export GOMODCACHE="$work/$1/mod" GOCACHE="$work/$1/build"
	export GOFLAGS="-modcacherw ${GOFLAGS:-}"
}

free_port() {
	local p
	for p in $(seq 18000 18999); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "cold-start: no free port in 18000-18999" >&2
	exit 1
}

serve_phase() {
	(
		fresh serve
		cd "$work/tandem"
		port=$(free_port)
		body='{"model":"tandem-mock","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":32}'
		l0=$(load)
		t0=$(now)
		# Its own process group, so that go run and the binary it starts stop together.
		setsid go run ./cmd/tandem serve --http-addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
		srv=$!
		trap 'kill -TERM -- "-$srv" 2>/dev/null || true' EXIT
		banner=
		deadline=$(($(date +%s) + 1800))
		while [ "$(date +%s)" -lt "$deadline" ]; do
			if ! kill -0 "$srv" 2>/dev/null; then
				echo "cold-start serve: go run exited before answering:" >&2
				tail -20 "$work/serve.log" >&2
				exit 1
			fi
			if [ -z "$banner" ] && grep -q 'url:' "$work/serve.log"; then
				banner=$(since "$t0")
			fi
			if [ -n "$banner" ] && curl -sf -o "$work/answer.json" "http://127.0.0.1:$port/v1/chat/completions" \
				-H 'Content-Type: application/json' -d "$body"; then
				# CPU of go run and the compiles and link it waited for (the
				# running server excluded): the figure that reads on a loaded machine.
				cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", ($14 + $15 + $16 + $17) / hz }' "/proc/$srv/stat")
				echo "cold-start serve: banner $banner s, first completion $(since "$t0") s, go run's CPU $cpu s ($(about "$l0"))"
				exit 0
			fi
			sleep 0.2
		done
		echo "cold-start serve: no answer within 30 minutes" >&2
		exit 1
	)
}

test_phase() {
	(
		fresh test
		cd "$work/tandem"
		l0=$(load)
		t0=$(now)
		rc=0
		go test ./... >"$work/test.log" 2>&1 || rc=$?
		echo "cold-start test: go test ./... $(since "$t0") s, exit $rc, $(grep -c '^ok' "$work/test.log") ok, $(grep -c '^FAIL' "$work/test.log") FAIL ($(about "$l0"))"
		[ "$rc" -eq 0 ] || tail -40 "$work/test.log" >&2
	)
}

# step LABEL CMD...: wall and CPU seconds of one compile step.
step() {
	local label=$1 me=$BASHPID t0 c0 c1
	shift
	t0=$(now)
	c0=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$me/stat")
	"$@" >>"$work/compile.log" 2>&1
	c1=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$me/stat")
	echo "cold-start compile: $label: $(since "$t0") s wall, $(awk -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (b - a) / hz }') CPU s"
}

compile_phase() {
	(
		fresh compile
		cd "$work/tandem"
		l0=$(load)
		step "go mod download" go mod download
		step "go build ./cmd/tandem" go build -o "$work/tandem.bin" ./cmd/tandem
		step "+ every test binary (go test -run '^\$' ./...)" go test -count=1 -run '^$' ./...
		step "+ operator module: go mod download" go -C control/operator mod download
		step "+ operator module: go build ./cmd/tandem-operator" go -C control/operator build -o "$work/operator.bin" ./cmd/tandem-operator
		step "+ operator module: every test binary" go -C control/operator test -count=1 -run '^$' ./...
		echo "cold-start compile: done ($(about "$l0"))"
	)
}

for p in "${phases[@]}"; do
	"${p}_phase"
done
