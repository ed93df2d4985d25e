#!/usr/bin/env bash
# Resident memory of `saltus serve` around one hostile request body (issue
# 33): for each body, a fresh saltus whose only backend is a dead port
# (the bodies are refused or decoded before any is needed), its RSS before,
# its peak growth (VmHWM) against the body's size, and its RSS 12 s later
# (after --memory-give-back's next look). The bodies (BODIES, space
# separated): ones (an unknown field holding a million 1s), objs (a
# million {}), strs (a million "a"), nested (16,000 arrays nested 60
# deep), parts (a million one-character content parts of one message).
# SALTUS: the binary (default: built from this tree). Linux (/proc).
set -euo pipefail
cd "$(dirname "$0")/.."
BODIES=${BODIES:-ones objs strs nested parts}
PORT=${PORT:-18960}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SALTUS=${SALTUS:-}
if [ -z "$SALTUS" ]; then
  go build -o "$tmp/saltus" ./cmd/saltus
  SALTUS=$tmp/saltus
fi
python3 - "$tmp" <<'PY'
import sys
n, d = 1000000, sys.argv[1]
bodies = {
    'ones': b'{"model":"m","junk":[' + b','.join([b'1'] * n) + b']}',
    'objs': b'{"model":"m","junk":[' + b','.join([b'{}'] * n) + b']}',
    'strs': b'{"model":"m","junk":[' + b','.join([b'"a"'] * n) + b']}',
    'nested': b'{"model":"m","junk":[' + b','.join([b'[' * 60 + b']' * 60] * 16000) + b']}',
    'parts': b'{"model":"m","messages":[{"role":"user","content":[' + b','.join([b'"a"'] * n) + b']}]}',
}
for k, v in bodies.items():
    open(f'{d}/{k}.json', 'wb').write(v)
PY
echo "| body | bytes | answer | RSS before MiB | peak growth MiB | × body | RSS 12 s later MiB |"
echo "|---|--:|--:|--:|--:|--:|--:|"
for b in $BODIES; do
  "$SALTUS" serve --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$((PORT + 1))" --backend http://127.0.0.1:9 \
    --log-level warn >"$tmp/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$((PORT + 1))/metrics" && break; sleep 0.1; done
  sleep 1
  kb() { awk -v k="$1:" '$1==k{print $2}' "/proc/$pid/status"; }
  before=$(kb VmRSS)
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "@$tmp/$b.json" "http://127.0.0.1:$PORT/v1/chat/completions")
  peak=$(kb VmHWM)
  sleep 12
  after=$(kb VmRSS)
  size=$(stat -c %s "$tmp/$b.json")
  awk -v n="$b" -v c="$code" -v b="$before" -v p="$peak" -v a="$after" -v s="$size" 'BEGIN {
    printf "| %s | %d | %s | %.1f | %.1f | %.1f | %.1f (%+.0f %%) |\n", n, s, c, b/1024, (p-b)/1024, (p-b)*1024/s, a/1024, (a-b)*100/b }'
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
