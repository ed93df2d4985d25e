#!/usr/bin/env bash
# Reloads under load (issue 14): saltus serve over two simulated engines
# (saltus sim, speedup 50) with a --config file; a keep-alive load of
# streamed chats for DURATION while the file is rewritten and
# POST /admin/reload sent RELOADS times (backends alternating between
# {a, b} and {a}, max-body and load-slack changed each time). Prints the
# load's result (every answer must be a 200) and the reloads' counters.
# Loopback only; every process stops by itself or on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-20s}
RELOADS=${RELOADS:-20}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/saltus" ./cmd/saltus
go build -o "$work/loadgen" ./bench/cmd/loadgen
for port in 18301 18302; do
  "$work/saltus" sim --listen 127.0.0.1:$port --speedup 50 --log-level warn & pids+=($!)
done
conf() { # backends, max-body, load-slack
  printf 'listen: 127.0.0.1:18380\nadmin-listen: 127.0.0.1:18381\nlog-level: warn\nbackends: [%s]\nmax-body: %s\nload-slack: %s\n' "$1" "$2" "$3" > "$work/saltus.yaml"
}
conf "http://127.0.0.1:18301, http://127.0.0.1:18302" 1MiB 1
"$work/saltus" serve --config "$work/saltus.yaml" 2> "$work/serve.log" & pids+=($!)
for _ in $(seq 100); do curl -sf 127.0.0.1:18381/ready >/dev/null 2>&1 && break; sleep 0.1; done
"$work/loadgen" --target 127.0.0.1:18380 --conns 16 --stream --duration "$DURATION" --json > "$work/load.json" & load=$!
pids+=($load)
secs=${DURATION%s}
for i in $(seq "$RELOADS"); do
  sleep "$(awk -v s="$secs" -v n="$RELOADS" 'BEGIN{printf "%.2f", s/(n+1)}')"
  if (( i % 2 )); then conf "http://127.0.0.1:18301" 2MiB 0.5; else conf "http://127.0.0.1:18301, http://127.0.0.1:18302" 1MiB 1; fi
  curl -sf -X POST 127.0.0.1:18381/admin/reload > "$work/reload-$i.json"
done
wait "$load"
echo "load: $(cat "$work/load.json")"
echo "last reload: $(cat "$work/reload-$RELOADS.json")"
curl -sf 127.0.0.1:18381/metrics | grep -E '^saltus_config_reloads_total|^saltus_requests_total\{route="chat"' || true
grep -iE 'level=(ERROR|WARN)' "$work/serve.log" | head -5 || true
