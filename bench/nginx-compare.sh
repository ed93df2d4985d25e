#!/usr/bin/env bash
# Requests/s of saltus vs nginx as a plain round-robin reverse proxy, in the
# same run, on loopback: 4 KB chat requests to an instant upstream over 32
# keep-alive connections (`make bench-serve`), in two modes (MODES):
# whole answers (non-streamed JSON) and streamed answers (SSE: EVENTS
# content events, each its own flushed chunk at the upstream, then usage
# and [DONE]: what LLM clients send and read).
#
# Every process is separate: the upstream (bench/cmd/upstream), saltus
# (bin/saltus serve, byte-block mode: no tokenizer), nginx, and the load
# generator (bench/cmd/loadgen). Runs alternate saltus (its default
# policy, prefix), nginx, saltus --pin-shards and saltus --policy
# round_robin (the work nginx does: the transport against nginx's, without
# the prefix policy's decode, keys, route table and usage feedback),
# ROUNDS times, the order rotating by one each round; the table gives
# medians: req/s, the ratio to
# nginx (of medians, and the median of each round's ratio), and the
# proxy's CPU time per request (user+system, from /proc). nginx is
# installed with apt-get where missing (root or passwordless sudo needed).
#
# BASE=/path/to/saltus (another build, e.g. an older commit's; see
# bench/added-latency.sh for how to build one) adds a row "saltus (BASE)"
# to the plain modes: that binary with its default policy, in the same
# rounds, so a change is measured against its parent in one run.
#
# TLS modes (tls-whole, tls-stream): the same loads over TLS to saltus
# (--tls-cert-file) and nginx (listen ssl), both with one self-signed ECDSA
# P-256 certificate for 127.0.0.1 (made by Go's crypto/tls/generate_cert.go,
# or openssl); the load generator verifies it (--tls-ca), offers only
# http/1.1, and keeps its connections alive (one handshake each). Rows:
# saltus over TLS, nginx over TLS, and plain saltus in the same rounds:
# the ratio to nginx is TLS against TLS, and "TLS / plain" is what TLS
# costs saltus itself.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-32}
SHARDS=${SHARDS:-2}
MODES=${MODES:-whole stream tls-whole tls-stream}
EVENTS=${EVENTS:-16}
UP=127.0.0.1:18101 SAL=127.0.0.1:18180 SAL_PIN=127.0.0.1:18181 SAL_RR=127.0.0.1:18182 NGX=127.0.0.1:18190
SAL_TLS=127.0.0.1:18183 NGX_TLS=127.0.0.1:18191 SAL_BASE=127.0.0.1:18184
BASE=${BASE:-}

. bench/serve-lib.sh # $work with the binaries, $pids, the cleanup
require_free $UP $SAL $SAL_PIN $SAL_RR $NGX $SAL_TLS $NGX_TLS $SAL_BASE

"$work/upstream" --listen $UP --sse-events "$EVENTS" >/dev/null & pids+=($!)
"$work/saltus" serve --listen $SAL --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --log-level warn & pids+=($!)
SAL_PID=$!
"$work/saltus" serve --listen $SAL_PIN --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --pin-shards --log-level warn & pids+=($!)
SAL_PIN_PID=$!
"$work/saltus" serve --listen $SAL_RR --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --policy round_robin --log-level warn & pids+=($!)
SAL_RR_PID=$!
SAL_BASE_PID=""
if [ -n "$BASE" ]; then
  "$BASE" serve --listen $SAL_BASE --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --log-level warn & pids+=($!)
  SAL_BASE_PID=$!
fi
# One self-signed certificate for both TLS listeners.
(cd "$work" && GO111MODULE=off go run "$(go env GOROOT)/src/crypto/tls/generate_cert.go" --host 127.0.0.1 --ecdsa-curve P256 --duration 24h 2>/dev/null) ||
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
"$work/saltus" serve --listen $SAL_TLS --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --log-level warn \
  --tls-cert-file "$work/cert.pem" --tls-key-file "$work/key.pem" & pids+=($!)
SAL_TLS_PID=$!
start_nginx "$NGX" "$UP" "$NGX_TLS"

# Wait until all answer.
for t in $SAL $SAL_PIN $SAL_RR $NGX ${BASE:+$SAL_BASE} "$SAL_TLS --tls-ca $work/cert.pem" "$NGX_TLS --tls-ca $work/cert.pem"; do
  for _ in $(seq 100); do
    "$work/loadgen" --target $t --conns 1 --duration 1s --requests 1 >/dev/null 2>&1 && break
    sleep 0.1
  done
