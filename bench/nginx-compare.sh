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
# ROUNDS times; the table gives medians: req/s, the ratio to
# nginx (of medians, and the median of each round's ratio), and the
# proxy's CPU time per request (user+system, from /proc). nginx is
# installed with apt-get where missing (root or passwordless sudo needed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-32}
SHARDS=${SHARDS:-2}
MODES=${MODES:-whole stream}
EVENTS=${EVENTS:-16}
UP=127.0.0.1:18101 SAL=127.0.0.1:18180 SAL_PIN=127.0.0.1:18181 SAL_RR=127.0.0.1:18182 NGX=127.0.0.1:18190

if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  echo "nginx is missing: installing it with apt-get" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

. bench/serve-lib.sh # $work with the binaries, $pids, the cleanup

"$work/upstream" --listen $UP --sse-events "$EVENTS" >/dev/null & pids+=($!)
"$work/saltus" serve --listen $SAL --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --log-level warn & pids+=($!)
SAL_PID=$!
"$work/saltus" serve --listen $SAL_PIN --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --pin-shards --log-level warn & pids+=($!)
SAL_PIN_PID=$!
"$work/saltus" serve --listen $SAL_RR --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --policy round_robin --log-level warn & pids+=($!)
SAL_RR_PID=$!
mkdir -p "$work/tmp"
cat >"$work/nginx.conf" <<CONF
worker_processes $SHARDS;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  client_body_buffer_size 64k;
  client_body_temp_path $work/tmp/body;
  proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fastcgi;
  uwsgi_temp_path $work/tmp/uwsgi;
  scgi_temp_path $work/tmp/scgi;
  upstream engines { server $UP; keepalive 128; keepalive_requests 100000000; }
  server {
    listen $NGX;
    location / {
      proxy_pass http://engines;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
"$NGINX" -c "$work/nginx.conf" -e "$work/error.log"

# Wait until all three answer.
for t in $SAL $SAL_PIN $SAL_RR $NGX; do
  for _ in $(seq 100); do
    "$work/loadgen" --target $t --conns 1 --duration 1s --requests 1 >/dev/null 2>&1 && break
    sleep 0.1
  done
done
NGX_PIDS=$(pgrep -P "$(cat "$work/nginx.pid")" | tr '\n' ' ')
# cpu PID...: user+system clock ticks of the processes so far.
cpu() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
# run TARGET PID...: one load run; its JSON gains the proxy's CPU time per
# request (µs, user+system), less noisy on a shared machine than req/s.
run() {
  local t=$1; shift
  local c0; c0=$(cpu "$@")
  local out; out=$("$work/loadgen" --target "$t" --conns "$CONNS" --duration "$DURATION" $STREAM --json)
  local c1; c1=$(cpu "$@")
  python3 -c 'import json,sys,os; d=json.loads(sys.argv[1]); d["cpu_us"]=(int(sys.argv[2])*1e6/os.sysconf("SC_CLK_TCK"))/max(d["requests"],1); print(json.dumps(d,separators=(",",":")))' "$out" $((c1 - c0))
}
# table SALTUS NGINX SALTUS_PIN: the markdown table of one mode's runs.
table() {
python3 - "$@" <<'PY'
import json, statistics, sys
names = ["saltus", "nginx", "saltus --pin-shards", "saltus --policy round_robin"]
runs = [[json.loads(x) for x in arg.split()] for arg in sys.argv[1:]]
med = lambda rs, k: statistics.median(r[k] for r in rs)
ngx = med(runs[1], "rps")
# Each round runs saltus right before nginx: the median of those paired
# ratios is steadier than a ratio of medians when the machine is shared.
paired = lambda rs: statistics.median(a["rps"] / b["rps"] for a, b in zip(rs, runs[1]))
print(f"| proxy | req/s (median of {len(runs[0])}) | vs nginx | paired rounds vs nginx | CPU µs/request | p50 µs | p99 µs |")
print("|---|--:|--:|--:|--:|--:|--:|")
for n, rs in zip(names, runs):
    print(f"| {n} | {med(rs,'rps'):.0f} | {med(rs,'rps')/ngx:.2f}x | {paired(rs):.2f}x | {med(rs,'cpu_us'):.1f} | {med(rs,'p50_us'):.0f} | {med(rs,'p99_us'):.0f} |")
PY
}

for mode in $MODES; do
  case $mode in
  whole) STREAM="" title="whole answers (non-streamed JSON)" ;;
  stream) STREAM="--stream" title="streamed answers ($EVENTS SSE events, each its own chunk)" ;;
  *) echo "nginx-compare: unknown mode $mode (whole, stream)" >&2; exit 2 ;;
  esac
  for t in "$SAL $SAL_PID" "$NGX $NGX_PIDS" "$SAL_PIN $SAL_PIN_PID" "$SAL_RR $SAL_RR_PID"; do run $t >/dev/null; done # warm-up
  declare -A results=()
  for r in $(seq "$ROUNDS"); do
    for name in saltus nginx saltus-pin saltus-rr; do
      case $name in saltus) t="$SAL $SAL_PID" ;; nginx) t="$NGX $NGX_PIDS" ;; saltus-pin) t="$SAL_PIN $SAL_PIN_PID" ;; saltus-rr) t="$SAL_RR $SAL_RR_PID" ;; esac
      results[$name]+="$(run $t) "
      echo "$mode round $r $name: $(echo "${results[$name]}" | awk '{print $NF}')" >&2
    done
  done
  echo "## $title"
  echo
  table "${results[saltus]}" "${results[nginx]}" "${results[saltus-pin]}" "${results[saltus-rr]}"
  echo
done
