#!/usr/bin/env bash
# Live P/D comparison: a split fleet of simulated vLLM engines (2 prefill + 2 decode, vLLM's
# NixlConnector protocol, KV moved over the simulated link) behind the real router, driven by
# kvbench live in each of the router's disaggregation modes: Never (every request whole on any of
# the 4 engines: the all-aggregated fleet on the same GPUs), Always (every request split, whole
# requests only on decode engines: what Dynamo and production-stack do) and Auto (kvrouter's
# per-request decision). Each run gets fresh engines; the modes are interleaved over ROUNDS rounds
# so that a busy machine slows them alike. Results: out/pd-live/<workload>/<round>/<mode>/report.json
# and a summary table on stdout. Ports: PD_PORT_BASE (default 19000) and up.
#
#   hack/pd-live.sh [workload.yaml ...]      (default: bench/workloads/pd-mixed-bursts.yaml pd-short.yaml)
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
OUT=${OUT:-$PWD/out/pd-live}
BASE=${PD_PORT_BASE:-19000}
SCALE=${PD_TIME_SCALE:-0.2}
REQUESTS=${PD_REQUESTS:-900}
# Seconds of arrivals per run: 31 takes in two of pd-mixed-bursts' long-prompt bursts (every 15 s).
DURATION=${PD_DURATION:-31}
ROUNDS=${PD_ROUNDS:-2}
MODES=${PD_MODES:-"Never Always Auto"}
if (($# == 0)); then
	set -- bench/workloads/pd-mixed-bursts.yaml bench/workloads/pd-short.yaml
fi

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_http() {
	for _ in $(seq 1 150); do
		if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
		sleep 0.2
	done
	echo "pd-live: $2 did not come up at $1" >&2
	exit 1
}
stop_pid() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

go build -o "$BIN/" ./cmd/vllm-sim ./cmd/router ./cmd/kvbench
rm -rf "$OUT"
mkdir -p "$OUT"

# pool role port-offset: engine i of the pool serves HTTP on BASE+offset+i, publishes KV events on
# BASE+500+2*(offset+i) and replays on the next port, and serves the KV side channel on
# BASE+600+offset+i.
{
	echo "endpoints:"
	for pool in prefill:0 decode:2; do
		role=${pool%%:*} off=${pool##*:}
		for i in 0 1; do
			echo "  - name: $role-$i"
			echo "    url: http://127.0.0.1:$((BASE + off + i))"
			echo "    kvEvents: tcp://[::1]:$((BASE + 500 + 2 * (off + i)))"
			echo "    kvReplay: tcp://[::1]:$((BASE + 501 + 2 * (off + i)))"
			echo "    role: $role"
		done
	done
} >"$OUT/endpoints.yaml"

start_pool() { # role offset log
	VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 VLLM_NIXL_SIDE_CHANNEL_PORT=$((BASE + 600 + $2)) PYTHONHASHSEED=0 \
		"$BIN/vllm-sim" --model pd/llama-8b --host 127.0.0.1 --port $((BASE + $2)) --engines 2 \
		--block-size 64 --time-scale "$SCALE" --prefix-caching-hash-algo sha256_cbor \
		--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute"}' \
		--kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://[::1]:$((BASE + 500 + 2 * $2))\",\"replay_endpoint\":\"tcp://[::1]:$((BASE + 501 + 2 * $2))\",\"topic\":\"kv@$1-{engine}@pd\"}" \
		--log-level warn >>"$3" 2>&1 &
	pids+=("$!")
	echo "$!"
}

for wl in "$@"; do
	name=$(basename "$wl" .yaml)
	for round in $(seq 1 "$ROUNDS"); do
		for mode in $MODES; do
			dir="$OUT/$name/$round/$mode"
			mkdir -p "$dir"
			p=$(start_pool prefill 0 "$dir/vllm-sim.log")
			d=$(start_pool decode 2 "$dir/vllm-sim.log")
			for i in 0 1 2 3; do wait_http "http://127.0.0.1:$((BASE + i))/health" "engine $i"; done
			whole=any
			[[ $mode == Always ]] && whole=decode
			"$BIN/router" --port $((BASE + 80)) --host 127.0.0.1 --admin-addr "127.0.0.1:$((BASE + 90))" \
				--endpoints-file "$OUT/endpoints.yaml" --block-size 64 --admission=false \
				--pd-mode "$mode" --pd-whole-on "$whole" --log-level warn >>"$dir/router.log" 2>&1 &
			rp=$!
			pids+=("$rp")
			wait_http "http://127.0.0.1:$((BASE + 80))/ready" "router"
			echo "==> $name round $round: --pd-mode $mode (--pd-whole-on $whole), up to $REQUESTS requests over ${DURATION} s, engines at --time-scale $SCALE" >&2
			"$BIN/kvbench" live --target "http://127.0.0.1:$((BASE + 80))" --workload "$wl" --label "$mode" \
				--progress none --requests "$REQUESTS" --duration "$DURATION" --time-scale "$SCALE" --max-wall 300s --out "$dir" >"$dir/table.txt"
			curl -fsS "http://127.0.0.1:$((BASE + 90))/v1/status" >"$dir/status.json" || true
			stop_pid "$rp"
			stop_pid "$p"
			stop_pid "$d"
		done
	done
done

# One line per workload and mode: median and range over rounds of goodput (output tokens of
# requests within the workload's TTFT and ITL objectives), TTFT p90 and ITL p90 (simulated time),
# and the share of requests the router split.
python3 - "$OUT" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
print(f"{'workload':18} {'mode':7} {'goodput tok/s':>22} {'TTFT p90 ms':>20} {'ITL p90 ms':>16} {'split':>6}")
for name in sorted(os.listdir(out)):
    wdir = os.path.join(out, name)
    if not os.path.isdir(wdir):
        continue
    modes = {}
    for rnd in sorted(os.listdir(wdir)):
        for mode in sorted(os.listdir(os.path.join(wdir, rnd))):
            d = os.path.join(wdir, rnd, mode)
            try:
                res = json.load(open(os.path.join(d, "report.json")))["policies"][0]
                srv = json.load(open(os.path.join(d, "live.json")))["serving"]
            except (OSError, ValueError, KeyError, IndexError):
                continue
            st = {}
            try:
                st = json.load(open(os.path.join(d, "status.json"))).get("disaggregation") or {}
            except (OSError, ValueError):
                pass
            n = st.get("splitRequests", 0) + st.get("wholeRequests", 0)
            modes.setdefault(mode, []).append((res["goodput_tok_s"], 1000 * res["ttft_p90_s"],
                                               1000 * srv["itl"]["p90_s"], st.get("splitRequests", 0) / max(1, n)))
    def fmt(v):
        return f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})"
    def fmt1(v):
        return f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
    for mode, rows in modes.items():
        g, t, i, s = zip(*rows)
        print(f"{name:18} {mode:7} {fmt(g):>22} {fmt(t):>20} {fmt1(i):>16} {statistics.median(s):6.2f}")
PY
