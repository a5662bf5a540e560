#!/usr/bin/env bash
# make demo: 4 simulated vLLM engines, the kvrouter router in front of them, and the same short
# shared-prefix workload sent live through round-robin and through kvrouter's Auto policy. Prints
# the comparison and writes out/demo/report.json and out/demo/report.html. Every process it
# starts is stopped on exit (including Ctrl-C). Ports: DEMO_PORT_BASE (default 18000) and up.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
OUT=${OUT:-$PWD/out/demo}
GO=${GO:-go}
BASE=${DEMO_PORT_BASE:-18000}
ENGINES=4
# Simulated seconds per wall second: the engines run at a fifth of real speed, so 2 cores keep
# up with 4 engines, a router and the load generator; kvbench reports simulated seconds.
SCALE=${DEMO_TIME_SCALE:-0.2}
REQUESTS=${DEMO_REQUESTS:-300}
WORKLOAD=bench/workloads/demo.yaml

pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_http() { # url, what
	for _ in $(seq 1 100); do
		if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
		sleep 0.2
	done
	echo "demo: $2 did not come up at $1" >&2
	exit 1
}

echo "==> building vllm-sim, router and kvbench into $BIN"
$GO build -o "$BIN/" ./cmd/vllm-sim ./cmd/router ./cmd/kvbench
rm -rf "$OUT"
mkdir -p "$OUT"

{
	echo "endpoints:"
	for i in $(seq 0 $((ENGINES - 1))); do
		echo "  - name: engine-$i"
		echo "    url: http://127.0.0.1:$((BASE + i))"
		echo "    kvEvents: tcp://[::1]:$((BASE + 557 + 2 * i))"
		echo "    kvReplay: tcp://[::1]:$((BASE + 558 + 2 * i))"
	done
} >"$OUT/endpoints.yaml"

start_engines() {
	# vLLM binds only when the endpoint holds "*" or "::": [::1] binds IPv6 loopback, so nothing
	# outside this machine can reach the demo's event ports.
	PYTHONHASHSEED=0 "$BIN/vllm-sim" --model demo/llama-8b --host 127.0.0.1 --port "$BASE" --engines $ENGINES \
		--block-size 16 --num-gpu-blocks-override 500 --time-scale "$SCALE" --prefix-caching-hash-algo sha256_cbor \
		--kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://[::1]:$((BASE + 557))\",\"replay_endpoint\":\"tcp://[::1]:$((BASE + 558))\",\"topic\":\"kv@engine-{engine}@demo\"}" \
		--log-level warn >>"$OUT/vllm-sim.log" 2>&1 &
	engines_pid=$!
	pids+=("$engines_pid")
	for i in $(seq 0 $((ENGINES - 1))); do
		wait_http "http://127.0.0.1:$((BASE + i))/health" "engine $i"
	done
}

stop_pid() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# Admission control is off: the demo compares where requests are routed, and round-robin's
# queues would otherwise be shed (429) and leave it fewer, easier requests to be timed on.
run_policy() { # policy label port
	"$BIN/router" --port "$3" --host 127.0.0.1 --admin-addr "127.0.0.1:$(($3 + 100))" \
		--endpoints-file "$OUT/endpoints.yaml" --block-size 16 --admission=false \
		--policy "$1" --log-level warn >>"$OUT/router-$2.log" 2>&1 &
	local rp=$!
	pids+=("$rp")
	wait_http "http://127.0.0.1:$3/ready" "router ($1)"
	echo "==> $REQUESTS requests through $2 (router --policy $1)"
	"$BIN/kvbench" live --target "http://127.0.0.1:$3" --workload "$WORKLOAD" --label "$2" \
		--requests "$REQUESTS" --time-scale "$SCALE" --max-wall 75s --out "$OUT/$2" 2>>"$OUT/kvbench.log" >/dev/null
	stop_pid "$rp"
}

# Each policy gets freshly started engines (empty caches), so neither run inherits the other's
# warm prefixes.
start_engines
run_policy RoundRobin round-robin $((BASE + 80))
stop_pid "$engines_pid"
start_engines
run_policy Auto kvrouter $((BASE + 81))
stop_pid "$engines_pid"

echo
"$BIN/kvbench" compare --out "$OUT" "$OUT/round-robin/report.json" "$OUT/kvrouter/report.json"
echo
echo "Report: $OUT/report.html (open it in a browser), data: $OUT/report.json"
