#!/usr/bin/env bash
# What one decision costs Redis, command by command: slidegate's script
# against the seeds' sorted-set script on one identical stream of
# decisions (the same-stream runs of scripts/bench-redis.sh: a synthetic
# clock at 50k decisions/s, limit 100/1s, both on the caller's clock, sent
# pipelined on one connection), on 10k keys (a key sees about five
# decisions a window: most of its admissions are cold writes) and on one
# hot key. slidegate's script runs the stream twice: one call per
# decision (ours), and BENCH_BATCH decisions to a call (default 80, about
# what the store's coalescing sends at 500 tasks) as a coalesced call
# decides them (ours-coalesced); its figures are per decision.
#
#   scripts/bench-redis-writes.sh [--callgrind]
#
#   --callgrind   also count the instructions Redis spends per EVALSHA
#                 under valgrind (deterministic, unlike CPU time)
#
# Per decision, for each script: the Redis commands its EVALSHA runs
# (INFO commandstats, after CONFIG RESETSTAT; each command named), the
# EVALSHA usec, redis-server's CPU from /proc, and the memory the keys
# hold (MEMORY USAGE of every key, summed) per admission still in the
# window. Rounds are interleaved (seeds, slidegate, seeds, ...); the
# table shows the median of BENCH_REPEAT rounds (default 3) of
# BENCH_STREAM decisions each (default 200000). Needs redis-server,
# redis-cli and perl (valgrind for --callgrind).

set -euo pipefail

callgrind=0
for arg in "$@"; do
  case "$arg" in
    --callgrind) callgrind=1 ;;
    -h | --help)
      sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "unknown option: $arg (see --help)" >&2
      exit 2
      ;;
  esac
done
STREAM=${BENCH_STREAM:-200000}
BATCH=${BENCH_BATCH:-80}
REPEAT=${BENCH_REPEAT:-3}
RATE=50000

for tool in redis-server redis-cli perl; do
  command -v "$tool" >/dev/null || {
    echo "bench-redis-writes: $tool is missing" >&2
    exit 1
  }
done
if [ "$callgrind" = 1 ]; then
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null || {
    echo "bench-redis-writes: --callgrind needs valgrind" >&2
    exit 1
  }
fi

cd "$(dirname "$0")/.."
ROOT=$(pwd)
# free_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh
# ours_text, gen, SEED_LUA.
# shellcheck source=scripts/lib/redis_stream.sh
source scripts/lib/redis_stream.sh

WORK=$(mktemp -d)
REDIS_PID=
cleanup() {
  if [ -n "$REDIS_PID" ]; then
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$(free_port)

start_redis() {
  "$@" redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 600); do
    redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.1
  done
  echo "bench-redis-writes: redis-server did not start (see $WORK/redis.log)" >&2
  exit 1
}
stop_redis() {
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=
}
cli() { redis-cli -p "$PORT" "$@"; }
TICK=$(getconf CLK_TCK)
redis_cpu() { awk -v tick="$TICK" '{ printf "%.4f", ($14 + $15) / tick }' "/proc/$REDIS_PID/stat"; }
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# The commands the last stream ran, per decision: "total name=n ...".
commands() {
  cli info commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_\([a-z|]*\):calls=\([0-9]*\),usec=\([0-9]*\).*/\1 \2 \3/p' |
    awk -v n="$STREAM" '
      $1 == "evalsha" { usec = $3 / n; next }
      $1 ~ /^(config|info|echo)/ { next }
      { total += $2; list = list sprintf(" %s=%.3f", toupper($1), $2 / n) }
      END { printf "%.3f %.2f%s\n", total / n, usec, list }'
}

# Bytes the keys hold, per admission in the window (every decision of
# the last window was admitted: 5 per key at 10k keys, at most 100 on one).
bytes_per_admission() {
  local keys=$1 live=$((RATE < 100 * keys ? RATE : 100))
  cli --scan | sed 's/^/MEMORY USAGE /; s/$/ SAMPLES 0/' | cli | paste -sd+ |
    awk -v live="$live" '{ split($0, v, "+"); for (i in v) s += v[i]; printf "%.1f", s / live }'
}

