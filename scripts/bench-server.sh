#!/usr/bin/env bash
# The server's figures: `slidegate serve` on loopback, driven by
# `slidegate bench --target` with CONNECTIONS connections over KEYS keys,
# on the memory store and on a local redis-server started (and stopped)
# by this script.
#
#   1. Each case against the same server, in turn, ROUNDS rounds
#      (interleaved: every case sees the same machine): POST /v1/acquire
#      and GET /healthz (HTTP), gRPC ShouldRateLimit and the gRPC health
#      Check. For each: the median req/s and the server's CPU per request
#      (utime + stime of the server process from /proc/PID/stat, over the
#      requests answered in the run), with the range over the rounds.
#      Then the two ratios the server is held to, from the same rounds:
#      CPU per ShouldRateLimit over CPU per health Check (the decision's
#      share of a gRPC call), and /v1/acquire req/s over /healthz req/s.
#   2. Hot-key flood: 1 key, 256 tasks, limit 100/1s, the Redis store
#      stack of the server in-process (`slidegate bench --store redis://`),
#      with the local deny cache and without it (--deny-cache-entries 0):
#      decisions/s, Redis EVALSHA calls/s (INFO commandstats) and the
#      admissions against the most the limit allows in the run (with
#      --on-store-error FLOOD_POLICY, deny by default, so a degraded answer
#      cannot admit). More admissions than that is over-admission: the
#      script prints the tables, then exits 1.
#
#   scripts/bench-server.sh
#
# Needs redis-server and redis-cli (for the Redis rows and the flood).
# Environment: SECONDS_PER_RUN (default 5), ROUNDS (default 5),
# CONNECTIONS (default 64), KEYS (default 10000), STORES (default
# "memory redis"), FLOOD (default 1; 0 skips the hot-key flood),
# FLOOD_POLICY (the flood's --on-store-error, default deny; the server's
# default is local), SERVE_FLAGS (extra `serve` flags), SERVE_ENV (variables for the server
# alone, e.g. TOKIO_WORKER_THREADS=1), SLIDEGATE (a binary to measure
# instead of building this tree's).
set -euo pipefail
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-10000}
STORES=${STORES:-memory redis}
FLOOD=${FLOOD:-1}
FLOOD_POLICY=${FLOOD_POLICY:-deny}
OVER_ADMITTED=0
CASES="acquire healthz should-rate-limit health"
TICKS=$(getconf CLK_TCK)
NEEDS_REDIS=$FLOOD
[[ " $STORES " == *" redis "* ]] && NEEDS_REDIS=1
cd "$(dirname "$0")/.."
# need_tools, slidegate_binary, start_work.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
[ "$NEEDS_REDIS" = 1 ] && need_tools redis-server redis-cli
slidegate_binary
start_work

# free_port, wait_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh  # the working directory is the repository
# median, range.
# shellcheck source=scripts/lib/stats.sh
source scripts/lib/stats.sh

bench_rules "$WORK/bench.yaml"

REDIS=
if [ "$NEEDS_REDIS" = 1 ]; then
  start_redis
fi

