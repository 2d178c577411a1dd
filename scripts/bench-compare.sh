#!/usr/bin/env bash
# Two `slidegate serve` binaries side by side: the same load, in
# interleaved rounds (A, B, A, B, ...), so both see the same machine. For
# each case, the median req/s over the rounds and the server's CPU per
# request (utime + stime from /proc/PID/stat, over the requests answered).
#
#   scripts/bench-compare.sh OLD_BINARY NEW_BINARY
#
# Cases: POST /v1/acquire, GET /healthz, gRPC ShouldRateLimit, gRPC health
# Check, on the memory store, KEYS keys in random order, CONNECTIONS
# connections. The load generator is NEW_BINARY's `slidegate bench`.
# Environment: SECONDS_PER_RUN (default 5), ROUNDS (default 3),
# CONNECTIONS (default 64), KEYS (default 10000), CASES (default all four:
# "acquire healthz should-rate-limit health"), SERVE_FLAGS_A /
# SERVE_FLAGS_B (extra `serve` flags for each side).
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
A=$1
B=$2
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-10000}
CASES=${CASES:-acquire healthz should-rate-limit health}
TICKS=$(getconf CLK_TCK)

# start_work, bench_rules, start_redis.
# shellcheck source=lib/run.sh
source "$(dirname "$0")/lib/run.sh"
start_work

# free_port, wait_port, cpu_ticks.
# shellcheck source=lib/ports.sh
source "$(dirname "$0")/lib/ports.sh"

bench_rules "$WORK/bench.yaml"

# start SIDE BINARY FLAGS: starts a server; sets PID_<SIDE>, HTTP_<SIDE>, GRPC_<SIDE>.
start() {
  local side=$1 binary=$2 flags=$3 http grpc
  http=$(free_port)
  grpc=$(free_port)
  # shellcheck disable=SC2086
  "$binary" serve --store memory --config "$WORK/bench.yaml" \
    --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$grpc" $flags >"$WORK/serve-$side.log" 2>&1 &
  PIDS+=($!)
  printf -v "PID_$side" '%s' "$!"
  printf -v "HTTP_$side" '%s' "$http"
  printf -v "GRPC_$side" '%s' "$grpc"
  wait_port "$http"
  wait_port "$grpc"
}
start A "$A" "${SERVE_FLAGS_A:-}"
start B "$B" "${SERVE_FLAGS_B:-}"

declare -A RPS=() CPU=()
for round in $(seq "$ROUNDS"); do
  for case in $CASES; do
    for side in A B; do
      pid_var=PID_$side
      pid=${!pid_var}
      case $case in
        acquire | healthz) var=HTTP_$side; target=http://127.0.0.1:${!var} ;;
        *) var=GRPC_$side; target=grpc://127.0.0.1:${!var} ;;
      esac
      before=$(cpu_ticks "$pid")
      json=$("$B" bench --target "$target" --op "$case" --keys "$KEYS" \
        --concurrency "$CONNECTIONS" --duration "${SECONDS_PER_RUN}s" --json)
      after=$(cpu_ticks "$pid")
      read -r rps requests errors <<<"$(echo "$json" | awk '{
        match($0, /"per_second":[0-9.]+/); r = substr($0, RSTART + 13, RLENGTH - 13)
        match($0, /"requests":[0-9]+/); n = substr($0, RSTART + 11, RLENGTH - 11)
        match($0, /"errors":[0-9]+/); e = substr($0, RSTART + 9, RLENGTH - 9)
        print r, n, e }')"
      [ "${errors:-0}" = 0 ] || echo "bench-compare: $errors errors ($side, $case)" >&2
      cpu_us=$(awk -v t="$((after - before))" -v hz="$TICKS" -v n="$requests" \
        'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
      RPS[$case,$side]+="$rps "
      CPU[$case,$side]+="$cpu_us "
      echo "bench-compare: round $round, $case, $side: $rps req/s, $cpu_us µs CPU per request (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
done

# median, range.
# shellcheck source=scripts/lib/stats.sh
source "$(dirname "$0")/lib/stats.sh"
spread() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f–%.0f", lo, hi }'; }

echo
echo "A = $A"
echo "B = $B"
echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); memory store, $KEYS keys, $CONNECTIONS connections, ${SECONDS_PER_RUN}s per run, $ROUNDS interleaved rounds (median, range)"
echo
echo "| case | A req/s | B req/s | B/A | A µs CPU/req | B µs CPU/req |"
echo "|---|---|---|---|---|---|"
for case in $CASES; do
  ra=$(echo "${RPS[$case,A]}" | median)
  rb=$(echo "${RPS[$case,B]}" | median)
  ca=$(echo "${CPU[$case,A]}" | median)
  cb=$(echo "${CPU[$case,B]}" | median)
  awk -v c="$case" -v ra="$ra" -v rb="$rb" -v ca="$ca" -v cb="$cb" \
    -v sa="$(echo "${RPS[$case,A]}" | spread)" -v sb="$(echo "${RPS[$case,B]}" | spread)" \
    'BEGIN { printf "| %s | %.0f (%s) | %.0f (%s) | %.2f | %.1f | %.1f |\n", c, ra, sa, rb, sb, rb / ra, ca, cb }'
done
