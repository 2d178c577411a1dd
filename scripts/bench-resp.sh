#!/usr/bin/env bash
# The RESP port's figures: redis-benchmark against `slidegate serve
# --resp-addr` (memory store), against throttlecrab-server's own Redis
# protocol port, and against redis-server answering INCR (the ceiling of a
# RESP server on this machine), in the same run, rounds interleaved so
# every server sees the same machine.
#
#   scripts/bench-resp.sh
#
# Each round, for each pipeline depth in PIPELINES (default "1 16"), with
# CLIENTS connections (default 50) over KEYSPACE random keys (default
# 100000, redis-benchmark's __rand_int__):
#
#   slidegate  CL.THROTTLE key:__rand_int__ 100 1000 60
#   slidegate  SG.ACQUIRE key:__rand_int__ 1000 60000
#   throttlecrab THROTTLE key:__rand_int__ 100 1000 60  (its GCRA command)
#   redis      INCR key:__rand_int__
#
# and prints the median requests/s over ROUNDS (default 3) rounds, the
# range, the server's CPU time per request (utime + stime of its process
# from /proc/PID/stat over the run: what a request costs the server,
# whatever the load generator can send), and the ratios the port is held to: CL.THROTTLE and SG.ACQUIRE
# over throttlecrab (goal >= 1.5), and over redis-server INCR (goal
# >= 0.5).
#
# Needs redis-server and redis-benchmark (Debian: redis-server, redis-tools);
# throttlecrab-server is installed with `cargo install throttlecrab-server`
# into a temporary root when THROTTLECRAB is unset and it is not on PATH
# (it needs protoc: Debian's protobuf-compiler). Environment: REQUESTS
# (per run at -P 1, default 200000; 10x that at deeper pipelines), SLIDEGATE
# (a binary to measure instead of building this tree's).
set -euo pipefail
ROUNDS=${ROUNDS:-3}
PIPELINES=${PIPELINES:-1 16}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-100000}
REQUESTS=${REQUESTS:-200000}
cd "$(dirname "$0")/.."
# need_tools, slidegate_binary, start_work.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
# free_port, wait_port.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh
# median, range.
# shellcheck source=scripts/lib/stats.sh
source scripts/lib/stats.sh
need_tools redis-server redis-benchmark
slidegate_binary
start_work

throttlecrab_binary

SG_PORT=$(free_port)
"$SLIDEGATE" serve --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 \
  --resp-addr "127.0.0.1:$SG_PORT" --max-connections 4096 >"$WORK/slidegate.log" 2>&1 &
SG_PID=$!
PIDS+=($!)
TC_PORT=$(free_port)
"$THROTTLECRAB" --redis --redis-host 127.0.0.1 --redis-port "$TC_PORT" \
  --log-level error >"$WORK/throttlecrab.log" 2>&1 &
TC_PID=$!
PIDS+=($!)
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$WORK" >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=($!)
for port in "$SG_PORT" "$TC_PORT" "$REDIS_PORT"; do wait_port "$port"; done

TICKS=$(getconf CLK_TCK)

# CASES: name, port, server's pid, command.
CASES=(
  "cl.throttle|$SG_PORT|$SG_PID|CL.THROTTLE key:__rand_int__ 100 1000 60"
  "sg.acquire|$SG_PORT|$SG_PID|SG.ACQUIRE key:__rand_int__ 1000 60000"
  "throttlecrab|$TC_PORT|$TC_PID|THROTTLE key:__rand_int__ 100 1000 60"
  "redis-incr|$REDIS_PORT|$REDIS_PID|INCR key:__rand_int__"
)

# run PORT PID PIPELINE COMMAND...: requests per second of one run, and
# the server's CPU microseconds per request.
run() {
  local port=$1 pid=$2 pipeline=$3
  shift 3
  local requests=$REQUESTS
  [ "$pipeline" -gt 1 ] && requests=$((REQUESTS * 10))
  local before after rps
  before=$(cpu_ticks "$pid")
  rps=$(redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -P "$pipeline" \
    -n "$requests" -r "$KEYSPACE" --csv "$@" 2>/dev/null |
    awk -F'","' 'NR > 1 { gsub(/"/, "", $2); print $2; exit }')
  after=$(cpu_ticks "$pid")
  echo "$rps $(awk -v t=$((after - before)) -v hz="$TICKS" -v n="$requests" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')"
}

declare -A RESULTS CPU
for round in $(seq "$ROUNDS"); do
  for pipeline in $PIPELINES; do
    for case in "${CASES[@]}"; do
      IFS='|' read -r name port pid command <<<"$case"
      # shellcheck disable=SC2086
      read -r rps cpu < <(run "$port" "$pid" "$pipeline" $command)
      RESULTS[$name/$pipeline]+=" $rps"
      CPU[$name/$pipeline]+=" $cpu"
      echo "round $round, -P $pipeline, $name: $rps requests/s, $cpu us CPU/request" >&2
    done
  done
done

for pipeline in $PIPELINES; do
  echo
  echo "redis-benchmark -P $pipeline -c $CLIENTS, $KEYSPACE random keys, median of $ROUNDS rounds"
  printf '%-14s %14s %24s %18s\n' case "requests/s" range "server CPU/req"
  for case in "${CASES[@]}"; do
    name=${case%%|*}
    printf '%-14s %14.0f %24s %15.2f us\n' "$name" \
      "$(median <<<"${RESULTS[$name/$pipeline]}")" \
      "$(range %.0f <<<"${RESULTS[$name/$pipeline]}")" \
      "$(median <<<"${CPU[$name/$pipeline]}")"
  done
  tc=$(median <<<"${RESULTS[throttlecrab/$pipeline]}")
  incr=$(median <<<"${RESULTS[redis-incr/$pipeline]}")
  for name in cl.throttle sg.acquire; do
    value=$(median <<<"${RESULTS[$name/$pipeline]}")
    awk -v n="$name" -v v="$value" -v t="$tc" -v r="$incr" \
      'BEGIN { printf "%-14s %.2fx throttlecrab (goal 1.5), %.2fx redis INCR (goal 0.5)\n", n, v / t, v / r }'
  done
done