done
NGX_PIDS=$(pgrep -P "$(cat "$work/nginx.pid")" | tr '\n' ' ')
# cpu PID...: user+system clock ticks of the processes so far.
cpu() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
# run TARGET PID...: one load run; its JSON gains the proxy's CPU time per
# request (µs, user+system), less noisy on a shared machine than req/s. A
# TARGET of the TLS listeners is loaded over TLS.
run() {
  local t=$1; shift
  local tlsarg=""; case $t in $SAL_TLS|$NGX_TLS) tlsarg="--tls-ca $work/cert.pem" ;; esac
  local c0; c0=$(cpu "$@")
  local out; out=$("$work/loadgen" --target "$t" --conns "$CONNS" --duration "$DURATION" $STREAM $tlsarg --json)
  local c1; c1=$(cpu "$@")
  python3 -c 'import json,sys,os; d=json.loads(sys.argv[1]); d["cpu_us"]=(int(sys.argv[2])*1e6/os.sysconf("SC_CLK_TCK"))/max(d["requests"],1); print(json.dumps(d,separators=(",",":")))' "$out" $((c1 - c0))
}
# table NAMES SALTUS NGINX MORE...: the markdown table of one mode's runs
# (NAMES: the rows' names, separated by commas; the second is the
# baseline). A row named "saltus (plain)" also gets the TLS cost line.
table() {
python3 - "$@" <<'PY'
import json, statistics, sys
names = sys.argv[1].split(",")
runs = [[json.loads(x) for x in arg.split()] for arg in sys.argv[2:]]
med = lambda rs, k: statistics.median(r[k] for r in rs)
ngx = med(runs[1], "rps")
# Each round runs saltus and nginx within seconds of each other (the order
# rotating round by round): the median of those paired ratios is steadier
# than a ratio of medians when the machine is shared.
paired = lambda rs: statistics.median(a["rps"] / b["rps"] for a, b in zip(rs, runs[1]))
print(f"| proxy | req/s (median of {len(runs[0])}) | vs nginx | paired rounds vs nginx | CPU µs/request | p50 µs | p99 µs |")
print("|---|--:|--:|--:|--:|--:|--:|")
for n, rs in zip(names, runs):
    print(f"| {n} | {med(rs,'rps'):.0f} | {med(rs,'rps')/ngx:.2f}x | {paired(rs):.2f}x | {med(rs,'cpu_us'):.1f} | {med(rs,'p50_us'):.0f} | {med(rs,'p99_us'):.0f} |")
if "saltus (plain)" in names:
    tls, plain = runs[0], runs[names.index("saltus (plain)")]
    cost = statistics.median(a["rps"] / b["rps"] for a, b in zip(tls, plain))
    print(f"\nTLS / plain for saltus: {cost:.2f}x req/s (median of paired rounds), CPU µs/request {med(tls,'cpu_us'):.1f} vs {med(plain,'cpu_us'):.1f}")
PY
}

for mode in $MODES; do
  case $mode in
  whole) STREAM="" title="whole answers (non-streamed JSON)" ;;
  stream) STREAM="--stream" title="streamed answers ($EVENTS SSE events, each its own chunk)" ;;
  tls-whole) STREAM="" title="TLS, whole answers (non-streamed JSON)" ;;
  tls-stream) STREAM="--stream" title="TLS, streamed answers ($EVENTS SSE events, each its own chunk)" ;;
  *) echo "nginx-compare: unknown mode $mode (whole, stream, tls-whole, tls-stream)" >&2; exit 2 ;;
  esac
  case $mode in
  tls-*) proxies="saltus-tls nginx-tls saltus" names="saltus (TLS),nginx (TLS),saltus (plain)" ;;
  *) proxies="saltus nginx saltus-pin saltus-rr" names="saltus,nginx,saltus --pin-shards,saltus --policy round_robin"
     [ -z "$BASE" ] || { proxies="$proxies saltus-base" names="$names,saltus (BASE)"; } ;;
  esac
  target() {
    case $1 in
    saltus) echo "$SAL $SAL_PID" ;; nginx) echo "$NGX $NGX_PIDS" ;; saltus-pin) echo "$SAL_PIN $SAL_PIN_PID" ;;
    saltus-rr) echo "$SAL_RR $SAL_RR_PID" ;; saltus-base) echo "$SAL_BASE $SAL_BASE_PID" ;; saltus-tls) echo "$SAL_TLS $SAL_TLS_PID" ;; nginx-tls) echo "$NGX_TLS $NGX_PIDS" ;;
    esac
  }
  for name in $proxies; do run $(target $name) >/dev/null; done # warm-up
  declare -A results=()
  read -r -a order <<<"$proxies"
  for r in $(seq "$ROUNDS"); do
    # The order rotates by one each round: no proxy always runs first
    # (right after a mode's warm-up or another's load).
    for name in "${order[@]}"; do
      results[$name]+="$(run $(target $name)) "
      echo "$mode round $r $name: $(echo "${results[$name]}" | awk '{print $NF}')" >&2
    done
    order=("${order[@]:1}" "${order[0]}")
  done
  echo "## $title"
  echo
  args=()
  for name in $proxies; do args+=("${results[$name]}"); done
  table "$names" "${args[@]}"
  echo
done
