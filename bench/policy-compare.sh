#!/usr/bin/env bash
# Issue 11's comparison matrix (`make bench-policies`): every routing policy
# on cold engines, 8 simulated a100-13b engines with the Llama-3 tokenizer,
# 30 users, one `saltus bench` per workload, so a stopped matrix keeps the
# workloads it finished. Writes bench/results/$NAME/<workload>/ (report.md
# with its command line, results.json, plots) and <workload>.log, then
# prints one table per workload (token hit ratio, P99 TTFT, req/s; the
# best baseline in bold; whether $CANDIDATE beats it) into compare.md.
#
# Simulated time per policy is DURATION × SPEEDUP (the issue asks for at
# least 10 minutes). The defaults, 60 s at speedup 10, take about 7.5
# minutes of wall time per workload with 6 policies (~45 minutes for
# the matrix) on a 2-core machine; see docs/BENCHMARKS.md ("Reference
# run: stress on 8 engines") for how far speedups agree there.
#
#   bench/policy-compare.sh                        # the whole matrix
#   WORKLOADS=stress,rag POLICIES=prefix,round_robin NAME=try bench/policy-compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${NAME:-policy-compare}
SPEEDUP=${SPEEDUP:-10}
DURATION=${DURATION:-60s}
POLICIES=${POLICIES:-all} # all: every policy saltus serve --policy takes
WORKLOADS=${WORKLOADS:-stress,multiturn,rag,hotspot,manydocs,unique}
CANDIDATE=${CANDIDATE:-prefix}
OVERHEAD_PAIRS=${OVERHEAD_PAIRS:-0}
TOKENIZER=tokenpool/testdata/models/llama3/tokenizer.json.gz
OUT=bench/results/$NAME

secs=${DURATION%s}
if [[ $secs =~ ^[0-9]+$ ]] && awk -v d="$secs" -v s="$SPEEDUP" 'BEGIN { exit !(d * s < 600) }'; then
  echo "policy-compare: $DURATION × speedup $SPEEDUP is under 10 minutes of simulated time per policy" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/saltus" ./cmd/saltus
go build -o "$work/comparetable" ./bench/cmd/comparetable
mkdir -p "$OUT"
results=()
for wl in ${WORKLOADS//,/ }; do
  # The load average before and after each workload goes into its log:
  # on a busy machine simulated times inflate (docs/BENCHMARKS.md: "Reference
  # run: stress on 8 engines"), and this says whether a run was contended.
  echo "policy-compare: $wl ($POLICIES, $DURATION at speedup $SPEEDUP) $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$work/saltus" bench --backends 8 --users 30 --workloads "$wl" --profile a100-13b \
    --tokenizer "$TOKENIZER" --policies "$POLICIES" --duration "$DURATION" --speedup "$SPEEDUP" \
    --overhead-pairs "$OVERHEAD_PAIRS" --out "$OUT/$wl" >"$OUT/$wl.log" 2>&1
  echo "load average after $wl: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/$wl.log" >&2
  results+=("$OUT/$wl/results.json")
done
"$work/comparetable" --candidate "$CANDIDATE" "${results[@]}" | tee "$OUT/compare.md"
