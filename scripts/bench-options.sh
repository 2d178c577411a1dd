#!/usr/bin/env bash
# What a rule's options cost: the same decisions with a plain rule, with a
# lockout (`--block-for 1h`) and with usage reporting (`--report`), driven
# in-process by `slidegate bench` against the memory store and against a
# local redis-server started (and stopped) by this script, in interleaved
# rounds. Two loads: many keys in random order (admissions: the lockout's
# cost is its read) and one hot key (denials: the lockout answers from its
# block).
#
# Reported per case: the median decisions/s and, for Redis, Redis' own CPU
# per decision (the EVALSHA time of INFO commandstats over the decisions
# made: steadier on a shared machine than throughput, and unlike the time
# per call not changed by how many decisions a coalesced call holds), with
# the range over the rounds. The local deny
# cache is off (it would answer the hot key's denials without Redis), and
# the store's deadline generous (a decision past it would be decided by the
# failure policy, without Redis).
#
#   scripts/bench-options.sh
#
# Environment: SECONDS_PER_RUN (default 3), ROUNDS (default 3), KEYS
# (default 10000), CONCURRENCY (default 64), SLIDEGATE (a binary to
# measure instead of building this tree's).
set -euo pipefail
SECONDS_PER_RUN=${SECONDS_PER_RUN:-3}
ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-10000}
CONCURRENCY=${CONCURRENCY:-64}
cd "$(dirname "$0")/.."
# need_tools, slidegate_binary, start_work.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
need_tools redis-server redis-cli
slidegate_binary
start_work
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh
# median, range.
# shellcheck source=scripts/lib/stats.sh
source scripts/lib/stats.sh

start_redis
cli() { redis-cli -p "$REDIS_PORT" "$@"; }

declare -A RATE USEC
CASES="plain block_for report"
flags() {
  case $1 in
    plain) ;;
    block_for) echo "--block-for 1h" ;;
    report) echo "--report" ;;
  esac
}
for round in $(seq "$ROUNDS"); do
  for load in keys hot; do
    keys=$KEYS
    [ "$load" = hot ] && keys=1
    for store in memory redis; do
      url=memory
      [ "$store" = redis ] && url=$REDIS
      for case in $CASES; do
        cli FLUSHALL >/dev/null
        cli CONFIG RESETSTAT >/dev/null
        # shellcheck disable=SC2046
        out=$("$SLIDEGATE" bench --store "$url" --keys "$keys" --concurrency "$CONCURRENCY" \
          --duration "${SECONDS_PER_RUN}s" --rate 100/1s --deny-cache-entries 0 --store-timeout-ms 2000 --json \
          $(flags "$case"))
        rate=$(sed -n 's/.*"per_second":\([0-9.]*\).*/\1/p' <<<"$out")
        RATE[$load/$store/$case]+=" $rate"
        if [ "$store" = redis ]; then
          usec=$(cli INFO commandstats | tr -d '\r' |
            sed -n 's/^cmdstat_evalsha:.*,usec=\([0-9]*\),.*/\1/p')
          requests=$(sed -n 's/.*"requests":\([0-9]*\).*/\1/p' <<<"$out")
          USEC[$load/$store/$case]+=" $(awk -v u="$usec" -v n="$requests" 'BEGIN { printf "%.2f", u / n }')"
        fi
      done
    done
  done
  echo "bench-options: round $round of $ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done

echo "| load | store | rule | decisions/s (median, range) | Redis µs per decision (median, range) |"
echo "|---|---|---|---|---|"
for load in keys hot; do
  for store in memory redis; do
    for case in $CASES; do
      r=${RATE[$load/$store/$case]}
      u=${USEC[$load/$store/$case]:-}
      usec="—"
      [ -n "$u" ] && usec="$(median <<<"$u") ($(range %.2f <<<"$u"))"
      label="$KEYS keys"
      [ "$load" = hot ] && label="1 hot key"
      echo "| $label | $store | $case | $(median <<<"$r" | awk '{ printf "%.0f", $1 }') ($(range %.0f <<<"$r")) | $usec |"
    done
  done
done
