#!/usr/bin/env bash
# Routers compared on running engines you start (a third-party simulator,
# or `saltus sim`): for each workload, load point and router, fresh
# engines (ENGINE, once per port), the router (saltus serve --policy P
# with the engines' KV events on --kv-events-listen, nginx's `hash
# $request_body consistent`, or a router command of yours), then `saltus
# bench --target` drives the workload through it and scrapes the engines.
# Results: $OUT/<workload>-x<speed>-<router>/ (report.md, results.json,
# samples.jsonl) and $OUT/summary.md (TTFT mean, P50, P99, goodput,
# failed, token hit ratio per workload, router and load point).
#
# WORKLOADS (comma-separated) are `saltus bench --workloads` names: a
# Mooncake-format trace (mooncake:FILE, the default with TRACE), replayed
# open loop on its own arrival times at each speed-up of SPEEDS; or a
# synthetic workload (rag, multiturn, hotspot, manydocs, ...), closed loop
# with USERS users for DURATION, once (SPEEDS does not apply).
#
# ENGINE is a command line with {port} where the engine's HTTP port goes;
# it must serve model $MODEL, publish KV events to {events} (a ZMQ
# endpoint saltus binds) when it can, and run until killed. E.g., with an
# llm-d-inference-sim binary you built:
#
#   ENGINE='env POD_IP=127.0.0.1 /path/to/llm-d-inference-sim --port {port}
#     --model sim-llama --force-dummy-tokenizer --enable-kvcache
#     --kv-cache-size 2048 --block-size 16 --max-model-len 200000
#     --prefill-overhead 20ms --prefill-time-per-token 80us
#     --inter-token-latency 5ms --max-num-seqs 5 --zmq-endpoint {events}' \
#   TRACE=/path/to/conversation_trace.jsonl TRACE_BLOCK=512 \
#   bench/engines-compare.sh
#
# ROUTERS names saltus policies, nginx, or routers of yours: a name R
# whose command line is in the variable ROUTER_R, with {port} (where it
# listens), {backends} (the engines' URLs, comma-separated) and {model};
# it must run until killed. E.g. vLLM production-stack's router:
#
#   ROUTERS='prefix nginx pstack' \
#   ROUTER_pstack='python3 -m vllm_router.app --port {port} --service-discovery static
#     --static-backends {backends} --static-models ... --routing-logic prefixaware'
#
# A saltus policy may be served by another build of saltus, for a
# comparison in the same run: ROUTERS='prefix prefix@old' SALTUS_old=/path/to/saltus.
#
# SWEEPS=N runs each load point N times, the routers' order rotated by one
# each time (results in $OUT/<workload>-x<speed>-<router>-<sweep>/, a row
# each in summary.md), then prints the median of each router's rows and
# their range (bench/sweep-medians.py, also in $OUT/medians.md): on a
# shared machine one sweep's numbers move by up to a fifth.
#
# The default ENGINE is `saltus sim` (a100-13b profile, its KV events
# connecting to {events}). Engines run in real time: a trace window of W
# seconds at speed S takes W/S seconds per router (plus DRAIN). Run it on
# a quiet machine: engines that sleep per token answer late when the CPU
# is busy, and every router then looks overloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/engines-compare}
ENGINES=${ENGINES:-8}
MODEL=${MODEL:-sim-llama}
SPEEDS=${SPEEDS:-4 8 16}
ROUTERS=${ROUTERS:-prefix round_robin least_request body_hash ranvier nginx}
SWEEPS=${SWEEPS:-1}
TRACE=${TRACE:-bench/traces/mooncake-small.jsonl}
WORKLOADS=${WORKLOADS:-mooncake:$TRACE}
USERS=${USERS:-30}
DURATION=${DURATION:-60s}
TRACE_BLOCK=${TRACE_BLOCK:-512}
WINDOW=${WINDOW:-300s}
DRAIN=${DRAIN:-60s}
SLO=${SLO:-1s}
PORT0=${PORT0:-18300} # engines on PORT0+1..; the router on PORT0, its admin on PORT0+99
EVENTS=tcp://127.0.0.1:$((PORT0 + 98))

. bench/serve-lib.sh # $work with saltus built, $pids, the cleanup
ENGINE=${ENGINE:-"$work/saltus sim --listen 127.0.0.1:{port} --model $MODEL --profile a100-13b --kv-events --kv-events-endpoint {events} --kv-events-topic kv@127.0.0.1:{port}@$MODEL"}
mkdir -p "$OUT"
backends=()
urls=()
for i in $(seq 1 "$ENGINES"); do
  backends+=(--backend "http://127.0.0.1:$((PORT0 + i))")
  urls+=("http://127.0.0.1:$((PORT0 + i))")
done

wait_http() { # url: up to 20 s
  for _ in $(seq 200); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "engines-compare: $1 did not answer" >&2
  return 1
}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
stop_all() {
  # nginx first, by its master (TERM: its workers go with it; a killed
  # master would leave them serving the port), then the rest.
  if [ -f "$work/nginx.pid" ]; then
    np=$(cat "$work/nginx.pid")
    kill "$np" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$np" 2>/dev/null || break; sleep 0.1; done
  fi
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  rm -f "$work/nginx.pid"
  for port in $PORT0 $((PORT0 + 98)) $((PORT0 + 99)) $(seq $((PORT0 + 1)) $((PORT0 + ENGINES))); do
    for _ in $(seq 300); do port_free "$port" && break; sleep 0.1; done
    port_free "$port" || { echo "engines-compare: port $port still taken" >&2; exit 1; }
  done
}

