#!/usr/bin/env bash
# Server instructions per request under callgrind, for two `slidegate
# serve` binaries: repeatable whatever else runs on the machine, unlike
# req/s. Each server runs under valgrind; its counters are zeroed once it
# serves, the same load (NEW_BINARY's `slidegate bench`) is sent, and the
# instructions counted since are divided by the requests answered.
#
#   scripts/bench-instructions.sh OLD_BINARY NEW_BINARY
#
# Environment: REQUESTS_SECONDS (default 10), KEYS (default 10000),
# CONNECTIONS (default 8), CASES (default "should-rate-limit acquire"),
# RUNTIME=1 (B's rules come from the runtime limits API instead: the
# domain `bench` PUT to /v1/config/domains/bench, and for `acquire` a limit
# PUT to /v1/keys/bench:N/limit for each of the KEYS keys, B's load then
# sending the key alone; give A and B the same binary to compare a
# runtime rule with the same rule from a file or a request),
# CARRY=1 (with RUNTIME=1: B's domain is PUT again with its limit one
# higher after the warm-up, so every request measured is decided within a
# window of a limit change: each counter's first decision carries its use
# to the new limit, the others ask whether it did; both sides' rule is
# then 6000 a minute instead of 100 a second, so the window outlasts the
# run), STORE (`memory`, the default, or `redis`: a redis-server of the
# script's own, emptied before each server starts; its own instructions
# are not counted, only the server's).
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench-instructions: valgrind is not installed" >&2; exit 1; }
A=$1
B=$2
SECONDS_PER_RUN=${REQUESTS_SECONDS:-10}
KEYS=${KEYS:-10000}
CONNECTIONS=${CONNECTIONS:-8}
CASES=${CASES:-should-rate-limit acquire}
STORE_KIND=${STORE:-memory}
WORK=$(mktemp -d)
PID=
REDIS_PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null || true
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
RUNTIME=${RUNTIME:-}
CARRY=${CARRY:-}
if [ -n "$CARRY" ] && [ -z "$RUNTIME" ]; then
  echo "bench-instructions: CARRY=1 needs RUNTIME=1" >&2
  exit 2
fi
bench_rules() {
  printf 'domain: bench\ndescriptors:\n  - key: key\n    rate_limit:\n      unit: %s\n      requests_per_unit: %s\n' "$1" "$2"
}
if [ -n "$CARRY" ]; then
  bench_rules minute 6000 >"$WORK/bench.yaml"
else
  bench_rules second 100 >"$WORK/bench.yaml"
fi
TOKEN=bench-instructions-token

# free_port, wait_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source "$(dirname "$0")/lib/ports.sh"

case $STORE_KIND in
  memory) STORE_URL=memory ;;
  redis)
    for tool in redis-server redis-cli; do
      command -v "$tool" >/dev/null || { echo "bench-instructions: $tool is not installed" >&2; exit 1; }
    done
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
      >"$WORK/redis.log" 2>&1 &
    REDIS_PID=$!
    wait_port "$REDIS_PORT"
    STORE_URL=redis://127.0.0.1:$REDIS_PORT
    ;;
  *)
    echo "bench-instructions: STORE must be memory or redis, got $STORE_KIND" >&2
    exit 2
    ;;
esac

echo "| case ($STORE_KIND) | A instructions/request | B instructions/request | B/A |"
echo "|---|---|---|---|"
for case in $CASES; do
  declare -A IR=()
  for side in A B; do
    binary=$A
    [ "$side" = B ] && binary=$B
    http=$(free_port)
    grpc=$(free_port)
    out="$WORK/callgrind.$side.$case"
    # Every server starts from an empty store.
    [ -n "$REDIS_PID" ] && redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
    rules=(--config "$WORK/bench.yaml")
    op=$case
    runtime=
    [ "$side" = B ] && [ -n "$RUNTIME" ] && runtime=1
    [ -n "$runtime" ] && rules=(--admin-token "$TOKEN")
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$binary" serve --store "$STORE_URL" "${rules[@]}" \
      --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$grpc" >"$WORK/serve.log" 2>&1 &
    PID=$!
    # Under valgrind a server takes a while to listen.
    wait_port "$http" 60
    wait_port "$grpc" 60
    if [ -n "$runtime" ]; then
      put() {
        curl -sf -X PUT "http://127.0.0.1:$http$1" -H "authorization: Bearer $TOKEN" \
          -H "content-type: $2" --data-binary "$3" >/dev/null
      }
      case $case in
        acquire)
          op=acquire-key
          # One curl for every key (one connection), not one process each.
          for ((i = 0; i < KEYS; i++)); do
            echo "url = \"http://127.0.0.1:$http/v1/keys/bench:$i/limit\""
            echo 'output = "/dev/null"'
          done >"$WORK/limits.curl"
          curl -sf -X PUT -H "authorization: Bearer $TOKEN" -H "content-type: application/json" \
            --data-binary '{"rules":[{"limit":100,"window_ms":1000}]}' -K "$WORK/limits.curl"
          ;;
        *) put /v1/config/domains/bench application/yaml "$(cat "$WORK/bench.yaml")" ;;
      esac
    fi
    case $case in
      acquire | healthz) target=http://127.0.0.1:$http ;;
      *) target=grpc://127.0.0.1:$grpc ;;
    esac
    # A short warm-up, then count from zero.
    "$B" bench --target "$target" --op "$op" --keys "$KEYS" --concurrency "$CONNECTIONS" \
      --duration 2s --json >/dev/null
    if [ -n "$runtime" ] && [ -n "$CARRY" ] && [ "$case" != acquire ]; then
      put /v1/config/domains/bench application/yaml "$(bench_rules minute 6001)"
    fi
    callgrind_control -z "$PID" >/dev/null 2>&1
    json=$("$B" bench --target "$target" --op "$op" --keys "$KEYS" \
      --concurrency "$CONNECTIONS" --duration "${SECONDS_PER_RUN}s" --json)
    callgrind_control -d "$PID" >/dev/null 2>&1
    requests=$(echo "$json" | sed -n 's/.*"requests":\([0-9]*\).*/\1/p')
    # The dump made by -d: the file with the highest part number.
    dump=$(ls -v "$out".* 2>/dev/null | tail -1)
    ir=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$dump" | head -1)
    [ -n "$ir" ] || ir=$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$dump" | head -1)
    IR[$side]=$(awk -v i="$ir" -v n="$requests" 'BEGIN { printf "%.0f", i / n }')
    echo "bench-instructions: $case, $side: $requests requests, $ir instructions (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    PID=
  done
  awk -v c="$case" -v a="${IR[A]}" -v b="${IR[B]}" \
    'BEGIN { printf "| %s | %d | %d | %.3f |\n", c, a, b, b / a }'
  unset IR
done
