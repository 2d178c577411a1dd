#!/usr/bin/env bash
# Instructions Redis spends per decision in coalesced script calls, and
# where they go: one redis-server under callgrind (collecting inside
# EVALSHA only), driven by `slidegate bench --store redis://...` without
# the deny cache, Redis' clock, limit 100/1s, coalescing on or off.
#
#   scripts/profile-redis-coalesced.sh [KEYS] [TASKS] [on|off]
#
# Defaults: 10000 keys, 500 tasks, on. A warm-up run fills the keys and
# loads the script; the measured run follows with the counters zeroed.
# Prints instructions per EVALSHA call and per decision. Needs
# valgrind, redis-server, redis-cli and cargo; builds target/release/slidegate.
# Environment: WARM_SECONDS (default 10), MEASURE_SECONDS (default 20).
set -euo pipefail
KEYS=${1:-10000}
TASKS=${2:-500}
COALESCE=${3:-on}
WARM=${WARM_SECONDS:-10}
MEASURE=${MEASURE_SECONDS:-20}
for tool in valgrind callgrind_control redis-server redis-cli cargo; do
  command -v "$tool" >/dev/null || {
    echo "profile-redis-coalesced: $tool is missing" >&2
    exit 1
  }
done
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$(pwd)/target}
cargo build --release --quiet -p slidegate-server
SLIDEGATE=$TARGET/release/slidegate

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=
for _ in $(seq 100); do
  candidate=$((20000 + RANDOM % 20000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
    PORT=$candidate
    break
  fi
done
[ -n "$PORT" ] || {
  echo "profile-redis-coalesced: no free port" >&2
  exit 1
}

valgrind --tool=callgrind --toggle-collect=evalShaCommand -q \
  --callgrind-out-file="$WORK/callgrind.%p" \
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" &
PID=$!
for _ in $(seq 600); do
  redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done

bench() {
  "$SLIDEGATE" bench --store "redis://127.0.0.1:$PORT" --keys "$KEYS" --concurrency "$TASKS" \
    --duration "$1s" --rate 100/1s --store-timeout-ms 10000 --deny-cache-entries 0 \
    --redis-coalesce "$COALESCE" --json
}
echo "warm-up: $WARM s..." >&2
bench "$WARM" >/dev/null
redis-cli -p "$PORT" config resetstat >/dev/null
callgrind_control -z "$PID" >/dev/null
echo "measured: $MEASURE s..." >&2
report=$(bench "$MEASURE")
rm -f "$WORK"/callgrind.*
callgrind_control -d "$PID" >/dev/null
sleep 1
out=$(ls "$WORK"/callgrind.* | head -1)
total=$(grep -h -E '^(summary|totals):' "$out" | head -1 | awk '{print $2}')
calls=$(redis-cli -p "$PORT" info commandstats | tr -d '\r' |
  sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
decisions=$(echo "$report" | sed 's/.*"requests":\([0-9]*\).*/\1/')
errors=$(echo "$report" | sed 's/.*"errors":\([0-9]*\).*/\1/')
echo "$KEYS key(s), $TASKS tasks, coalescing $COALESCE: $decisions decisions ($errors errors) in $calls EVALSHA calls"
awk -v t="$total" -v c="$calls" -v d="$decisions" 'BEGIN {
  printf "instructions in EVALSHA: %d per call, %d per decision (%.1f decisions per call)\n", t / c, t / d, d / c }'
