#!/usr/bin/env bash
# Added latency of saltus, separate processes: one keep-alive connection
# sends REQUESTS sequential 4 KB chat requests (streamed: EVENTS SSE events
# each; STREAM=0 for whole answers), once straight to an instant upstream
# and once through saltus (byte-block mode, SHARDS loops); the p50 of each
# and their difference, ROUNDS times (each round on new connections, so
# on whichever loop the reactor gives them). BASE=/path/to/saltus (another
# build, e.g. an older commit's) is measured in the same rounds, on its own
# port, the order of the two routers alternating round by round; the
# medians of both and their ratio end the output. nginx, as the plain
# reverse proxy bench/nginx-compare.sh runs, is measured in the same
# rounds (NGINX=0 leaves it out), for the added latency of a proxy in its
# own process on the same machine:
#   git worktree add /tmp/wt-pre 4a57920 && (cd /tmp/wt-pre && go build -o /tmp/saltus-pre ./cmd/saltus)
#   git worktree remove /tmp/wt-pre --force
#   BASE=/tmp/saltus-pre ROUNDS=9 bench/added-latency.sh
# SALTUS_FLAGS and BASE_FLAGS are more flags for this build and BASE (e.g.
# tracing on in one: BENCHMARKS.md § Tracing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-2000}
SHARDS=${SHARDS:-2}
EVENTS=${EVENTS:-16}
STREAM=${STREAM:-1}
UP=127.0.0.1:18401 SAL=127.0.0.1:18480 SALB=127.0.0.1:18481 NGX=127.0.0.1:18490
BASE=${BASE:-}
NGINX_ON=${NGINX:-1}

. bench/serve-lib.sh # $work with the binaries, $pids, the cleanup
require_free $UP $SAL $SALB $NGX
"$work/upstream" --listen $UP --sse-events "$EVENTS" >/dev/null & pids+=($!)
"$work/saltus" serve --listen $SAL --admin-listen 127.0.0.1:0 --backend http://$UP --shards "$SHARDS" --log-level warn ${SALTUS_FLAGS:-} & pids+=($!)
targets="$UP $SAL"
if [ "$NGINX_ON" = 1 ]; then
  start_nginx "$NGX" "$UP"
  targets="$targets $NGX"
fi
if [ -n "$BASE" ]; then
  "$BASE" serve --listen $SALB --admin-listen 127.0.0.1:0 --backend http://$UP --shards "$SHARDS" --log-level warn ${BASE_FLAGS:-} & pids+=($!)
  targets="$targets $SALB"
fi
flag=""; [ "$STREAM" = 1 ] && flag="--stream"
for t in $targets; do
  for _ in $(seq 100); do
    "$work/loadgen" --target $t --conns 1 --duration 1s --requests 1 $flag >/dev/null 2>&1 && break
    sleep 0.1
  done
done
"$work/loadgen" --target $SAL --conns 1 --duration 10s --requests 500 $flag >/dev/null # warm
[ -z "$BASE" ] || "$work/loadgen" --target $SALB --conns 1 --duration 10s --requests 500 $flag >/dev/null
p50() { "$work/loadgen" --target "$1" --conns 1 --duration 60s --requests "$REQUESTS" $flag --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["p50_us"])'; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
added=() addedb=() addedn=()
for i in $(seq "$ROUNDS"); do
  if [ -z "$BASE" ]; then
    d=$(p50 $UP); s=$(p50 $SAL)
    echo "round $i: direct p50 ${d} µs, saltus p50 ${s} µs, added $((s - d)) µs"
  elif [ $((i % 2)) = 1 ]; then
    d=$(p50 $UP); s=$(p50 $SAL); b=$(p50 $SALB)
  else
    d=$(p50 $UP); b=$(p50 $SALB); s=$(p50 $SAL)
  fi
  if [ -n "$BASE" ]; then
    echo "round $i: direct p50 ${d} µs, saltus p50 ${s} µs (added $((s - d))), base p50 ${b} µs (added $((b - d)))"
    addedb+=($((b - d)))
  fi
  added+=($((s - d)))
  if [ "$NGINX_ON" = 1 ]; then
    n=$(p50 $NGX)
    echo "round $i: nginx p50 ${n} µs, added $((n - d)) µs"
    addedn+=($((n - d)))
  fi
done
m=$(median "${added[@]}")
echo "median added p50: $m µs"
[ "$NGINX_ON" = 1 ] && echo "median added p50 of nginx: $(median "${addedn[@]}") µs"
if [ -n "$BASE" ]; then
  mb=$(median "${addedb[@]}")
  echo "median added p50 of base $BASE: $mb µs; this build / base: $(awk -v a="$m" -v b="$mb" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')"
fi
