#!/usr/bin/env bash
# Measures how long saltus answers 503 after its only backend comes back
# (issue 15): a simulated engine (saltus sim) behind saltus serve (default
# settings) is killed, left down until the probes mark it down (MODE=idle,
# 16 s: three failed probes 5 s apart) or until requests trip the breaker
# (MODE=traffic), then restarted; the script prints the time from the
# engine answering /health again to saltus's first 200.
#
#   go build -o /tmp/saltus ./cmd/saltus && MODE=idle scripts/health-recovery.sh /tmp/saltus
#
# Ports are picked at random in 20000-29999; every wait is bounded.
set -euo pipefail
BIN=${1:?usage: $0 path/to/saltus}
MODE=${MODE:-idle}
port() { echo $((20000 + RANDOM % 10000)); }
SIM=$(port) API=$(port) ADM=$(port)
CHAT='{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
now() { date +%s.%N; }
code() { curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Content-Type: application/json' -d "$CHAT" "http://127.0.0.1:$API/v1/chat/completions" || true; }
"$BIN" sim -listen "127.0.0.1:$SIM" -speedup 100 >/dev/null 2>&1 & sim=$!; pids+=("$sim")
"$BIN" serve --listen "127.0.0.1:$API" --admin-listen "127.0.0.1:$ADM" --backend "http://127.0.0.1:$SIM" >/dev/null 2>&1 & pids+=("$!")
for _ in $(seq 100); do [ "$(code)" = 200 ] && break; sleep 0.1; done
echo "up: $(code)"
kill "$sim"; wait "$sim" 2>/dev/null || true
if [ "$MODE" = idle ]; then
  sleep 16
else
  for _ in $(seq 8); do printf '%s ' "$(code)"; done; echo; sleep 2
fi
echo "down: chat $(code), models $(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$API/v1/models")"
"$BIN" sim -listen "127.0.0.1:$SIM" -speedup 100 >/dev/null 2>&1 & pids+=("$!")
for _ in $(seq 200); do [ "$(curl -s -o /dev/null -w '%{http_code}' -m 1 "http://127.0.0.1:$SIM/health" || true)" = 200 ] && break; sleep 0.01; done
t1=$(now)
c=000
for _ in $(seq 500); do c=$(code); [ "$c" = 200 ] && break; sleep 0.02; done
t2=$(now)
echo "mode $MODE: saltus answered $c $(echo "$t2 - $t1" | bc) s after the engine's /health answered again"
