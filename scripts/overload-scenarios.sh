#!/usr/bin/env bash
# Runs issue 30's overload scenarios (bench/cmd/overload: burst, priority,
# fairness, spike) against saltus in front of four saturated simulated
# engines: each `saltus sim --max-num-seqs 2 --max-waiting 2
# --overload-status 429` (2 running, 2 waiting, the rest refused with 429),
# saltus serve given only the four URLs and default settings. Prints the
# scenarios' lines, then saltus's overload counters from /metrics.
#
#   go build -o /tmp/saltus ./cmd/saltus && scripts/overload-scenarios.sh /tmp/saltus
#   scripts/overload-scenarios.sh /tmp/saltus-old /tmp/saltus   # an older router, the same engines
#
# The second argument is the binary whose `sim` runs the engines (default:
# the first), so that two routers can be compared on the same engines.
# CAP=N caps each engine at N requests at once (--backend-max-concurrency;
# the engines run 2): default none, the router learns from their refusals.
# SPEEDUP (default 2: one 1–2 KB request with 50 output tokens takes about
# 0.7 s alone on profile a100-13b) and SCENARIOS (default all) are read
# from the environment; METRICS_OUT names a file for saltus's whole
# /metrics after the run, KEEP_LOGS a directory for the processes' logs.
# ARRIVAL (closed, burst or open; default closed), RATE and DURATION (open's
# requests a second and span, default 12 and 30s) and SPACING (poisson or
# fixed) are passed to bench/cmd/overload, e.g.
#   ARRIVAL=open RATE=12 DURATION=30s SCENARIOS=priority scripts/overload-scenarios.sh /tmp/saltus
# Ports are picked at random in 20000-29999; every
# wait is bounded and every process started is stopped on exit.
set -euo pipefail
BIN=${1:?usage: $0 path/to/saltus [path/to/saltus-for-sim]}
SIMBIN=${2:-$BIN}
SPEEDUP=${SPEEDUP:-2}
SCENARIOS=${SCENARIOS:-burst,priority,fairness,spike}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${KEEP_LOGS:-}" ]; then cp "$work"/*.log "$KEEP_LOGS"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
port() { echo $((20000 + RANDOM % 10000)); }

go build -o "$work/overload" ./bench/cmd/overload

backends=()
for i in 0 1 2 3; do
  p=$(port)
  "$SIMBIN" sim --listen "127.0.0.1:$p" --max-num-seqs 2 --max-waiting 2 --overload-status 429 \
    --speedup "$SPEEDUP" --max-tokens 50 >"$work/sim$i.log" 2>&1 &
  pids+=("$!")
  backends+=(--backend "http://127.0.0.1:$p")
  if [ -n "${CAP:-}" ]; then backends+=(--backend-max-concurrency "http://127.0.0.1:$p=$CAP"); fi
done
API=$(port) ADM=$(port)
"$BIN" serve --listen "127.0.0.1:$API" --admin-listen "127.0.0.1:$ADM" "${backends[@]}" >"$work/saltus.log" 2>&1 &
pids+=("$!")

ready=
for _ in $(seq 100); do
  if [ "$(curl -s -o /dev/null -w '%{http_code}' -m 1 "http://127.0.0.1:$ADM/ready" || true)" = 200 ]; then ready=1; break; fi
  sleep 0.1
done
[ -n "$ready" ] || { echo "saltus not ready after 10 s" >&2; tail -20 "$work/saltus.log" >&2; exit 1; }
# One request answered 200: the pools are known and an engine answers.
CHAT='{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
for _ in $(seq 50); do
  c=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Content-Type: application/json' -d "$CHAT" "http://127.0.0.1:$API/v1/chat/completions" || true)
  [ "$c" = 200 ] && break
  sleep 0.2
done
[ "$c" = 200 ] || { echo "no 200 from saltus after 10 s (last $c)" >&2; exit 1; }
# Every engine's models known (an engine that was not listening yet at
# saltus's first round is fetched again 5 s later): all four in the pool.
known=
for _ in $(seq 150); do
  if curl -s -m 1 "http://127.0.0.1:$ADM/metrics" | grep -qx 'saltus_fleet_unknown_backends 0'; then known=1; break; fi
  sleep 0.1
done
[ -n "$known" ] || { echo "saltus does not know every engine's models after 15 s" >&2; exit 1; }

echo "router $BIN ($("$BIN" version 2>/dev/null || echo '?')), engines $SIMBIN sim, speedup $SPEEDUP"
timeout 900 "$work/overload" --url "http://127.0.0.1:$API" --model sim-llama --scenarios "$SCENARIOS" \
  --arrival "${ARRIVAL:-closed}" --rate "${RATE:-12}" --duration "${DURATION:-30s}" --spacing "${SPACING:-poisson}"
curl -s -m 5 "http://127.0.0.1:$ADM/metrics" >"${METRICS_OUT:-/dev/null}" || true
echo "saltus /metrics:"
curl -s -m 5 "http://127.0.0.1:$ADM/metrics" |
  grep -E '^saltus_(queue_requests_total|queue_depth|engine_refusals_total|pool_refused_total|backend_overload_total|retries_total)' || echo "  (none of the overload counters)"
