#!/usr/bin/env bash
# The server's figures: `slidegate serve` on loopback, driven by
# `slidegate bench --target` with CONNECTIONS connections, on the memory
# store and on a local redis-server started (and stopped) by this script.
#
#   1. HTTP: POST /v1/acquire against GET /healthz (the framework's
#      ceiling), and gRPC: ShouldRateLimit against grpc.health.v1 Check,
#      same server, in turn, ROUNDS rounds; the best req/s of each, with
#      the p50/p99 of that run.
#   2. Hot-key flood: 1 key, 256 tasks, limit 100/1s, the Redis store
#      stack of the server in-process (`slidegate bench --store redis://`),
#      with the local deny cache and without it (--deny-cache-entries 0):
#      decisions/s, Redis EVALSHA calls/s (INFO commandstats) and the
#      admissions against the most the limit allows in the run (with
#      --on-store-error deny, so a degraded answer cannot admit).
#
#   scripts/bench-server.sh
#
# Needs redis-server and redis-cli. Environment: SECONDS_PER_RUN (default
# 10), ROUNDS (default 2), CONNECTIONS (default 64), KEYS (default 1000).
set -euo pipefail
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
ROUNDS=${ROUNDS:-2}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null || {
    echo "bench-server: $tool is missing (Debian: apt-get install redis-server)" >&2
    exit 1
  }
done
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$(pwd)/target}
cargo build --release --quiet -p slidegate-server
SLIDEGATE=$TARGET/release/slidegate

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  echo "bench-server: no free port" >&2
  exit 1
}
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "bench-server: nothing listens on $1" >&2
  exit 1
}

# The rules of ShouldRateLimit and /v1/check: every value of `key` in
# domain `bench` has its own 100/1s.
cat >"$WORK/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: key
    rate_limit:
      unit: second
      requests_per_unit: 100
YAML

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$WORK" --logfile "$WORK/redis.log" &
PIDS+=($!)
wait_port "$REDIS_PORT"
REDIS=redis://127.0.0.1:$REDIS_PORT

# run ARGS...: one bench run; prints "req/s p50 p99" (latencies in µs).
run() {
  local json
  json=$("$SLIDEGATE" bench --duration "${SECONDS_PER_RUN}s" --json "$@")
  local errors
  errors=$(echo "$json" | sed 's/.*"errors":\([0-9]*\).*/\1/')
  [ "$errors" = 0 ] || echo "bench-server: $errors errors in: $*" >&2
  echo "$(echo "$json" | sed 's/.*"per_second":\([0-9.]*\).*/\1/') $(echo "$json" | sed 's/.*"p50":\([0-9]*\).*/\1/') $(echo "$json" | sed 's/.*"p99":\([0-9]*\).*/\1/')"
}

ROWS=()
for store in memory "$REDIS"; do
  http=$(free_port)
  grpc=$(free_port)
  "$SLIDEGATE" serve --store "$store" --config "$WORK/bench.yaml" \
    --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$grpc" >"$WORK/serve.log" 2>&1 &
  server=$!
  PIDS+=("$server")
  wait_port "$http"
  wait_port "$grpc"
  declare -A BEST=()
  for _ in $(seq "$ROUNDS"); do
    for case in "acquire http" "healthz http" "should-rate-limit grpc" "health grpc"; do
      set -- $case
      echo "bench-server: $store, $1..." >&2
      result=$(run --target "$2://127.0.0.1:$( [ "$2" = http ] && echo "$http" || echo "$grpc")" \
        --op "$1" --keys "$KEYS" --concurrency "$CONNECTIONS")
      read -r rps _ _ <<<"$result"
      read -r best _ _ <<<"${BEST[$1]:-0 0 0}"
      if awk -v a="$rps" -v b="$best" 'BEGIN { exit !(a > b) }'; then BEST[$1]=$result; fi
    done
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  name=memory
  [ "$store" = memory ] || name=redis
  for pair in "acquire healthz POST_/v1/acquire GET_/healthz" \
    "should-rate-limit health gRPC_ShouldRateLimit gRPC_health_Check"; do
    set -- $pair
    read -r rps p50 p99 <<<"${BEST[$1]}"
    read -r crps cp50 cp99 <<<"${BEST[$2]}"
    ROWS+=("$(awk -v s="$name" -v op="${3//_/ }" -v c="${4//_/ }" -v r="$rps" -v p="$p50" -v q="$p99" \
      -v cr="$crps" -v cp="$cp50" -v cq="$cp99" 'BEGIN {
      printf "| %s | %s: %.0f req/s, p50 %.2f ms, p99 %.2f ms | %s: %.0f req/s, p50 %.2f ms, p99 %.2f ms | %.2f |",
        s, op, r, p / 1000, q / 1000, c, cr, cp / 1000, cq / 1000, r / cr }')")
  done
done

# Hot-key flood against the Redis store stack, in-process.
FLOOD=()
for cache in 100000 0; do
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
  echo "bench-server: hot key, deny cache $cache..." >&2
  json=$("$SLIDEGATE" bench --store "$REDIS" --keys 1 --concurrency 256 --rate 100/1s \
    --on-store-error deny --store-timeout-ms 1000 --deny-cache-entries "$cache" --duration "${SECONDS_PER_RUN}s" --json)
  calls=$(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
  FLOOD+=("$(echo "$json" | awk -v cache="$cache" -v calls="${calls:-0}" '{
    match($0, /"per_second":[0-9.]+/); rps = substr($0, RSTART + 13, RLENGTH - 13)
    match($0, /"seconds":[0-9.]+/); s = substr($0, RSTART + 10, RLENGTH - 10)
    match($0, /"allowed":[0-9]+/); a = substr($0, RSTART + 10, RLENGTH - 10)
    match($0, /"p99":[0-9]+/); p = substr($0, RSTART + 6, RLENGTH - 6)
    most = 100 * (int(s) + (s > int(s) ? 1 : 0))
    printf "%s %.0f %.0f %d %d %d", cache, rps, calls / s, a, most, p }')")
done

echo
echo "slidegate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$CONNECTIONS connections, $KEYS keys, ${SECONDS_PER_RUN}s per run, best of $ROUNDS"
echo
echo "| store | decisions | framework ceiling, same server | ratio |"
echo "|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "Hot key: 1 key, 256 tasks, 100/1s, Redis store in-process, ${SECONDS_PER_RUN}s"
echo
echo "| deny cache | decisions/s | Redis EVALSHA/s | admitted | most the limit allows | p99 µs |"
echo "|---|---|---|---|---|---|"
for row in "${FLOOD[@]}"; do
  read -r cache rps calls admitted most p99 <<<"$row"
  [ "$cache" = 0 ] && cache=off || cache="on ($cache entries)"
  echo "| $cache | $rps | $calls | $admitted | $most | $p99 |"
  [ "$admitted" -le "$most" ] || echo "bench-server: over-admission: $admitted > $most" >&2
done
read -r _ with _ <<<"${FLOOD[0]}"
read -r _ without _ <<<"${FLOOD[1]}"
awk -v a="$with" -v b="$without" 'BEGIN { printf "\ndeny cache speed-up: %.1fx\n", a / b }'
