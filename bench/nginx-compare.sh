#!/usr/bin/env bash
# Requests/s of saltus vs nginx as a plain round-robin reverse proxy, in the
# same run, on loopback: 4 KB non-streamed chat requests to an instant
# upstream over 32 keep-alive connections (`make bench-serve`).
#
# Every process is separate: the upstream (bench/cmd/upstream), saltus
# (bin/saltus serve, byte-block mode: no tokenizer), nginx, and the load
# generator (bench/cmd/loadgen). Runs alternate saltus, nginx, saltus
# --pin-shards, ROUNDS times; the table gives medians. nginx is installed
# with apt-get where missing (root or passwordless sudo needed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3s}
CONNS=${CONNS:-32}
SHARDS=${SHARDS:-2}
UP=127.0.0.1:18101 SAL=127.0.0.1:18180 SAL_PIN=127.0.0.1:18181 NGX=127.0.0.1:18190

if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  echo "nginx is missing: installing it with apt-get" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/saltus" ./cmd/saltus
go build -o "$work/upstream" ./bench/cmd/upstream
go build -o "$work/loadgen" ./bench/cmd/loadgen

"$work/upstream" --listen $UP >/dev/null & pids+=($!)
"$work/saltus" serve --listen $SAL --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --log-level warn & pids+=($!)
"$work/saltus" serve --listen $SAL_PIN --admin-listen 127.0.0.1:0 --backend http://$UP --shards $SHARDS --pin-shards --log-level warn & pids+=($!)
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
for t in $SAL $SAL_PIN $NGX; do
  for _ in $(seq 100); do
    "$work/loadgen" --target $t --conns 1 --duration 1s --requests 1 >/dev/null 2>&1 && break
    sleep 0.1
  done
done
run() { "$work/loadgen" --target "$1" --conns "$CONNS" --duration "$DURATION" --json; }
for t in $SAL $NGX $SAL_PIN; do run $t >/dev/null; done # warm-up

declare -A results
for r in $(seq "$ROUNDS"); do
  for name in saltus nginx saltus-pin; do
    case $name in saltus) t=$SAL ;; nginx) t=$NGX ;; saltus-pin) t=$SAL_PIN ;; esac
    results[$name]+="$(run $t) "
    echo "round $r $name: $(echo "${results[$name]}" | awk '{print $NF}')" >&2
  done
done

python3 - "${results[saltus]}" "${results[nginx]}" "${results[saltus-pin]}" <<'PY'
import json, statistics, sys
names = ["saltus", "nginx", "saltus --pin-shards"]
runs = [[json.loads(x) for x in arg.split()] for arg in sys.argv[1:]]
med = lambda rs, k: statistics.median(r[k] for r in rs)
ngx = med(runs[1], "rps")
print(f"| proxy | req/s (median of {len(runs[0])}) | p50 µs | p99 µs | vs nginx |")
print("|---|--:|--:|--:|--:|")
for n, rs in zip(names, runs):
    print(f"| {n} | {med(rs,'rps'):.0f} | {med(rs,'p50_us'):.0f} | {med(rs,'p99_us'):.0f} | {med(rs,'rps')/ngx:.2f}x |")
PY