echo "| workload | load | router | requests | failed | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | goodput (TTFT ≤ $SLO) req/s | token hit ratio |" >"$OUT/summary.md"
echo "|---|---|---|--:|--:|--:|--:|--:|--:|--:|" >>"$OUT/summary.md"
start_router() { # router: nginx, a saltus policy, or ROUTER_<router>'s command
  local r=$1 var="ROUTER_${1//@/_}"
  if [ -n "${!var:-}" ]; then
    local cmd=${!var//\{port\}/$PORT0}
    cmd=${cmd//\{backends\}/$(IFS=,; echo "${urls[*]}")}
    cmd=${cmd//\{model\}/$MODEL}
    $cmd >"$OUT/router-$run.log" 2>&1 & pids+=($!)
  elif [ "$r" = nginx ]; then
    {
      echo "worker_processes 2; pid $work/nginx.pid; error_log $work/nginx.err; daemon off;"
      echo "events { worker_connections 4096; }"
      echo "http { access_log off; client_body_buffer_size 16m; client_max_body_size 16m;"
      echo " upstream engines { hash \$request_body consistent;"
      for u in "${urls[@]}"; do echo "  server ${u#http://};"; done
      echo "  keepalive 64; }"
      echo " server { listen 127.0.0.1:$PORT0; location / { proxy_pass http://engines; proxy_http_version 1.1;"
      echo "  proxy_set_header Connection \"\"; proxy_buffering off; proxy_read_timeout 600s; } } }"
    } >"$work/nginx.conf"
    nginx -c "$work/nginx.conf" -p "$work" & pids+=($!)
  else
    local bin=$work/saltus pol=${r%@*} # POLICY@LABEL: that policy served by the binary in SALTUS_LABEL
    if [[ $r == *@* ]]; then
      local bvar="SALTUS_${r#*@}"
      bin=${!bvar:?"engines-compare: router $r needs $bvar, a saltus binary"}
    fi
    "$bin" serve --listen "127.0.0.1:$PORT0" --admin-listen "127.0.0.1:$((PORT0 + 99))" "${backends[@]}" \
      --policy "$pol" --kv-events-listen "$EVENTS" --log-level warn >"$OUT/serve-$run.log" 2>&1 & pids+=($!)
    wait_http "http://127.0.0.1:$((PORT0 + 99))/metrics" # its own admin listener: this saltus, not another
    [[ $ENGINE != *"{events}"* ]] || wait_events
  fi
}
# wait_events: until saltus has heard every engine's KV events (a view per
# engine), up to 30 s. An engine's publisher dials saltus's listener with
# retries: what it publishes before it is connected is lost, and a run
# that began then would start with views that miss its first blocks. A
# one-block prompt of token ids sent to each engine directly makes it
# publish; the engines' caches gain one unique block each.
wait_events() {
  local heard=0
  for try in $(seq 60); do
    heard=$(curl -sf "http://127.0.0.1:$((PORT0 + 99))/metrics" | grep -c '^saltus_kvview_blocks{' || true)
    [ "$heard" -ge "$ENGINES" ] && return 0
    for u in "${urls[@]}"; do
      curl -sf -o /dev/null -H 'Content-Type: application/json' "$u/v1/completions" \
        -d "{\"model\":\"$MODEL\",\"prompt\":[$(seq -s, $((try * 100 + 1000)) $((try * 100 + 1015)))],\"max_tokens\":1}" || true
    done
    sleep 0.5
  done
  echo "engines-compare: saltus heard the KV events of $heard of $ENGINES engines" >&2
}
for wl in ${WORKLOADS//,/ }; do
  name=${wl%%:*}
  speeds=1 shape=(--users "$USERS" --duration "$DURATION") # closed loop; a trace sets its own
  [[ $wl == mooncake:* ]] && speeds=$SPEEDS shape=()
  read -ra order <<<"$ROUTERS"
  for s in $speeds; do
   for k in $(seq 1 "$SWEEPS"); do
    off=$(((k - 1) % ${#order[@]}))
    for r in "${order[@]:off}" "${order[@]:0:off}"; do
      run=$name-x$s-$r
      [ "$SWEEPS" = 1 ] || run=$run-$k
      stop_all
      for i in $(seq 1 "$ENGINES"); do
        cmd=${ENGINE//\{port\}/$((PORT0 + i))}
        cmd=${cmd//\{events\}/$EVENTS}
        $cmd >"$work/engine-$i.log" 2>&1 & pids+=($!)
      done
      for u in "${urls[@]}"; do wait_http "$u/v1/models"; done
      start_router "$r"
      wait_http "http://127.0.0.1:$PORT0/v1/models"
      echo "engines-compare: $run $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
      "$work/saltus" bench --target "http://127.0.0.1:$PORT0" "${backends[@]}" --model "$MODEL" \
        --workloads "$wl" --trace-window "$WINDOW" --trace-block "$TRACE_BLOCK" --trace-speeds "$s" \
        "${shape[@]}" \
        --speedup 1 --drain "$DRAIN" --slo-ttft "$SLO" --overhead-pairs 0 --samples --out "$OUT/$run" >"$OUT/$run.log" 2>&1
      # The run's objective row: | target | requests | failed | mean | p50 | p99 | goodput | hit | ...
      grep -m1 '^| target |' <(sed -n '/against the TTFT objective/,$p' "$OUT/$run/report.md") |
        awk -F'|' -v w="$name" -v s="x$s" -v r="$r" '{ printf "| %s | %s | %s |%s|%s|%s|%s|%s|%s|%s|\n", w, s, r, $3, $4, $5, $6, $7, $8, $9 }' >>"$OUT/summary.md"
    done
   done
  done
done
stop_all
cat "$OUT/summary.md"
if [ "$SWEEPS" != 1 ]; then
  bench/sweep-medians.py "$OUT/summary.md" | tee "$OUT/medians.md"
fi
