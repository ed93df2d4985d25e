#!/usr/bin/env bash
# Where two saltus processes' CPU per request differs, profiled in one run
# (docs/BENCHMARKS.md § The usage read and the hop): A and B (binaries;
# default this checkout's build) with policies APOL and BPOL (default
# prefix and round_robin) on one instant upstream, `perf record -g` on
# both for the whole run while ROUNDS loads of DURATION alternate between
# them (bench/nginx-compare.sh's load: 4 KB chats, 32 connections; MODE
# whole or stream). Each sample is charged to the innermost saltus
# function on its stack ("(other)": none, the Go runtime's and the
# kernel's own work), in µs of CPU per request over each process's own
# requests; the rows are the TOP largest differences A−B. Runs minutes
# apart differ by more than a few µs on a shared machine: profile the two
# in one run, as this does. Needs perf (linux-perf) and the right to
# profile one's own processes (kernel.perf_event_paranoid ≤ 2).
#
#   B=/tmp/saltus-parent BPOL=prefix MODE=stream bench/profile-pair.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "profile-pair: perf is missing (apt-get install linux-perf)" >&2; exit 2; }
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-2s}
MODE=${MODE:-stream}
APOL=${APOL:-prefix}
BPOL=${BPOL:-round_robin}
TOP=${TOP:-25}
UP=127.0.0.1:18501 SA=127.0.0.1:18580 SB=127.0.0.1:18581

. bench/serve-lib.sh # $work with the binaries, $pids, the cleanup
require_free $UP $SA $SB
A=${A:-$work/saltus}
B=${B:-$work/saltus}
STREAM=$(stream_flag "$MODE")
start_saltus_pair "$A" "$APOL" "$B" "$BPOL"
for t in $SA $SB; do
  "$work/loadgen" --target $t --conns 32 --duration 1s $STREAM >/dev/null # warm-up
done
perf record -F 2000 -g -p $APID -o "$work/a.perf" >/dev/null 2>&1 & PA=$!
perf record -F 2000 -g -p $BPID -o "$work/b.perf" >/dev/null 2>&1 & PB=$!
reqs() { "$work/loadgen" --target "$1" --conns 32 --duration "$DURATION" $STREAM --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])'; }
ra=0 rb=0
for _ in $(seq "$ROUNDS"); do
  ra=$((ra + $(reqs $SA))); rb=$((rb + $(reqs $SB)))
done
kill -INT $PA $PB; wait $PA $PB 2>/dev/null || true
perf script -i "$work/a.perf" -F period,ip,sym >"$work/a.txt" 2>/dev/null
perf script -i "$work/b.perf" -F period,ip,sym >"$work/b.txt" 2>/dev/null
python3 - "$work/a.txt" "$ra" "$work/b.txt" "$rb" "$TOP" <<'PY'
import collections, re, sys
def load(path, reqs):
    d, period, stack = collections.Counter(), 0, []
    def flush():
        key = "(other)"
        for s in stack:  # innermost first
            if "saltus-lb/saltus/" in s:
                key = s.split("saltus-lb/saltus/", 1)[1]
                break
        if stack:
            d[key] += period
    for line in open(path, errors="replace"):
        if not line.strip():
            flush(); stack = []
        elif not line.startswith("\t"):
            flush(); stack = []
            m = re.match(r"\s*(\d+)", line)
            period = int(m.group(1)) if m else 0
        else:
            parts = line.strip().split(" ", 1)
            stack.append(parts[1] if len(parts) > 1 else "")
    flush()
    return {k: v / 1000 / reqs for k, v in d.items()}  # ns of CPU → µs per request
a, b = load(sys.argv[1], int(sys.argv[2])), load(sys.argv[3], int(sys.argv[4]))
print(f"A {sum(a.values()):.1f} µs per request ({sys.argv[2]} requests), B {sum(b.values()):.1f} ({sys.argv[4]})\n")
print("| innermost saltus function | A µs | B µs | A−B |\n|---|--:|--:|--:|")
keys = sorted(set(a) | set(b), key=lambda k: -abs(a.get(k, 0) - b.get(k, 0)))
for k in keys[: int(sys.argv[5])]:
    print(f"| {k} | {a.get(k, 0):.2f} | {b.get(k, 0):.2f} | {a.get(k, 0) - b.get(k, 0):+.2f} |")
PY
