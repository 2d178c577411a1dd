#!/usr/bin/env bash
# Instructions and cache misses per decision of the memory store and of
# governor's keyed limiter, counted by callgrind's cache simulation, on the
# cells of `benches/memory_store.rs` (keys in random order, one thread).
#
#   scripts/profile-memory-store.sh [BENCH_BINARY...]
#
# Without arguments, builds the `memory_store` bench (release) and profiles
# it; with several binaries (say, built before and after a change), profiles
# slidegate in each, and governor in the first. Both limiters run on manual
# clocks that move a fixed time per decision (see the bench's
# `MEMORY_PROFILE`), reach their steady state with callgrind's
# instrumentation off, then count a million decisions.
#
# The simulated caches are this machine's: L1d 32 KiB 8-way, and as the
# last level the L3, 32 MiB 16-way (D1 and LL below); override with
# CALLGRIND_CACHES. Environment: CELLS (default
# "u64/1/1 u64/1/10000 u64/1/1000000 string/1/1 string/1/10000 string/1/1000000"),
# MEMORY_PROFILE_NS (the time per decision; see the bench), MEMORY_SHARDS
# (slidegate's shard count, the builder's default without it).
# Needs valgrind (callgrind_control included).
set -euo pipefail
cd "$(dirname "$0")/.."
CELLS=${CELLS:-u64/1/1 u64/1/10000 u64/1/1000000 string/1/1 string/1/10000 string/1/1000000}
CALLGRIND_CACHES=${CALLGRIND_CACHES:---D1=32768,8,64 --LL=33554432,16,64}

if [ $# = 0 ]; then
  bin=$(cargo bench -p slidegate --bench memory_store --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*memory_store[^"]*\)".*/\1/p' | tail -1)
  [ -n "$bin" ] || { echo "profile-memory-store: could not build the bench" >&2; exit 1; }
  set -- "$bin"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# profile BINARY SIDE CELL -> "Ir D1 LL" per decision
profile() {
  local out="$WORK/callgrind.out" err="$WORK/stderr" pid
  rm -f "$out" "$err"
  # shellcheck disable=SC2086
  MEMORY_PROFILE=$2 MEMORY_CELLS=$3 MEMORY_PROFILE_PAUSE_MS=3000 \
    valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
    --toggle-collect='*profiled*' --cache-sim=yes $CALLGRIND_CACHES \
    --callgrind-out-file="$out" "$1" >/dev/null 2>"$err" &
  pid=$!
  until grep -q "MEMORY_PROFILE ready" "$err" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$err" >&2; return 1; }
    sleep 0.2
  done
  callgrind_control -i on "$pid" >/dev/null 2>&1
  wait "$pid"
  awk '/^events:/ { for (i = 2; i <= NF; i++) name[i] = $i }
       /^summary:/ { for (i = 2; i <= NF; i++) v[name[i]] = $i }
       END { n = 1000000
             printf "%.0f %.2f %.2f\n", v["Ir"] / n, (v["D1mr"] + v["D1mw"]) / n, (v["DLmr"] + v["DLmw"]) / n }' "$out"
}

echo "| cell | limiter | instructions | L1d misses | LL misses |"
echo "|---|---|---|---|---|"
for cell in $CELLS; do
  n=0
  for bin in "$@"; do
    n=$((n + 1))
    name=slidegate
    [ $# -gt 1 ] && name="slidegate ($n: $(basename "$bin"))"
    read -r ir d1 ll < <(profile "$bin" slidegate "$cell")
    echo "| $cell | $name | $ir | $d1 | $ll |"
  done
  read -r ir d1 ll < <(profile "$1" governor "$cell")
  echo "| $cell | governor | $ir | $d1 | $ll |"
done
