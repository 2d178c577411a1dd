#!/usr/bin/env bash
# The Redis measurements: slidegate's Redis store against the
# seeds' sorted-set script (crates/slidegate/benches/seed_sliding_window.lua),
# on one local redis-server started (and stopped) by this script, in one run.
#
#   scripts/bench-redis.sh [--quick] [--callgrind] [--no-cluster]
#
#   --quick       short runs (a smoke test of the script, not a measurement)
#   --callgrind   also count the instructions Redis spends per EVALSHA under
#                 valgrind (deterministic, unlike timings on a busy machine)
#   --no-cluster  skip the 3-master cluster runs of (g)
#
# Needs redis-server, redis-cli, redis-benchmark (Debian: redis-server,
# redis-tools), perl and cargo; builds target/release/slidegate. Environment:
# BENCH_SECONDS (each `slidegate bench` run, default 10), BENCH_REQUESTS
# (each redis-benchmark -P 1 run, default 400000; -P 16 runs take 4x),
# BENCH_STREAM (decisions per same-stream run, default 200000), BENCH_REPEAT
# (rounds, default 3). The `slidegate bench` runs of (b), (f) and (g) are
# interleaved: each round runs every configuration once, and the table
# shows the median of the rounds with their spread (min-max). The
# redis-benchmark and same-stream runs show the best of the rounds.
#
# What is measured, and how:
# (a) redis-benchmark -c 50, -P 1 and -P 16, running EVALSHA of the seeds'
#     script on 1 hot key and on 10k keys (-r 10000), limit 100/1s. The
#     seeds' script takes the time from its caller, and redis-benchmark can
#     only substitute random numbers (__rand_int__), not a clock: random
#     times would make the window meaningless, so the time is fixed. That
#     keeps the script in a well-defined state: the hot key holds a full
#     window and every call after the first 100 is a denial (ZREMRANGEBYSCORE
#     finds nothing, ZCARD), the 10k keys fill up (ZADD, PEXPIRE). Members
#     are three __rand_int__ joined by dashes, about as long as a UUID.
# (b) `slidegate bench --store redis://...` (the server's store stack:
#     the failure policy, the circuit breaker and the local deny cache around
#     the RedisStore) with 50 and 500 tasks on the same cases, on Redis'
#     clock, without the deny cache (--deny-cache-entries 0: every decision
#     reaches Redis) with coalescing on (the default) and off
#     (--redis-coalesce off: one EVALSHA per decision), and with the deny
#     cache (the default).
# (c) Redis CPU per decision: INFO commandstats usec of EVALSHA, after
#     CONFIG RESETSTAT, divided by the decisions (not the calls: a
#     coalesced call decides many), for the runs of (a) and (b); and for both
#     scripts on one identical stream of decisions (a synthetic clock at
#     50k decisions/s, slidegate on the caller's clock like the seeds),
#     sent pipelined on one connection with redis-cli --pipe.
# (d) MEMORY USAGE per stored admission: one key filled with L admissions
#     1 ms apart (rule L/1m), by slidegate's script and by the seeds' script
#     (a sorted set with UUID members).
# (e) How the cost grows with the work: the same-stream runs of (c) on one
#     hot key with full windows at L = 10, 100, 1000, 10000 (rule L/1s,
#     50k decisions/s): usec_per_call, and decisions/s as Redis serves
#     them pipelined on one connection.
# (f) Latency at low load: 1 task, one decision at a time, 10k keys, no
#     deny cache, coalescing on and off: p50 and p99.
# (g) Cost growth: decisions/s and Redis usec per decision as the tasks go
#     1, 8, 64, 512 (10k keys, no deny cache), coalescing on and off, on the
#     one redis-server and on a local 3-master Redis Cluster.
#
# Client and server share the machine's cores: throughput numbers depend
# on the load, which is printed before and after, and the throughput rows
# show the CPU each side spent per decision (redis-server's whole process,
# networking included; the client's user + system time).

set -euo pipefail

quick=0
callgrind=0
cluster=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --callgrind) callgrind=1 ;;
    --no-cluster) cluster=0 ;;
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

