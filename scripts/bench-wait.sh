#!/usr/bin/env bash
# Waiting over HTTP: how late `slidegate serve` answers a `POST
# /v1/acquire` that waits for its turn (`"max_wait_ms"`), on the memory
# store and on a local redis-server started (and stopped) by this script.
#
# One server per store, both running throughout. Each run sends requests
# on a new key under LIMIT per WINDOW_MS with max_wait_ms 5000 from the
# load client (crates/slidegate-server/benches/wait_http.rs), each on a
# connection of its own, timed from its send to its 200, less the
# `waited_ms` the answer reports (rounded up to 1 ms by the server, so a
# figure may be low by up to 1 ms). Two ways to arrive:
#   steady: WAITERS requests at RATE a second (twice the limit: the waits
#           grow to WAITERS/RATE s while nothing queues in front of the store);
#   burst:  BURST_WAITERS requests at once (BURST_WAITERS/LIMIT windows of
#           waits; the queue of the burst is part of every figure).
# Modes and stores take turns, ROUNDS rounds (interleaved: every side sees
# the same machine); prints each run with the load average, then the
# median and range of p50, p99 and max over the rounds.
#
# Exits 1, after the table, when a run broke what waiting promises: a
# degraded or failed answer, more admitted than the limit allows from the
# first arrival to 5 s after the last (over-admission), or fewer than
# every request when all of them fit. A burst
# beyond --max-store-calls (1,024) on Redis, decided by Redis in turns:
#   BURST_WAITERS=2000 MODES=burst STORES=redis ROUNDS=3 scripts/bench-wait.sh
#
#   scripts/bench-wait.sh
#
# Needs redis-server (for the Redis rows). Environment: ROUNDS (default
# 5), LIMIT (default 250), WINDOW_MS (default 1000), WAITERS (default
# 2000), RATE (default 500), BURST_WAITERS (default 1000), MODES (default "steady burst"), STORES (default
# "memory redis"), SERVE_FLAGS (extra `serve` flags), SLIDEGATE (a binary
# to measure instead of building this tree's).
set -euo pipefail
ROUNDS=${ROUNDS:-5}
LIMIT=${LIMIT:-250}
WINDOW_MS=${WINDOW_MS:-1000}
WAITERS=${WAITERS:-2000}
RATE=${RATE:-500}
BURST_WAITERS=${BURST_WAITERS:-1000}
MODES=${MODES:-steady burst}
STORES=${STORES:-memory redis}
# The most one key admits to N requests at RATE a second (0: at once)
# that wait up to 5 s each: LIMIT in every window from the first arrival
# to 5 s after the last.
fits() { local span=$((5000 + ($2 > 0 ? $1 * 1000 / $2 : 0))); echo $((LIMIT * (1 + (span + WINDOW_MS - 1) / WINDOW_MS))); }
BROKEN=0
cd "$(dirname "$0")/.."
# need_tools, slidegate_binary, start_work, start_redis.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
[[ " $STORES " == *" redis "* ]] && need_tools redis-server
slidegate_binary
cargo bench --quiet -p slidegate-server --bench wait_http --no-run 2>/dev/null
start_work

# free_port, wait_port.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh  # the working directory is the repository
# median, range.
# shellcheck source=scripts/lib/stats.sh
source scripts/lib/stats.sh
# range_ms: the range of values in µs, in ms.
range_ms() { awk '{ for (i = 1; i <= NF; i++) printf "%s ", $i / 1000 }' | range %.2f; }
field() { echo "$1" | sed -n "s/.*\"$2\":\(-\{0,1\}[0-9]*\).*/\1/p"; }

declare -A HTTP=()
for store in $STORES; do
  url=memory
  if [ "$store" = redis ]; then
    start_redis
    url=$REDIS
  fi
  http=$(free_port)
  grpc=$(free_port)
  # Every waiter holds a connection; a burst queues its Redis calls, so a
  # call timeout that the queue cannot reach.
  # shellcheck disable=SC2086
  "$SLIDEGATE" serve --store "$url" --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$grpc" \
    --max-connections $((WAITERS + BURST_WAITERS + 100)) --store-timeout-ms 1000 ${SERVE_FLAGS:-} \
    >"$WORK/serve-$store.log" 2>&1 &
  PIDS+=($!)
  wait_port "$http"
  HTTP[$store]=$http
done

declare -A P50=() P99=() MAX=() LOADS=()
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    n=$WAITERS
    rate=$RATE
    [ "$mode" = burst ] && n=$BURST_WAITERS && rate=0
    for store in $STORES; do
      json=$(WAIT_TARGET="http://127.0.0.1:${HTTP[$store]}" WAIT_KEY="wait-$mode-$store-$round" \
        WAITERS=$n WAIT_RATE=$rate WAIT_LIMIT=$LIMIT WAIT_WINDOW_MS=$WINDOW_MS \
        cargo bench --quiet -p slidegate-server --bench wait_http 2>/dev/null)
      load=$(cut -d' ' -f1 /proc/loadavg)
      passed=$(field "$json" passed)
      fit=$(fits "$n" "$rate")
      broken() { echo "bench-wait: $mode, $store, round $round: $1" >&2; BROKEN=1; }
      [ "$passed" -le "$fit" ] || broken "over-admission: $passed passed, at most $fit fit"
      [ "$passed" = "$n" ] || [ "$n" -gt "$fit" ] || broken "not every request passed"
      [ "$(field "$json" degraded)" = 0 ] || broken "degraded answers"
      [ "$(field "$json" failed)" = 0 ] || broken "failed requests"
      P50[$mode-$store]+="$(field "$json" p50_us) "
      P99[$mode-$store]+="$(field "$json" p99_us) "
      MAX[$mode-$store]+="$(field "$json" max_us) "
      LOADS[$mode-$store]+="$load "
      echo "bench-wait: $mode, $store, round $round: $json (load $load)" >&2
    done
  done
done

echo
echo "slidegate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "POST /v1/acquire on one key, $LIMIT per $WINDOW_MS ms, max_wait_ms 5000; steady: $WAITERS at $RATE/s; burst: $BURST_WAITERS at once; $ROUNDS interleaved rounds"
echo "lateness of the 200 over send time + waited_ms, in ms: median (range) over the rounds"
echo
echo "| arrival | store | p50 | p99 | max | load (1 min) |"
echo "|---|---|---|---|---|---|"
ms() { awk -v v="$1" 'BEGIN { printf "%.2f", v / 1000 }'; }
for mode in $MODES; do
  for store in $STORES; do
    k=$mode-$store
    loads=$(echo "${LOADS[$k]}" | tr ' ' '\n' | sed '/^$/d' | sort -g | sed -n '1p;$p' | paste -sd'-')
    echo "| $mode | $store | $(ms "$(echo "${P50[$k]}" | median)") ($(echo "${P50[$k]}" | range_ms)) | $(ms "$(echo "${P99[$k]}" | median)") ($(echo "${P99[$k]}" | range_ms)) | $(ms "$(echo "${MAX[$k]}" | median)") ($(echo "${MAX[$k]}" | range_ms)) | $loads |"
  done
done
[ "$BROKEN" = 0 ] || exit 1
