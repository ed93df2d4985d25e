#!/usr/bin/env bash
# Two saltus builds against each other on bench/nginx-compare.sh's load
# (4 KB chat requests to the instant upstream, 32 keep-alive connections,
# every process separate): A (default: this checkout's build) and B (a
# path: another build, e.g. the parent commit's; see
# bench/added-latency.sh for how to build one), the same policy, load runs
# of DURATION alternating ROUNDS times (A first in odd rounds, B first in
# even ones). Prints each round's req/s and CPU µs per request (user+system
# from /proc) and the medians of the paired ratios A/B: on a shared machine
# a round's ratio is steadier than either build's median, and a change of
# a few percent needs a dozen rounds or more.
#
#   B=/tmp/saltus-parent MODE=stream ROUNDS=12 bench/ab-compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:?B=/path/to/the other saltus binary}
ROUNDS=${ROUNDS:-12}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-32}
SHARDS=${SHARDS:-2}
MODE=${MODE:-whole}
POLICY=${POLICY:-prefix}
EVENTS=${EVENTS:-16}
UP=127.0.0.1:18201 SA=127.0.0.1:18280 SB=127.0.0.1:18281

. bench/serve-lib.sh # $work with the binaries, $pids, the cleanup
require_free $UP $SA $SB
A=${A:-$work/saltus}

STREAM=$(stream_flag "$MODE")
start_saltus_pair "$A" "$POLICY" "$B" "$POLICY"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# run TARGET PID: one load run, "req/s cpu-µs-per-request".
run() {
  local c0 c1 out
  c0=$(cpu "$2")
  out=$("$work/loadgen" --target "$1" --conns "$CONNS" --duration "$DURATION" $STREAM --json)
  c1=$(cpu "$2")
  python3 -c 'import json,sys,os; d=json.loads(sys.argv[1]); print("%.0f %.2f" % (d["rps"], int(sys.argv[2])*1e6/os.sysconf("SC_CLK_TCK")/max(d["requests"],1)))' "$out" $((c1 - c0))
}
run $SA $APID >/dev/null; run $SB $BPID >/dev/null # warm-up
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then a=$(run $SA $APID); b=$(run $SB $BPID); else b=$(run $SB $BPID); a=$(run $SA $APID); fi
  echo "$a $b"
done | python3 -c '
import statistics as st, sys
rows = [list(map(float, l.split())) for l in sys.stdin]
print("| round | A req/s | A CPU µs | B req/s | B CPU µs |\n|--:|--:|--:|--:|--:|")
for i, r in enumerate(rows, 1):
    print("| %d | %.0f | %.1f | %.0f | %.1f |" % (i, *r))
print("\nA/B, medians of the paired rounds (%d): req/s %.3fx, CPU per request %.3fx" % (
    len(rows), st.median(r[0] / r[2] for r in rows), st.median(r[1] / r[3] for r in rows)))
'
