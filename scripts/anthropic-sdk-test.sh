#!/usr/bin/env bash
# Anthropic's official TypeScript SDK against saltus (issue 35): builds
# saltus, starts two `saltus sim` engines (the llama3 tokenizer and
# template, as `saltus serve`'s) and `saltus serve` with an API key in
# front of them, all on free loopback ports, installs the SDK pinned in
# test/anthropic/package-lock.json (npm ci, from the registry) and runs
# test/anthropic/messages.test.mjs with node's test runner:
# messages.create, streaming, tool use and a tool_result turn, a shared
# system prompt kept on one engine (its block hit ratio against the same
# conversation sent as chat completions), and saltus's errors as the SDK's
# error classes.
#
#   make anthropic-check         # or: scripts/anthropic-sdk-test.sh
#
# Needs node (18 or later) and npm. Every process it starts is stopped by
# its pid when it exits; the whole run is bounded by timeouts.
set -euo pipefail
GO=${GO:-go}
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

have() { command -v "$1" >/dev/null 2>&1; }
if { ! have node || ! have npm; } && [ "$(id -u)" = 0 ] && have apt-get; then
  echo "anthropic-sdk-test: installing Debian's nodejs and npm" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if ! have node || ! have npm; then
  echo "anthropic-sdk-test: needs node and npm" >&2
  exit 1
fi

echo "anthropic-sdk-test: building saltus"
"$GO" build -o "$work/saltus" ./cmd/saltus
(cd test/anthropic && timeout 300 npm ci --no-audit --no-fund --loglevel=error)

# Free loopback ports: bound to port 0 by the kernel, then released.
read -r p1 p2 api adm < <(node -e '
const net = require("net");
const get = () => new Promise((ok) => { const s = net.createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); }); });
(async () => { const ps = []; for (let i = 0; i < 4; i++) ps.push(await get()); console.log(ps.join(" ")); })();')

tok=$root/tokenpool/testdata/models/llama3/tokenizer.json.gz
for p in "$p1" "$p2"; do
  "$work/saltus" sim --listen "127.0.0.1:$p" --model llama3 --tokenizer "$tok" --chat-template llama3 \
    --speedup 100 --max-tokens 8 --log-level warn >"$work/sim-$p.log" 2>&1 &
  pids+=($!)
done
secret=sk-anthropic-sdk-test-0123456789
printf '%s\n' "$secret" | "$work/saltus" keys hash --name sdk >"$work/keys.yaml"
"$work/saltus" serve --listen "127.0.0.1:$api" --admin-listen "127.0.0.1:$adm" \
  --backend "http://127.0.0.1:$p1" --backend "http://127.0.0.1:$p2" \
  --tokenizer "$tok" --chat-template llama3 --api-keys-file "$work/keys.yaml" --log-level warn >"$work/serve.log" 2>&1 &
pids+=($!)

# Ready when saltus says so and knows both engines serve llama3 (its
# pool: a model no engine serves is then saltus's own 404). At most 30 s.
if ! ADM="http://127.0.0.1:$adm" node -e '
const adm = process.env.ADM;
const ready = async () => {
  try {
    if (!(await fetch(adm + "/ready")).ok) return false;
    const m = await (await fetch(adm + "/metrics")).text();
    return m.split("\n").includes("saltus_pool_backends{model=\"llama3\"} 2");
  } catch { return false; }
};
(async () => {
  for (let i = 0; i < 300; i++) {
    if (await ready()) process.exit(0);
    await new Promise((r) => setTimeout(r, 100));
  }
  process.exit(1);
})();'; then
  echo "anthropic-sdk-test: saltus or the engines did not start" >&2
  cat "$work"/*.log >&2
  exit 1
fi

status=0
(cd test/anthropic && env -u ANTHROPIC_API_KEY -u ANTHROPIC_AUTH_TOKEN -u ANTHROPIC_BASE_URL \
  SALTUS_URL="http://127.0.0.1:$api" SALTUS_KEY="$secret" timeout 120 node --test --test-reporter=spec messages.test.mjs) || status=$?
if [ "$status" != 0 ]; then
  echo "anthropic-sdk-test: failed; saltus's log:" >&2
  tail -n 50 "$work/serve.log" >&2
fi
exit "$status"
