#!/usr/bin/env bash
# The whole kvbench matrix, then its verdict: every workload in bench/workloads through kvrouter,
# round-robin and every peer variant (the P/D workloads pd-*.yaml through the P/D policies
# instead), SEEDS seeds each, then `kvbench verdict` on the result: kvrouter against the best
# variant of each peer family per workload and rate (docs/kvbench.md "The verdict table").
#   hack/bench-matrix.sh                                   (about an hour on 2 cores; make bench-matrix)
#   EXTRA=-flattering OUT=out/matrix-before hack/bench-matrix.sh   (the simulator as it was)
#   BEFORE=out/matrix-before hack/bench-matrix.sh          (the verdict with before/after columns)
# Environment:
#   SEEDS (5), OUT (out/matrix), JOBS (2: workloads run in parallel), EXTRA (more simulate flags),
#   TRACES (bench/traces), WORKLOADS (the YAML files; default every bench/workloads/*.yaml),
#   POLICIES (the aggregated workloads' policies; default `kvbench policies -set matrix`),
#   PD_POLICIES (the pd-* workloads' policies; default `kvbench policies -set pd-matrix`),
#   BEFORE (an earlier OUT for the before/after columns), BIN (bin).
# Each workload's simulate log is OUT/logs/NAME.log; the verdict is OUT/verdict.md and .json.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
OUT=${OUT:-out/matrix}
SEEDS=${SEEDS:-5}
JOBS=${JOBS:-2}
EXTRA=${EXTRA:-}
TRACES=${TRACES:-bench/traces}
BEFORE=${BEFORE:-}
go build -o "$BIN/" ./cmd/kvbench
POLICIES=${POLICIES:-$("$BIN/kvbench" policies -set matrix)}
PD_POLICIES=${PD_POLICIES:-$("$BIN/kvbench" policies -set pd-matrix)}
if [[ -n "${WORKLOADS:-}" ]]; then
	read -r -a files <<<"$WORKLOADS"
else
	files=(bench/workloads/*.yaml)
fi
mkdir -p "$OUT/logs"

# One workload: its report lands in OUT/NAME (NAME from the spec, as simulate names it). The old
# report is removed first so that a failed run cannot leave a stale one for the verdict.
run_one() {
	local file=$1 name pols start
	name=$(awk '/^name:/ {print $2; exit}' "$file")
	pols=$POLICIES
	[[ $(basename "$file") == pd-* ]] && pols=$PD_POLICIES
	rm -f "$OUT/$name/report.json"
	start=$SECONDS
	# EXTRA is split on spaces on purpose: it holds flags.
	# shellcheck disable=SC2086
	if "$BIN/kvbench" simulate -quiet -seeds "$SEEDS" -traces "$TRACES" -out "$OUT" -policies "$pols" $EXTRA "$file" \
		>"$OUT/logs/$name.log" 2>&1; then
		echo "bench-matrix: $name done in $((SECONDS - start)) s"
	else
		echo "bench-matrix: $name FAILED after $((SECONDS - start)) s (see $OUT/logs/$name.log)" >&2
		return 1
	fi
}

echo "bench-matrix: ${#files[@]} workloads, $SEEDS seeds, $JOBS at a time, into $OUT${EXTRA:+ (extra flags: $EXTRA)}"
dirs=()
failed=0
running=0
for f in "${files[@]}"; do
	dirs+=("$OUT/$(awk '/^name:/ {print $2; exit}' "$f")")
	if ((running >= JOBS)); then
		wait -n || failed=$((failed + 1))
		running=$((running - 1))
	fi
	run_one "$f" &
	running=$((running + 1))
done
while ((running > 0)); do
	wait -n || failed=$((failed + 1))
	running=$((running - 1))
done

# Judge what finished; a failed workload is reported, not silently dropped.
done_dirs=()
for d in "${dirs[@]}"; do
	[[ -f "$d/report.json" ]] && done_dirs+=("$d")
done
if ((${#done_dirs[@]} == 0)); then
	echo "bench-matrix: no workload finished" >&2
	exit 1
fi
before=()
[[ -n "$BEFORE" ]] && before=(-before "$BEFORE")
"$BIN/kvbench" verdict -json "${before[@]}" "${done_dirs[@]}" >"$OUT/verdict.json"
"$BIN/kvbench" verdict "${before[@]}" "${done_dirs[@]}" | tee "$OUT/verdict.md"
if ((failed > 0)); then
	echo "bench-matrix: $failed workload(s) failed" >&2
	exit 1
fi