SECONDS_PER_RUN=${BENCH_SECONDS:-10}
REQUESTS=${BENCH_REQUESTS:-400000}
STREAM=${BENCH_STREAM:-200000}
REPEAT=${BENCH_REPEAT:-3}
if [ "$quick" = 1 ]; then
  SECONDS_PER_RUN=1
  REQUESTS=20000
  STREAM=20000
  REPEAT=1
fi

for tool in redis-server redis-cli redis-benchmark perl cargo; do
  command -v "$tool" >/dev/null || {
    echo "bench-redis: $tool is missing (Debian: apt-get install redis-server redis-tools perl)" >&2
    exit 1
  }
done

cd "$(dirname "$0")/.."
ROOT=$(pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

echo "building slidegate (release)..." >&2
cargo build --release --quiet -p slidegate-server
SLIDEGATE=$TARGET/release/slidegate

WORK=$(mktemp -d)
REDIS_PID=
CLUSTER_PIDS=()
cleanup() {
  for pid in $REDIS_PID "${CLUSTER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# free_port, wait_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh
PORT=$(free_port 10000)

start_redis() {
  "$@" redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 600); do
    redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.1
  done
  echo "bench-redis: redis-server did not start (see $WORK/redis.log)" >&2
  exit 1
}

stop_redis() {
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=
}

cli() { redis-cli -p "$PORT" "$@"; }

# EVALSHA's calls (1), usec (2) and usec_per_call (3) since the last
# CONFIG RESETSTAT, on the server at port $2 (default: the one Redis).
evalsha_stat() {
  redis-cli -p "${2:-$PORT}" info commandstats | tr -d '\r' |
    sed -n "s/^cmdstat_evalsha:calls=\([0-9]*\),usec=\([0-9]*\),usec_per_call=\([0-9.]*\).*/\\$1/p"
}

reset() {
  cli flushall >/dev/null
  cli config resetstat >/dev/null
}

# ours_text, gen.
# shellcheck source=scripts/lib/redis_stream.sh
source scripts/lib/redis_stream.sh

now_ns() { date +%s%N; }
TICK=$(getconf CLK_TCK)
# CPU seconds redis-server has used so far.
redis_cpu() { awk -v tick="$TICK" '{ printf "%.4f", ($14 + $15) / tick }' "/proc/$REDIS_PID/stat"; }
# Runs a command; its CPU seconds (user + system, children included) go
# to $WORK/client_cpu.
timed() { perl -e 'system(@ARGV) == 0 or exit 1; my @t = times; open(my $f, ">", "'"$WORK"'/client_cpu"); printf $f "%.4f", $t[2] + $t[3]' -- "$@"; }
# CPU µs per decision from seconds and decisions.
per_decision() { awk -v s="$1" -v n="$2" 'BEGIN { printf "%.1f", s * 1e6 / n }'; }
# best OLD NEW (larger|smaller): the better of two numbers, OLD may be empty.
best() { awk -v a="$1" -v b="$2" -v w="$3" 'BEGIN { if (a == "") print b; else if (w == "larger") print (b > a ? b : a); else print (b < a ? b : a) }'; }
# median "V1 V2 ...": the median of the values (the lower middle of an
# even count); spread "V1 V2 ...": "min-max".
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
spread() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo "-" hi }'; }
# json FIELD: a number from the `slidegate bench --json` report in $WORK/json.
json() { sed "s/.*\"$1\":\([0-9.]*\).*/\1/" "$WORK/json"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# met VALUE OP LIMIT: yes/no
met() { awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN { ok = (op == ">=") ? v >= l : v <= l; print ok ? "yes" : "no" }'; }

ROWS=()
row() { ROWS+=("$(printf '| %s | %s | %s | %s | %s | %s | %s |' "$@")"); }

start_redis
REDIS_VERSION=$(cli info server | tr -d '\r' | sed -n 's/^redis_version://p')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
SEED_SHA=$(cli script load "$(cat "$SEED_LUA")")
OURS_SHA=$(cli script load "$(ours_text)")

# (a) the seeds' script under redis-benchmark, fixed time 1700000000000 ms.
declare -A SEED_RPS SEED_USEC SEED_CPU
for keys in 1 10000; do
  for pipeline in 1 16; do
    n=$REQUESTS
    [ "$pipeline" = 16 ] && n=$((REQUESTS * 4))
    if [ "$keys" = 1 ]; then
      set -- -r 1000000000 evalsha "$SEED_SHA" 1 'seed:{hot}'
    else
      set -- -r 10000 evalsha "$SEED_SHA" 1 'seed:{__rand_int__}'
    fi
    for _ in $(seq "$REPEAT"); do
      echo "redis-benchmark: seeds' script, $keys key(s), -P $pipeline..." >&2
      reset
      cpu0=$(redis_cpu)
      timed redis-benchmark -p "$PORT" -c 50 -P "$pipeline" -n "$n" --csv "$@" \
        1700000000000 1000 100 '__rand_int__-__rand_int__-__rand_int__' >"$WORK/csv"
      cpu1=$(redis_cpu)
      rps=$(tail -1 "$WORK/csv" | cut -d, -f2 | tr -d '"')
      if [ "$(best "${SEED_RPS[$keys,$pipeline]:-}" "$rps" larger)" = "$rps" ]; then
        SEED_RPS[$keys,$pipeline]=$rps
        SEED_CPU[$keys,$pipeline]="client $(per_decision "$(cat "$WORK/client_cpu")" "$n") µs, redis-server $(per_decision "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" "$n") µs"
      fi
      SEED_USEC[$keys,$pipeline]=$(best "${SEED_USEC[$keys,$pipeline]:-}" "$(evalsha_stat 3)" smaller)
    done
  done
done

# sg_bench URL KEYS TASKS CACHE COALESCE: one `slidegate bench` run on
# Redis' clock, its report in $WORK/json, its CPU in $WORK/client_cpu.
sg_bench() {
  timed "$SLIDEGATE" bench --store "$1" --keys "$2" --concurrency "$3" \
    --duration "${SECONDS_PER_RUN}s" --rate 100/1s --store-timeout-ms 5000 \
    --deny-cache-entries "$4" --redis-coalesce "$5" --json >"$WORK/json"
  [ "$(json errors)" = 0 ] || echo "bench-redis: $(json errors) errors in that run" >&2
}

# (b) slidegate bench, Redis' clock: coalescing on and off without the
# deny cache, and on with it; interleaved rounds.
declare -A OURS_RPS OURS_USEC OURS_CALLS OURS_RCPU OURS_CCPU
for round in $(seq "$REPEAT"); do
  for keys in 1 10000; do
    for tasks in 50 500; do
      for mode in on off cache; do
        cache=0 coalesce=on
        [ "$mode" = off ] && coalesce=off
        [ "$mode" = cache ] && cache=100000
        echo "slidegate bench (round $round): $keys key(s), $tasks tasks, $mode..." >&2
        reset
        cpu0=$(redis_cpu)
        sg_bench "redis://127.0.0.1:$PORT" "$keys" "$tasks" "$cache" "$coalesce"
        cpu1=$(redis_cpu)
        requests=$(json requests)
        cell=$keys,$tasks,$mode
        OURS_RPS[$cell]+=" $(printf %.0f "$(json per_second)")"
        OURS_CALLS[$cell]+=" $(awk -v c="$(evalsha_stat 1)" -v n="$requests" 'BEGIN { printf "%.3f", c / n }')"
        OURS_USEC[$cell]+=" $(awk -v u="$(evalsha_stat 2)" -v n="$requests" 'BEGIN { printf "%.2f", u / n }')"
        OURS_RCPU[$cell]+=" $(per_decision "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" "$requests")"
        OURS_CCPU[$cell]+=" $(per_decision "$(cat "$WORK/client_cpu")" "$requests")"
      done
    done
  done
done
# The script measured by name above is the one the binary runs.
[ "$(cli script exists "$OURS_SHA")" = 1 ] || {
  echo "bench-redis: the script assembled from script.rs is not the one slidegate loaded" >&2
  exit 1
}

# (c) and (e): both scripts on one stream, pipelined on one connection.
# stream KIND KEYS LIMIT -> "decisions/s usec_per_call"
stream() {
  local kind=$1 keys=$2 limit=$3 sha warm
  sha=$SEED_SHA
  [ "$kind" = ours ] && sha=$OURS_SHA
  warm=$((50000 * 12 / 10)) # 1.2 windows at 50k/s
  gen "$kind" "$sha" "$keys" "$limit" 1000 50000 0 "$warm" >"$WORK/warm.resp"
  gen "$kind" "$sha" "$keys" "$limit" 1000 50000 "$warm" $((warm + STREAM)) >"$WORK/measure.resp"
  reset
  redis-cli -p "$PORT" --pipe <"$WORK/warm.resp" >/dev/null
  cli config resetstat >/dev/null
  local begun ended
  begun=$(now_ns)
  redis-cli -p "$PORT" --pipe <"$WORK/measure.resp" | grep -q 'errors: 0' || {
    echo "bench-redis: errors in the $kind stream" >&2
    exit 1
  }
  ended=$(now_ns)
  echo "$(awk -v n="$STREAM" -v ns=$((ended - begun)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }') $(evalsha_stat 3)"
}
# best_stream KIND KEYS LIMIT: the best of REPEAT runs.
best_stream() {
  local rps usec r u
  for _ in $(seq "$REPEAT"); do
    read -r r u <<<"$(stream "$@")"
    rps=$(best "${rps:-}" "$r" larger)
    usec=$(best "${usec:-}" "$u" smaller)
  done
  echo "$rps $usec"
}
declare -A SAME
for kind in seed ours; do
  echo "same stream: $kind, 10k keys..." >&2
  SAME[$kind,10000,100]=$(best_stream "$kind" 10000 100)
  for limit in 10 100 1000 10000; do
    echo "same stream: $kind, 1 key, L = $limit..." >&2
    SAME[$kind,1,$limit]=$(best_stream "$kind" 1 "$limit")
  done
done

# (d) bytes per admission.
declare -A MEM_OURS MEM_SEED
for limit in 10 100 1000; do
  reset
  perl -e '
    use strict;
    my ($ours, $seed, $limit) = @ARGV;
    binmode STDOUT;
    sub bulk { return "\$" . length($_[0]) . "\r\n" . $_[0] . "\r\n" }
    sub cmd { return "*" . scalar(@_) . "\r\n" . join("", map { bulk($_) } @_) }
    srand(1);
    for my $i (0 .. $limit - 1) {
      my $t = 1763800000000000 + 1000 * $i;
      print cmd("EVALSHA", $ours, 1, "mem:{$limit}", pack("d<7", $t, 1, 1, 0, $limit, 60000000, 1));
      my $uuid = sprintf("%08x-%04x-4%03x-8%03x-%012x", int(rand(2 ** 32)), int(rand(65536)),
        int(rand(4096)), int(rand(4096)), int(rand(2 ** 40)));
      print cmd("EVALSHA", $seed, 1, "uuid:{$limit}", int($t / 1000), 60000, $limit, $uuid);
    }
  ' "$OURS_SHA" "$SEED_SHA" "$limit" | redis-cli -p "$PORT" --pipe >/dev/null
  MEM_OURS[$limit]=$(cli memory usage "mem:{$limit}" samples 0)
  MEM_SEED[$limit]=$(cli memory usage "uuid:{$limit}" samples 0)
  [ "$(cli zcard "uuid:{$limit}")" = "$limit" ] || echo "bench-redis: the UUID set holds fewer than $limit" >&2
done

# Optional: instructions per EVALSHA under callgrind (deterministic).
declare -A INSTR
if [ "$callgrind" = 1 ]; then
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null || {
    echo "bench-redis: --callgrind needs valgrind" >&2
    exit 1
  }
  stop_redis
  start_redis valgrind --tool=callgrind --toggle-collect=evalShaCommand \
    --callgrind-out-file="$WORK/callgrind.%p" -q
  # Under valgrind a stream runs far slower than its clock, and keys would
  # expire in real time between two decisions: slidegate's get an hour of
  # expiry margin, and the seeds' script an hour more in its PEXPIRE (the
  # same commands, so the same cost).
  SEED_SHA=$(cli script load "$(sed 's/window + 1000)/window + 3600000)/' "$SEED_LUA")")
  OURS_SHA=$(cli script load "$(ours_text)")
  for kind in seed ours ours-time; do
    for keys in 1 10000; do
      # On Redis' clock, time runs for real: only a hot key keeps a full
      # window while valgrind slows everything down.
      [ "$kind" = ours-time ] && [ "$keys" != 1 ] && continue
      echo "callgrind: $kind, $keys key(s)..." >&2
      sha=$SEED_SHA
      [ "$kind" != seed ] && sha=$OURS_SHA
      gen "$kind" "$sha" "$keys" 100 1000 50000 0 60000 3600000 >"$WORK/warm.resp"
      gen "$kind" "$sha" "$keys" 100 1000 50000 60000 65000 3600000 >"$WORK/measure.resp"
      reset
      redis-cli -p "$PORT" --pipe <"$WORK/warm.resp" >/dev/null
      callgrind_control -z "$REDIS_PID" >/dev/null
      redis-cli -p "$PORT" --pipe <"$WORK/measure.resp" >/dev/null
      rm -f "$WORK"/callgrind.*
      callgrind_control -d "$REDIS_PID" >/dev/null
      sleep 1
      total=$(grep -h -E '^(summary|totals):' "$WORK"/callgrind.* | head -1 | awk '{print $2}')
      INSTR[$kind,$keys]=$((total / 5000))
    done
  done
fi
if [ "$callgrind" = 1 ]; then
  stop_redis
  start_redis
fi

# (f) latency at low load, interleaved rounds.
declare -A LAT_P50 LAT_P99
for round in $(seq "$REPEAT"); do
  for coalesce in on off; do
    echo "latency (round $round): 1 task, coalescing $coalesce..." >&2
    reset
    sg_bench "redis://127.0.0.1:$PORT" 10000 1 0 "$coalesce"
    LAT_P50[$coalesce]+=" $(json p50)"
    LAT_P99[$coalesce]+=" $(json p99)"
  done
done

# (g) cost growth on one Redis and on a 3-master cluster.
CLUSTER_PORTS=()
if [ "$cluster" = 1 ]; then
  for n in 1 2 3; do
    port=$(free_port 10000)
    mkdir -p "$WORK/node$n"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$WORK/node$n" --logfile "$WORK/node$n/redis.log" --cluster-enabled yes \
      --cluster-config-file nodes.conf --cluster-node-timeout 5000 &
    CLUSTER_PIDS+=($!)
    CLUSTER_PORTS+=("$port")
    for _ in $(seq 600); do
      redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
      sleep 0.1
    done
  done
  redis-cli --cluster create "${CLUSTER_PORTS[@]/#/127.0.0.1:}" --cluster-replicas 0 \
    --cluster-yes >/dev/null
  for port in "${CLUSTER_PORTS[@]}"; do
    for _ in $(seq 300); do
      redis-cli -p "$port" cluster info | grep -q cluster_state:ok && break
      sleep 0.1
    done
  done
  CLUSTER_URL="redis+cluster://$(printf '127.0.0.1:%s,' "${CLUSTER_PORTS[@]}" | sed 's/,$//')"
fi
TOPOLOGIES="redis"
[ "$cluster" = 1 ] && TOPOLOGIES="redis cluster"
declare -A GROW_RPS GROW_USEC
for round in $(seq "$REPEAT"); do
  for topology in $TOPOLOGIES; do
    for tasks in 1 8 64 512; do
      for coalesce in on off; do
        echo "growth (round $round): $topology, $tasks tasks, coalescing $coalesce..." >&2
        if [ "$topology" = redis ]; then
          ports=$PORT url="redis://127.0.0.1:$PORT"
        else
          ports="${CLUSTER_PORTS[*]}" url=$CLUSTER_URL
        fi
        for port in $ports; do
          redis-cli -p "$port" flushall >/dev/null
          redis-cli -p "$port" config resetstat >/dev/null
        done
        sg_bench "$url" 10000 "$tasks" 0 "$coalesce"
        usec=0
        for port in $ports; do usec=$((usec + $(evalsha_stat 2 "$port"))); done
        cell=$topology,$tasks,$coalesce
        GROW_RPS[$cell]+=" $(printf %.0f "$(json per_second)")"
        GROW_USEC[$cell]+=" $(awk -v u="$usec" -v n="$(json requests)" 'BEGIN { printf "%.2f", u / n }')"
      done
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The table. m CELLS-ARRAY KEY: "median (spread)".
m() {
  local -n values=$1
  printf '%s (%s)' "$(median "${values[$2]}")" "$(spread "${values[$2]}")"
}
for keys in 1 10000; do
  name="1 hot key"
  [ "$keys" = 10000 ] && name="10k keys"
  for pair in "1 50" "16 500"; do
    set -- $pair
    pipeline=$1 tasks=$2
    target=1.0
    [ "$pipeline" = 16 ] && target=1.5
    seeds=${SEED_RPS[$keys,$pipeline]}
    for mode in on off cache; do
      ours=$(median "${OURS_RPS[$keys,$tasks,$mode]}")
      r=$(ratio "$ours" "$seeds")
      case $mode in
        on) what="coalescing on, no deny cache" ;;
        off) what="coalescing off, no deny cache" ;;
        cache) what="coalescing on, deny cache" ;;
      esac
      seeds_cell="(as above)"
      [ "$mode" = on ] && seeds_cell="redis-benchmark -c 50 -P $pipeline: $(printf %.0f "$seeds") (CPU per decision: ${SEED_CPU[$keys,$pipeline]})"
      row "a, b" "decisions/s, $name" "$seeds_cell" \
        "$tasks tasks, $what: $(m OURS_RPS "$keys,$tasks,$mode") (CPU per decision: client $(median "${OURS_CCPU[$keys,$tasks,$mode]}") µs, redis-server $(median "${OURS_RCPU[$keys,$tasks,$mode]}") µs; $(median "${OURS_CALLS[$keys,$tasks,$mode]}") EVALSHA per decision)" \
        "$r" "$([ "$mode" = on ] && echo ">= $target" || echo -)" \
        "$([ "$mode" = on ] && met "$r" '>=' "$target" || echo -)"
    done
  done
