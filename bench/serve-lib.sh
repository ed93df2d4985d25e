# Sourced by bench/nginx-compare.sh and bench/added-latency.sh (after
# they call require_free on the addresses they use): a
# temporary directory ($work) with the three binaries they run (saltus,
# the instant upstream, the load generator) built from this checkout, and
# a cleanup on exit that kills every process whose pid is in $pids (and
# nginx, if $work/nginx.pid exists) and removes $work; start_nginx runs
# nginx as the plain reverse proxy they compare saltus with.
# require_free ADDR...: stop when something already listens on one of
# the loopback addresses the run is about to use (a process left from an
# earlier run would answer instead of the one measured, and every
# request would count against the wrong proxy).
require_free() {
  local a
  for a in "$@"; do
    if (exec 3<>"/dev/tcp/${a%:*}/${a##*:}") 2>/dev/null; then
      echo "$a is already in use (a process left from an earlier run?): stop it first" >&2
      exit 1
    fi
  done
}

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

# start_nginx LISTEN UPSTREAM [TLS_LISTEN]: nginx (installed with apt-get
# where missing: root or passwordless sudo needed) with $SHARDS workers
# proxying LISTEN to UPSTREAM over keep-alive connections, unbuffered;
# with TLS_LISTEN, the same over TLS with $work/cert.pem and key.pem.
start_nginx() {
  if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
    echo "nginx is missing: installing it with apt-get" >&2
    local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
  fi
  NGINX=$(command -v nginx || echo /usr/sbin/nginx)
  local loc='location / { proxy_pass http://engines; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }'
  local tls=""
  [ -z "${3:-}" ] || tls="server { listen $3 ssl; ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem; ssl_protocols TLSv1.2 TLSv1.3; $loc }"
  mkdir -p "$work/tmp"
  cat >"$work/nginx.conf" <<CONF
worker_processes ${SHARDS:-2};
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
  upstream engines { server $2; keepalive 128; keepalive_requests 100000000; }
  server { listen $1; $loc }
  $tls
}
CONF
  "$NGINX" -c "$work/nginx.conf" -e "$work/error.log"
}

# wait_answer TARGET...: returns once each target (host:port, maybe with
# loadgen flags after it) has answered one request, at most ~10 s each.
wait_answer() {
  local t
  for t in "$@"; do
    for _ in $(seq 100); do
      "$work/loadgen" --target $t --conns 1 --duration 1s --requests 1 >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
}

# start_saltus_pair BIN_A POLICY_A BIN_B POLICY_B: the instant upstream on
# $UP ($EVENTS SSE events a streamed answer, default 16) and two saltus
# processes proxying to it on $SA and $SB ($SHARDS loops, default 2), their
# pids in APID and BPID; returns once both answer (bench/ab-compare.sh,
# bench/profile-pair.sh).
start_saltus_pair() {
  "$work/upstream" --listen "$UP" --sse-events "${EVENTS:-16}" >/dev/null & pids+=($!)
  "$1" serve --listen "$SA" --admin-listen 127.0.0.1:0 --backend "http://$UP" --shards "${SHARDS:-2}" --policy "$2" --log-level warn & pids+=($!)
  APID=$!
  "$3" serve --listen "$SB" --admin-listen 127.0.0.1:0 --backend "http://$UP" --shards "${SHARDS:-2}" --policy "$4" --log-level warn & pids+=($!)
  BPID=$!
  wait_answer "$SA" "$SB"
}

# stream_flag MODE: loadgen's flag for MODE (whole: none, stream:
# --stream); exits on another.
stream_flag() {
  case $1 in
  whole) echo "" ;;
  stream) echo "--stream" ;;
  *) echo "MODE is whole or stream, not $1" >&2; exit 2 ;;
  esac
}
