#!/usr/bin/env bash
# The reliability figures of docs/RELIABILITY.md, measured on the release
# binary with real processes:
#
#   1. Redis outage, once per failure policy (deny, allow, local): a
#      `slidegate serve --store redis://…` under `slidegate bench` load,
#      Redis SIGKILLed for OUTAGE seconds and restarted on the same port.
#      Prints the bench figures with Redis up, during the outage (latency
#      p50/p99/max, allowed/denied/errors), and how long after Redis
#      answers PING again the answers stop saying "degraded".
#   2. A flood of FLOOD_KEYS unique keys over HTTP at a memory store and at
#      the Redis store's local fallback (Redis down), both with
#      --max-keys MAX_KEYS: the server's RSS before and after.
#
# Usage: scripts/reliability.sh            (builds the release binary first)
#   OUTAGE=5 TIMEOUT_MS=50 CONCURRENCY=16 FLOOD_KEYS=1000000 MAX_KEYS=100000
#   SLIDEGATE=path/to/slidegate to use a binary already built.
# Needs redis-server, redis-cli, curl and jq.
set -euo pipefail
cd "$(dirname "$0")/.."

OUTAGE=${OUTAGE:-5}
TIMEOUT_MS=${TIMEOUT_MS:-50}
CONCURRENCY=${CONCURRENCY:-16}
FLOOD_KEYS=${FLOOD_KEYS:-1000000}
MAX_KEYS=${MAX_KEYS:-100000}

for tool in redis-server redis-cli curl jq; do
  command -v "$tool" >/dev/null || {
    echo "error: $tool is needed (Debian/Ubuntu: apt-get install redis-server curl jq)" >&2
    exit 1
  }
done

if [ -z "${SLIDEGATE:-}" ]; then
  cargo build --release -q -p slidegate-server --bin slidegate
  SLIDEGATE="${CARGO_TARGET_DIR:-target}/release/slidegate"
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# free_port, wait_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh

REDIS_PORT=$(free_port)
redis_pid=
start_redis() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" \
    --appendonly yes --appendfsync no --dir "$work" >/dev/null &
  redis_pid=$!
  pids+=("$redis_pid")
  until redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; do sleep 0.01; done
}

# start_server NAME ARGS…: starts `slidegate serve`, sets HTTP to its address.
start_server() {
  local name=$1
  shift
  "$SLIDEGATE" --log-format json serve --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 \
    "$@" 2>"$work/$name.log" &
  server_pid=$!
  pids+=("$server_pid")
  HTTP=
  for _ in $(seq 500); do
    HTTP=$(jq -r 'select(.fields.http_addr) | .fields.http_addr' "$work/$name.log" 2>/dev/null | head -1)
    [ -n "$HTTP" ] && break
    sleep 0.01
  done
  [ -n "$HTTP" ] || { echo "error: $name did not start:" >&2; cat "$work/$name.log" >&2; exit 1; }
}

bench() { # bench SECONDS KEYS RATE: one JSON report
  "$SLIDEGATE" bench --target "http://$HTTP" --keys "$2" --concurrency "$CONCURRENCY" \
    --duration "$1s" --rate "$3" --json
}

show() { # show LABEL JSON
  jq -r --arg what "$1" '"  \($what): \(.requests) requests, \(.per_second|floor)/s, \(.allowed) allowed, \(.denied) denied, \(.errors) errors; latency ms p50 \(.latency_us.p50/1000) p99 \(.latency_us.p99/1000) max \(.latency_us.max/1000)"' <<<"$2"
}

acquire_degraded() {
  curl -s -X POST "http://$HTTP/v1/acquire" -H 'content-type: application/json' \
    -d '{"key":"probe","limit":1000000,"window_ms":1000}' | jq -r '.degraded // false'
}

echo "== Redis outage: ${OUTAGE}s, --store-timeout-ms $TIMEOUT_MS, $CONCURRENCY connections, release build, $(nproc) cores"
for policy in deny allow local; do
  start_redis
  start_server "$policy" --store "redis://127.0.0.1:$REDIS_PORT" \
    --on-store-error "$policy" --store-timeout-ms "$TIMEOUT_MS"
  until curl -sf "http://$HTTP/readyz" >/dev/null; do sleep 0.01; done
  echo "--on-store-error $policy"
  show "Redis up      " "$(bench 2 1000 100/1s)"
  kill -9 "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  show "Redis down    " "$(bench "$OUTAGE" 1000 100/1s)"
  start_redis
  back=$(now_ms)
  while [ "$(acquire_degraded)" = true ]; do sleep 0.01; done
  echo "  Redis-backed answers again $(($(now_ms) - back)) ms after Redis answered PING"
  show "after return  " "$(bench 2 1000 100/1s)"
  kill "$server_pid" && wait "$server_pid" || true
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$redis_pid" 2>/dev/null || true
  rm -rf "${work:?}"/appendonlydir
done

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

echo
echo "== Flood: $FLOOD_KEYS unique keys over HTTP (64 connections), --max-keys $MAX_KEYS"
decisions() {
  curl -s "http://$HTTP/metrics" |
    awk '/^slidegate_decisions_total\{.*source="acquire"/ {n += $NF} END {printf "%d", n}'
}
flood() { # flood NAME ARGS…
  local name=$1
  shift
  start_server "$name" "$@" --max-keys "$MAX_KEYS"
  local before after started bench_pid
  before=$(rss_kib "$server_pid")
  started=$(now_ms)
  # The bench spreads its requests over --keys (each connection on a
  # stride of 7919), so until FLOOD_KEYS requests nearly every one brings
  # a new key. It runs until the server has decided that many.
  "$SLIDEGATE" bench --target "http://$HTTP" --keys "$FLOOD_KEYS" --concurrency 64 \
    --duration 3600s --rate 10/1m --json >/dev/null 2>&1 &
  bench_pid=$!
  until [ "$(decisions)" -ge "$FLOOD_KEYS" ]; do sleep 0.2; done
  kill -9 "$bench_pid"
  wait "$bench_pid" 2>/dev/null || true
  after=$(rss_kib "$server_pid")
  echo "  $name: $(decisions) decisions in $((($(now_ms) - started) / 1000)) s; RSS ${before} KiB before, ${after} KiB after ($(((after - before) / 1024)) MiB more, $(((after - before) * 1024 / MAX_KEYS)) bytes per held key)"
  kill "$server_pid" && wait "$server_pid" || true
}
flood "memory store" --store memory --on-store-error deny
flood "local fallback (Redis down)" --store "redis://127.0.0.1:$(free_port)" --on-store-error local