done
for keys in 1 10000; do
  name="1 hot key"
  [ "$keys" = 10000 ] && name="10k keys"
  seeds=${SEED_USEC[$keys,16]}
  for tasks in 50 500; do
    for mode in on off; do
      ours=$(median "${OURS_USEC[$keys,$tasks,$mode]}")
      r=$(ratio "$ours" "$seeds")
      target=-
      [ "$mode" = on ] && target=0.4
      row "c" "EVALSHA usec per decision, $name" "redis-benchmark -P 16 (fixed time), usec_per_call: $seeds" \
        "$tasks tasks, coalescing $mode, Redis' clock: $(m OURS_USEC "$keys,$tasks,$mode")" "$r" \
        "$([ "$target" = - ] && echo - || echo "<= $target")" \
        "$([ "$target" = - ] && echo - || met "$r" '<=' "$target")"
    done
  done
  read -r _ seeds <<<"${SAME[seed,$keys,100]}"
  read -r _ ours <<<"${SAME[ours,$keys,100]}"
  r=$(ratio "$ours" "$seeds")
  row "c" "usec_per_call, $name" "same stream: $seeds" "same stream, one call per decision, caller's clock: $ours" \
    "$r" "<= 1.0" "$(met "$r" '<=' 1.0)"
  if [ "$callgrind" = 1 ]; then
    r=$(ratio "${INSTR[ours,$keys]}" "${INSTR[seed,$keys]}")
    row "c" "instructions per EVALSHA, $name" "same stream: ${INSTR[seed,$keys]}" \
      "same stream, caller's clock: ${INSTR[ours,$keys]}" "$r" "<= 1.0" "$(met "$r" '<=' 1.0)"
    if [ "$keys" = 1 ]; then
      r=$(ratio "${INSTR[ours-time,$keys]}" "${INSTR[seed,$keys]}")
      row "c" "instructions per EVALSHA, $name" "same stream: ${INSTR[seed,$keys]}" \
        "same stream, Redis' clock (TIME): ${INSTR[ours-time,$keys]}" "$r" "<= 1.0" "$(met "$r" '<=' 1.0)"
    fi
  fi