# run KIND SHA KEYS: one stream; "commands/decision usec/decision cpu_us/decision bytes/admission list".
run() {
  local kind=$1 sha=$2 keys=$3 warm=$((RATE * 12 / 10)) c0 c1 cmds
  gen "$kind" "$sha" "$keys" 100 1000 "$RATE" 0 "$warm" 1 "$BATCH" >"$WORK/warm.resp"
  gen "$kind" "$sha" "$keys" 100 1000 "$RATE" "$warm" $((warm + STREAM)) 1 "$BATCH" >"$WORK/measure.resp"
  cli flushall >/dev/null
  cli --pipe <"$WORK/warm.resp" >/dev/null
  cli config resetstat >/dev/null
  c0=$(redis_cpu)
  cli --pipe <"$WORK/measure.resp" | grep -q 'errors: 0' || {
    echo "bench-redis-writes: errors in the $kind stream" >&2
    exit 1
  }
  c1=$(redis_cpu)
  cmds=$(commands)
  read -r total usec list <<<"$cmds"
  echo "$total $usec $(awk -v a="$c0" -v b="$c1" -v n="$STREAM" 'BEGIN { printf "%.2f", (b - a) * 1e6 / n }') $(bytes_per_admission "$keys") $list"
}

start_redis
SEED_SHA=$(cli script load "$(cat "$SEED_LUA")")
OURS_SHA=$(cli script load "$(ours_text)")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A CMDS USEC CPU BYTES LIST
for round in $(seq "$REPEAT"); do
  for keys in 10000 1; do
    for kind in seed ours ours-coalesced; do
      echo "round $round: $kind, $keys key(s)..." >&2
      sha=$SEED_SHA
      [ "$kind" != seed ] && sha=$OURS_SHA
      read -r c u p b l <<<"$(run "$kind" "$sha" "$keys")"
      CMDS[$kind,$keys]+=" $c"
      USEC[$kind,$keys]+=" $u"
      CPU[$kind,$keys]+=" $p"
      BYTES[$kind,$keys]+=" $b"
      LIST[$kind,$keys]=$l
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

declare -A INSTR
if [ "$callgrind" = 1 ]; then
  stop_redis
  start_redis valgrind --tool=callgrind --toggle-collect=evalShaCommand \
    --callgrind-out-file="$WORK/callgrind.%p" -q
  # Valgrind is slower than the stream's clock: an hour more of expiry on
  # both sides (the same commands, so the same cost).
  SEED_SHA=$(cli script load "$(sed 's/window + 1000)/window + 3600000)/' "$SEED_LUA")")
  OURS_SHA=$(cli script load "$(ours_text)")
  for keys in 10000 1; do
    for kind in seed ours ours-coalesced; do
      echo "callgrind: $kind, $keys key(s)..." >&2
      sha=$SEED_SHA
      [ "$kind" != seed ] && sha=$OURS_SHA
      gen "$kind" "$sha" "$keys" 100 1000 "$RATE" 0 60000 3600000 "$BATCH" >"$WORK/warm.resp"
      gen "$kind" "$sha" "$keys" 100 1000 "$RATE" 60000 65000 3600000 "$BATCH" >"$WORK/measure.resp"
      cli flushall >/dev/null
      cli --pipe <"$WORK/warm.resp" >/dev/null
      callgrind_control -z "$REDIS_PID" >/dev/null 2>&1
      cli --pipe <"$WORK/measure.resp" >/dev/null
      rm -f "$WORK"/callgrind.*
      callgrind_control -d "$REDIS_PID" >/dev/null 2>&1
      sleep 1
      total=$(grep -h -E '^(summary|totals):' "$WORK"/callgrind.* | head -1 | awk '{print $2}')
      INSTR[$kind,$keys]=$((total / 5000))
    done
  done
fi

echo "redis $(cli info server | tr -d '\r' | sed -n 's/^redis_version://p'), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates/slidegate/src/store/redis || echo ' (script modified)'), load $LOAD_BEFORE -> $LOAD_AFTER, $REPEAT rounds of $STREAM decisions, coalesced calls of $BATCH decisions"
echo
echo "| keys | script | Redis commands per decision | EVALSHA usec per decision | redis-server CPU µs per decision | bytes per admission | instructions per EVALSHA | commands |"
echo "|---|---|---|---|---|---|---|---|"
for keys in 10000 1; do
  for kind in seed ours ours-coalesced; do
    echo "| $keys | $kind | $(median "${CMDS[$kind,$keys]}") | $(median "${USEC[$kind,$keys]}") | $(median "${CPU[$kind,$keys]}") | $(median "${BYTES[$kind,$keys]}") | ${INSTR[$kind,$keys]:--} |${LIST[$kind,$keys]} |"
  done
done
