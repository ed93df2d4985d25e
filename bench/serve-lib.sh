# Sourced by bench/nginx-compare.sh and bench/added-latency.sh: a
# temporary directory ($work) with the three binaries they run (saltus,
# the instant upstream, the load generator) built from this checkout, and
# a cleanup on exit that kills every process whose pid is in $pids (and
# nginx, if $work/nginx.pid exists) and removes $work.
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