TABLES=()
for store in $STORES; do
  url=memory
  [ "$store" = redis ] && url=$REDIS
  http=$(free_port)
  grpc=$(free_port)
  # shellcheck disable=SC2086
  env ${SERVE_ENV:-} "$SLIDEGATE" serve --store "$url" --config "$WORK/bench.yaml" \
    --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$grpc" ${SERVE_FLAGS:-} >"$WORK/serve.log" 2>&1 &
  server=$!
  PIDS+=("$server")
  wait_port "$http"
  wait_port "$grpc"
  declare -A RPS=() CPU=()
  RATIO_CPU=""
  RATIO_RPS=""
  for round in $(seq "$ROUNDS"); do
    declare -A THIS_RPS=() THIS_CPU=()
    for case in $CASES; do
      case $case in
        acquire | healthz) target=http://127.0.0.1:$http ;;
        *) target=grpc://127.0.0.1:$grpc ;;
      esac
      before=$(cpu_ticks "$server")
      json=$("$SLIDEGATE" bench --target "$target" --op "$case" --keys "$KEYS" \
        --concurrency "$CONNECTIONS" --duration "${SECONDS_PER_RUN}s" --json)
      after=$(cpu_ticks "$server")
      read -r rps requests errors <<<"$(echo "$json" | awk '{
        match($0, /"per_second":[0-9.]+/); r = substr($0, RSTART + 13, RLENGTH - 13)
        match($0, /"requests":[0-9]+/); n = substr($0, RSTART + 11, RLENGTH - 11)
        match($0, /"errors":[0-9]+/); e = substr($0, RSTART + 9, RLENGTH - 9)
        print r, n, e }')"
      [ "${errors:-0}" = 0 ] || echo "bench-server: $errors errors ($store, $case)" >&2
      cpu=$(awk -v t="$((after - before))" -v hz="$TICKS" -v n="$requests" \
        'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
      RPS[$case]+="$rps "
      CPU[$case]+="$cpu "
      THIS_RPS[$case]=$rps
      THIS_CPU[$case]=$cpu
      echo "bench-server: $store, round $round, $case: $rps req/s, $cpu µs server CPU per request (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
    RATIO_CPU+="$(awk -v a="${THIS_CPU[should-rate-limit]}" -v b="${THIS_CPU[health]}" 'BEGIN { printf "%.3f", a / b }') "
    RATIO_RPS+="$(awk -v a="${THIS_RPS[acquire]}" -v b="${THIS_RPS[healthz]}" 'BEGIN { printf "%.3f", a / b }') "
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  table="| case | req/s | server µs CPU per request |"$'\n'"|---|---|---|"
  for case in $CASES; do
    name=$case
    case $case in
      acquire) name="POST /v1/acquire" ;;
      healthz) name="GET /healthz" ;;
      should-rate-limit) name="gRPC ShouldRateLimit" ;;
      health) name="gRPC health Check" ;;
    esac
    table+=$'\n'"| $name | $(echo "${RPS[$case]}" | median | xargs printf '%.0f') ($(echo "${RPS[$case]}" | range '%.0f')) | $(echo "${CPU[$case]}" | median | xargs printf '%.1f') ($(echo "${CPU[$case]}" | range '%.1f')) |"
  done
  cpu_ratio=$(awk -v a="$(echo "${CPU[should-rate-limit]}" | median)" -v b="$(echo "${CPU[health]}" | median)" 'BEGIN { printf "%.2f", a / b }')
  rps_ratio=$(awk -v a="$(echo "${RPS[acquire]}" | median)" -v b="$(echo "${RPS[healthz]}" | median)" 'BEGIN { printf "%.2f", a / b }')
  table+=$'\n\n'"CPU per ShouldRateLimit / CPU per health Check: $cpu_ratio (medians; per round $(echo "$RATIO_CPU" | range '%.2f'))"
  table+=$'\n'"/v1/acquire req/s / /healthz req/s: $rps_ratio (medians; per round $(echo "$RATIO_RPS" | range '%.2f'))"
  TABLES+=("$store store:"$'\n\n'"$table")
done

FLOOD_ROWS=()
if [ "$FLOOD" = 1 ]; then
  for cache in 100000 0; do
    redis-cli -p "$REDIS_PORT" flushall >/dev/null
    redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
    echo "bench-server: hot key, deny cache $cache..." >&2
    json=$("$SLIDEGATE" bench --store "$REDIS" --keys 1 --concurrency 256 --rate 100/1s \
      --on-store-error "$FLOOD_POLICY" --store-timeout-ms 1000 --deny-cache-entries "$cache" --duration "${SECONDS_PER_RUN}s" --json)
    calls=$(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' |
      sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
    FLOOD_ROWS+=("$(echo "$json" | awk -v cache="$cache" -v calls="${calls:-0}" '{
      match($0, /"per_second":[0-9.]+/); rps = substr($0, RSTART + 13, RLENGTH - 13)
      match($0, /"seconds":[0-9.]+/); s = substr($0, RSTART + 10, RLENGTH - 10)
      match($0, /"allowed":[0-9]+/); a = substr($0, RSTART + 10, RLENGTH - 10)
      match($0, /"p99":[0-9]+/); p = substr($0, RSTART + 6, RLENGTH - 6)
      most = 100 * (int(s) + (s > int(s) ? 1 : 0))
      printf "%s %.0f %.0f %d %d %d", cache, rps, calls / s, a, most, p }')")
  done
fi

echo
echo "slidegate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$CONNECTIONS connections, $KEYS keys, ${SECONDS_PER_RUN}s per run, $ROUNDS interleaved rounds: median (range)"
for table in "${TABLES[@]}"; do
  echo
  echo "$table"
done
if [ "$FLOOD" = 1 ]; then
  echo
  echo "Hot key: 1 key, 256 tasks, 100/1s, Redis store in-process, --on-store-error $FLOOD_POLICY, ${SECONDS_PER_RUN}s"
  echo
  echo "| deny cache | decisions/s | Redis EVALSHA/s | admitted | most the limit allows | p99 µs |"
  echo "|---|---|---|---|---|---|"
  for row in "${FLOOD_ROWS[@]}"; do
    read -r cache rps calls admitted most p99 <<<"$row"
    [ "$cache" = 0 ] && cache=off || cache="on ($cache entries)"
    echo "| $cache | $rps | $calls | $admitted | $most | $p99 |"
    if [ "$admitted" -gt "$most" ]; then
      echo "bench-server: over-admission: $admitted > $most" >&2
      OVER_ADMITTED=1
    fi
  done
  read -r _ with _ <<<"${FLOOD_ROWS[0]}"
  read -r _ without _ <<<"${FLOOD_ROWS[1]}"
  awk -v a="$with" -v b="$without" 'BEGIN { printf "\ndeny cache speed-up: %.1fx\n", a / b }'
fi
[ "$OVER_ADMITTED" = 0 ] || exit 1
