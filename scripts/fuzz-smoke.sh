#!/usr/bin/env bash
# Runs every fuzz target of the packages given (default ./...) for FUZZTIME
# each (default 3s). Called by `make fuzz-smoke`.
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" when -fuzztime ends while a worker is mid-call on a loaded
# machine (go.dev/issue/75804, fixed in Go 1.27). It also fails one with
# "fuzzing process hung or terminated unexpectedly" when -fuzztime ends
# before a worker has finished running the seed corpus, which a target
# that loads a tokenizer per worker (tokenpool/tokenizer's FuzzEncode: a
# few seconds) can need on a busy machine. Neither writes a failing
# input, and the seeds themselves run in the ordinary tests. So: a
# failure that wrote a new file under testdata/fuzz/<target> fails the
# run; one that only says either is reported as that known flake and
# retried once with four times the time.
#
# Each package's test binary is built once, instrumented for fuzzing
# (`go test -c -fuzz`), and run for each of its targets from the
# package's folder, as `go test -fuzz` runs it: `go test -fuzz` links the
# binary again for every target (~15 s for cmd/saltus), most of the
# smoke's time once there were seventy targets.
#
# Targets run FUZZJOBS at a time (default 2), each with one fuzzing
# worker (-test.parallel 1): a target's FUZZTIME is wall time, and on two
# cores two targets of one worker each fuzz as much as one of two, while
# each target's start (its workers, the seed corpus) overlaps another's.
# Each target's lines are printed when it ends, whole.

set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-3s}
FUZZJOBS=${FUZZJOBS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/build.log
cache="$($GO env GOCACHE)/fuzz"

corpus_count() { # dir
  if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi
}

run_one() { # pkg pkgdir binary target fuzztime log
  local pkg=$1 f=$4 dir before after
  dir="$2/testdata/fuzz/$f"
  before=$(corpus_count "$dir")
  if (cd "$2" && "$3" -test.run '^$' -test.fuzz "^$f\$" -test.fuzztime "$5" \
    -test.parallel 1 -test.fuzzcachedir "$cache/$pkg" -test.paniconexit0 -test.timeout 10m) >"$6" 2>&1; then
    return 0
  fi
  after=$(corpus_count "$dir")
  if [ "$after" = "$before" ] && tail -8 "$6" | grep -q -e 'context deadline exceeded' -e 'fuzzing process hung or terminated unexpectedly'; then
    return 75 # the coordinator's flake: no failing input was written
  fi
  tail -40 "$6"
  return 1
}

# fuzz_target pkg pkgdir binary target: one target, its flake retried
# once; 0 when it passed.
fuzz_target() {
  local rc tlog="$work/$(echo "$1.$4" | tr / _).log"
  echo "fuzz $1 $4 ($FUZZTIME)"
  run_one "$1" "$2" "$3" "$4" "$FUZZTIME" "$tlog"
  rc=$?
  if [ $rc = 75 ]; then
    echo "  the coordinator's flake (deadline during a worker's call or its seeds, no failing input): running it again with 4x the time"
    run_one "$1" "$2" "$3" "$4" "$(longer "$FUZZTIME")" "$tlog"
    rc=$?
    if [ $rc = 75 ]; then
      echo "  the same coordinator flake twice, no failing input: not a failure of $4"
      rc=0
    fi
  fi
  return $rc
}

# fuzz_targets DIR: the fuzz targets declared in DIR's test files (func
# FuzzX(f *testing.F)), read from the source: `go test -list` would link a
# test binary for every package, most of which have none.
fuzz_targets() {
  grep -ho '^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)' "$1"/*_test.go 2>/dev/null | sed 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/' || true
}

# longer DURATION: four times a Go duration of whole seconds or minutes
# (5s → 20s), the retry's -fuzztime; anything else is kept.
longer() {
  case $1 in
    *[0-9]s) echo "$((${1%s} * 4))s" ;;
    *[0-9]m) echo "$((${1%m} * 4))m" ;;
    *) echo "$1" ;;
  esac
}

# The test binaries, then the targets.
pkgs=$($GO list -f '{{.ImportPath}}={{.Dir}}' "${@:-./...}") || exit 1
todo=()
for pd in $pkgs; do
  pkg=${pd%%=*}
  pdir=${pd#*=}
  targets=$(fuzz_targets "$pdir")
  [ -n "$targets" ] || continue
  bin="$work/$(echo "$pkg" | tr / _).test"
  if ! $GO test -c -fuzz Fuzz -o "$bin" "$pkg" >"$log" 2>&1; then
    tail -40 "$log"
    exit 1
  fi
  for f in $targets; do todo+=("$pkg|$pdir|$bin|$f"); done
done

# At most FUZZJOBS at once; each writes its output and exit status to
# files of its own. No target starts after one failed.
n=0
failed() { grep -L -x 0 "$work"/*.rc 2>/dev/null | head -1; }
for t in "${todo[@]}"; do
  while [ "$(find "$work" -name '*.run' | wc -l)" -ge "$FUZZJOBS" ]; do wait -n 2>/dev/null || sleep 0.1; done
  [ -z "$(failed)" ] || break
  n=$((n + 1))
  touch "$work/$n.run"
  IFS='|' read -r pkg pdir bin f <<<"$t" # a folder may hold spaces
  (
    fuzz_target "$pkg" "$pdir" "$bin" "$f" >"$work/$n.out" 2>&1
    echo $? >"$work/$n.rc"
    cat "$work/$n.out"
    rm -f "$work/$n.run"
  ) &
done
wait
f=$(failed)
if [ -n "$f" ]; then
  echo "fuzz-smoke: a target failed (above)"
  exit 1
fi
echo "fuzz-smoke: $n targets passed"
