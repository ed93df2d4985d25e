#!/usr/bin/env bash
# Added latency of saltus, separate processes: one keep-alive connection
# sends REQUESTS sequential 4 KB chat requests (streamed: EVENTS SSE events
# each; STREAM=0 for whole answers), once straight to an instant upstream
# and once through saltus (byte-block mode, SHARDS loops); the p50 of each
# and their difference, ROUNDS times (each round on new connections, so
# on whichever loop the reactor gives them).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-2000}
SHARDS=${SHARDS:-2}
EVENTS=${EVENTS:-16}
STREAM=${STREAM:-1}
UP=127.0.0.1:18401 SAL=127.0.0.1:18480

. bench/serve-lib.sh # $work with the binaries, $pids, the cleanup
"$work/upstream" --listen $UP --sse-events "$EVENTS" >/dev/null & pids+=($!)
"$work/saltus" serve --listen $SAL --admin-listen 127.0.0.1:0 --backend http://$UP --shards "$SHARDS" --log-level warn & pids+=($!)
flag=""; [ "$STREAM" = 1 ] && flag="--stream"
for t in $UP $SAL; do
  for _ in $(seq 100); do
    "$work/loadgen" --target $t --conns 1 --duration 1s --requests 1 $flag >/dev/null 2>&1 && break
    sleep 0.1
  done
done
"$work/loadgen" --target $SAL --conns 1 --duration 10s --requests 500 $flag >/dev/null # warm
p50() { "$work/loadgen" --target "$1" --conns 1 --duration 60s --requests "$REQUESTS" $flag --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["p50_us"])'; }
added=()
for i in $(seq "$ROUNDS"); do
  d=$(p50 $UP); s=$(p50 $SAL)
  echo "round $i: direct p50 ${d} µs, saltus p50 ${s} µs, added $((s - d)) µs"
  added+=($((s - d)))
done
printf '%s\n' "${added[@]}" | sort -n | awk '{a[NR]=$1} END {print "median added p50: " a[int((NR+1)/2)] " µs"}'