done
for limit in 10 100 1000; do
  seeds=$(awk -v m="${MEM_SEED[$limit]}" -v l="$limit" 'BEGIN { printf "%.1f", m / l }')
  ours=$(awk -v m="${MEM_OURS[$limit]}" -v l="$limit" 'BEGIN { printf "%.1f", m / l }')
  r=$(ratio "${MEM_OURS[$limit]}" "${MEM_SEED[$limit]}")
  row "d" "bytes per admission, L = $limit" "UUID sorted set: $seeds (${MEM_SEED[$limit]} B)" \
    "$ours (${MEM_OURS[$limit]} B)" "$r" "<= 0.5" "$(met "$r" '<=' 0.5)"
done
for limit in 10 100 1000 10000; do
  read -r seeds_rps seeds <<<"${SAME[seed,1,$limit]}"
  read -r ours_rps ours <<<"${SAME[ours,1,$limit]}"
  row "e" "full window, L = $limit/1s" "$seeds µs, $seeds_rps/s" "$ours µs, $ours_rps/s" \
    "$(ratio "$ours" "$seeds")" "-" "-"
done

echo
echo "scripts/bench-redis.sh$([ "$quick" = 1 ] && echo ' --quick')$([ "$callgrind" = 1 ] && echo ' --callgrind') on $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), redis-server $REDIS_VERSION"
echo "load average before: $LOAD_BEFORE, after: $LOAD_AFTER; best of $REPEAT run(s); slidegate $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo "| part | measure | seeds' script | slidegate | slidegate / seeds | target | met |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"

