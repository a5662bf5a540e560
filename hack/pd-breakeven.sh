#!/usr/bin/env bash
# Where does splitting prefill from decode start to pay, in the simulator? For a grid of prompt
# lengths (ISL) and answer lengths (OSL), runs the same Poisson traffic of unique prompts through
# 4 aggregated engines (kvrouter) and through 2 prefill + 2 decode engines that split every request
# (kvrouter-pd-always), and through the same split fleet deciding per request (kvrouter-pd), all H100 / Llama-3.1-8B over the rdma link, over a sweep of rates scaled to
# each cell's load, and prints the best goodput (at TTFT 3 s, ITL 25 ms) each fleet reaches, their
# ratio, and the cell's prefill/decode time ratio (one request's prefill on an idle engine over its
# decode at the measured aggregated ITL). Splitting pays where split/agg exceeds 1; auto/best says
# how close the per-request decision comes to the better of the two fixed choices.
#   hack/pd-breakeven.sh            (SEEDS=2 by default; OUT=out/pd-breakeven)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
OUT=${OUT:-$PWD/out/pd-breakeven}
SEEDS=${SEEDS:-2}
ISLS=${ISLS:-"512 2048 8192"}
OSLS=${OSLS:-"16 64 256"}
go build -o "$BIN/" ./cmd/kvbench
rm -rf "$OUT"
mkdir -p "$OUT/workloads"
for isl in $ISLS; do
	for osl in $OSLS; do
		# The rates bracket the aggregated fleet's capacity: about 4 engines x 20K prefill tokens/s
		# for long prompts, about 4 x 6K decode tokens/s for long answers, whichever binds first.
		rates=$(python3 -c "
cap = min(4 * 20000 / $isl, 4 * 6000 / $osl)
print(','.join(f'{cap * f:.3g}' for f in (0.3, 0.5, 0.7, 0.85, 1.0, 1.2)))")
		cat >"$OUT/workloads/be-$isl-$osl.yaml" <<YAML
name: be-$isl-$osl
description: "break-even cell: $isl-token unique prompts, $osl-token answers"
kind: mix
seed: 41
fleet:
  profile: h100-llama-3.1-8b-tp1
  blockSize: 64
  disaggregation:
    prefill: 2
    decode: 2
    transport: rdma
load:
  rates: [$rates]
  duration: 40
slo:
  ttftSeconds: 3
  itlSeconds: 0.025
mix:
  classes:
  - name: cell
    share: 1
    minPromptTokens: $isl
    maxPromptTokens: $isl
    minOutputTokens: $osl
    maxOutputTokens: $osl
YAML
	done
done
wls=$(ls "$OUT"/workloads/*.yaml | paste -sd, -)
"$BIN/kvbench" simulate -quiet -workload "$wls" -policies kvrouter,kvrouter-pd-always,kvrouter-pd -seeds "$SEEDS" -out "$OUT/runs" >/dev/null
python3 - "$OUT/runs" <<'PY'
import json, os, sys
sys.path.insert(0, "")
runs = sys.argv[1]
# Prefill of n tokens on an idle H100 running Llama-3.1-8B, from the simulator's step model
# (internal/sim/timing): 2*params FLOPs per token plus causal attention, at the profile's MFU.
def prefill_s(n):
    params, layers, hidden, peak, mfu, overhead = 8.03e9, 32, 4096, 989e12, 0.55, 1.5e-3
    flops = 2 * params * n + 4 * layers * hidden * n * (n + 1) / 2
    return overhead + flops / (peak * mfu)
print(f"{'ISL':>6} {'OSL':>5} {'prefill:decode':>15} {'aggregated':>11} {'split':>9} {'auto':>9} {'split/agg':>10} {'auto/best':>10}")
rows = []
for name in sorted(os.listdir(runs)):
    r = json.load(open(os.path.join(runs, name, "report.json")))
    _, isl, osl = name.split("-")
    isl, osl = int(isl), int(osl)
    best = {}
    itl = {}
    for res in r["sweep"]:
        p = res["policy"]
        if res["goodput_tok_s"] >= best.get(p, (-1,))[0]:
            best[p] = (res["goodput_tok_s"], res["rate"])
        if p == "kvrouter" and res["itl_p50_s"] > 0:
            itl.setdefault(p, []).append(res["itl_p50_s"])
    a, s, au = (best.get(p, (0, 0))[0] for p in ("kvrouter", "kvrouter-pd-always", "kvrouter-pd"))
    step = sorted(itl.get("kvrouter", [0.01]))[len(itl.get("kvrouter", [0.01])) // 2]
    ratio = prefill_s(isl) / (osl * step)
    rows.append((isl, osl, ratio, a, s, au))
for isl, osl, ratio, a, s, au in sorted(rows, key=lambda x: (x[0], x[1])):
    b = max(a, s)
    print(f"{isl:>6} {osl:>5} {ratio:>15.2f} {a:>11.0f} {s:>9.0f} {au:>9.0f} {s / a if a else float('nan'):>10.2f} {au / b if b else float('nan'):>10.2f}")
PY