echo
echo "(f) latency at low load, 1 task, 10k keys, no deny cache, µs: median of $REPEAT rounds (spread)"
echo
echo "| coalescing | p50 | p99 |"
echo "|---|---|---|"
for coalesce in on off; do
  echo "| $coalesce | $(m LAT_P50 "$coalesce") | $(m LAT_P99 "$coalesce") |"
done
echo
r50=$(ratio "$(median "${LAT_P50[on]}")" "$(median "${LAT_P50[off]}")")
r99=$(ratio "$(median "${LAT_P99[on]}")" "$(median "${LAT_P99[off]}")")
echo "on / off: p50 $r50 ($(met "$r50" '<=' 1.1) for <= 1.1), p99 $r99 ($(met "$r99" '<=' 1.1) for <= 1.1)"
echo
echo "(g) cost growth, 10k keys, no deny cache: decisions/s, median of $REPEAT rounds (spread); EVALSHA usec per decision (median, all nodes)"
echo
echo "| Redis | tasks | coalescing on | coalescing off | on / off |"
echo "|---|---|---|---|---|"
for topology in $TOPOLOGIES; do
  name="one redis-server"
  [ "$topology" = cluster ] && name="3-master cluster"
  for tasks in 1 8 64 512; do
    on=$(median "${GROW_RPS[$topology,$tasks,on]}")
    off=$(median "${GROW_RPS[$topology,$tasks,off]}")
    echo "| $name | $tasks | $(m GROW_RPS "$topology,$tasks,on"); $(median "${GROW_USEC[$topology,$tasks,on]}") µs | $(m GROW_RPS "$topology,$tasks,off"); $(median "${GROW_USEC[$topology,$tasks,off]}") µs | $(ratio "$on" "$off") |"
  done
done
