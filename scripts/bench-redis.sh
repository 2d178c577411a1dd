#!/usr/bin/env bash
# The Redis measurements of issue 3: slidegate's Redis store against the
# seeds' sorted-set script (crates/slidegate/benches/seed_sliding_window.lua),
# on one local redis-server started (and stopped) by this script, in one run.
#
#   scripts/bench-redis.sh [--quick] [--callgrind]
#
#   --quick      short runs (a smoke test of the script, not a measurement)
#   --callgrind  also count the instructions Redis spends per EVALSHA under
#                valgrind (deterministic, unlike timings on a busy machine)
#
# Needs redis-server, redis-cli, redis-benchmark (Debian: redis-server,
# redis-tools), perl and cargo; builds target/release/slidegate. Environment:
# BENCH_SECONDS (each `slidegate bench` run, default 10), BENCH_REQUESTS
# (each redis-benchmark -P 1 run, default 400000; -P 16 runs take 4x),
# BENCH_STREAM (decisions per same-stream run, default 200000), BENCH_REPEAT
# (runs of each measurement, default 2: the table shows the best, the
# fastest run and the lowest usec_per_call, against other load).
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
# (b) `slidegate bench --store redis://...` (the server's store stack: the
#     failure policy, the circuit breaker and the local deny cache around
#     the RedisStore) with 50 and 500 tasks on the same cases, on Redis'
#     clock, without the deny cache (--deny-cache-entries 0: every decision
#     is an EVALSHA) and with it (the default).
# (c) Redis CPU per decision: INFO commandstats usec_per_call of EVALSHA,
#     after CONFIG RESETSTAT, for the runs of (a) and (b); and for both
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
#
# Client and server share the machine's cores: throughput numbers depend
# on the load, which is printed before and after, and the throughput rows
# show the CPU each side spent per decision (redis-server's whole process,
# networking included; the client's user + system time).

set -euo pipefail

quick=0
callgrind=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
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

SECONDS_PER_RUN=${BENCH_SECONDS:-10}
REQUESTS=${BENCH_REQUESTS:-400000}
STREAM=${BENCH_STREAM:-200000}
REPEAT=${BENCH_REPEAT:-2}
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
SEED_LUA=$ROOT/crates/slidegate/benches/seed_sliding_window.lua
SCRIPT_RS=$ROOT/crates/slidegate/src/store/redis/script.rs

echo "building slidegate (release)..." >&2
cargo build --release --quiet -p slidegate-server
SLIDEGATE=$TARGET/release/slidegate

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

# A free port: nothing answers a TCP connection on it.
PORT=
for _ in $(seq 100); do
  candidate=$((20000 + RANDOM % 20000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
    PORT=$candidate
    break
  fi
done
[ -n "$PORT" ] || {
  echo "bench-redis: no free port found" >&2
  exit 1
}

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

# EVALSHA's calls and usec_per_call since the last CONFIG RESETSTAT.
evalsha_stat() {
  cli info commandstats | tr -d '\r' |
    sed -n "s/^cmdstat_evalsha:calls=\([0-9]*\),usec=[0-9]*,usec_per_call=\([0-9.]*\).*/\\$1/p"
}

reset() {
  cli flushall >/dev/null
  cli config resetstat >/dev/null
}

# slidegate's script, as script.rs assembles it.
ours_text() {
  sed -n '/SCRIPT_TEXT: &str = concat!(/,/^);/p' "$SCRIPT_RS" |
    grep -o 'include_str!("[a-z_]*\.lua")' | sed 's/include_str!("\(.*\)")/\1/' |
    while read -r file; do cat "$ROOT/crates/slidegate/src/store/redis/$file"; done
}

# A stream of EVALSHA calls in RESP on a synthetic clock.
#   gen KIND SHA KEYS LIMIT WINDOW_MS RATE FROM TO [MARGIN_MS]
# KIND: seed (the seeds' script: time in ms, a UUID member), ours
# (slidegate's script on the caller's clock: ARGV[1] as binary doubles,
# with the expiry margin MARGIN_MS, default 1) or ours-time (the same on
# Redis' clock: TIME in the script, the stream's clock unused).
# The clock advances 1e6/RATE µs per decision; KEYS = 1 is one hot key,
# otherwise a reproducible random key in 0..KEYS-1.
gen() {
  perl -e '
    use strict;
    my ($kind, $sha, $keys, $limit, $window_ms, $rate, $from, $to, $margin) = @ARGV;
    $margin = 1 unless defined $margin;
    srand(7919 * $from + 1);
    binmode STDOUT;
    my $t0 = 1700000000000000;
    sub bulk { return "\$" . length($_[0]) . "\r\n" . $_[0] . "\r\n" }
    my $out = "";
    for my $i ($from .. $to - 1) {
      my $t = $t0 + int($i * 1000000 / $rate);
      my $k = $keys == 1 ? "hot" : int(rand($keys));
      my @args;
      if ($kind eq "seed") {
        my $member = sprintf("%08x-%04x-4%03x-8%03x-%012x", $i, int(rand(65536)),
          int(rand(4096)), int(rand(4096)), int(rand(2 ** 40)));
        @args = ("EVALSHA", $sha, 1, "seed:{$k}", int($t / 1000), $window_ms, $limit, $member);
      } else {
        my $now = $kind eq "ours-time" ? -1 : $t;
        my $spec = pack("d<7", $now, $margin, 1, 0, $limit, $window_ms * 1000, 1);
        @args = ("EVALSHA", $sha, 1, "slidegate:v2:{$k}:$limit/1s", $spec);
      }
      $out .= "*" . scalar(@args) . "\r\n" . join("", map { bulk($_) } @args);
      if (length($out) > 1 << 20) { print $out; $out = "" }
    }
    print $out;
  ' "$@"
}

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
      SEED_USEC[$keys,$pipeline]=$(best "${SEED_USEC[$keys,$pipeline]:-}" "$(evalsha_stat 2)" smaller)
    done
  done
done

# (b) slidegate bench, Redis' clock, with and without the local deny cache.
declare -A OURS_RPS OURS_USEC OURS_CALLS OURS_CPU
for keys in 1 10000; do
  for tasks in 50 500; do
    for cache in 0 100000; do
      for _ in $(seq "$REPEAT"); do
        echo "slidegate bench: $keys key(s), $tasks tasks, deny cache $cache..." >&2
        reset
        cpu0=$(redis_cpu)
        timed "$SLIDEGATE" bench --store "redis://127.0.0.1:$PORT" --keys "$keys" \
          --concurrency "$tasks" --duration "${SECONDS_PER_RUN}s" --rate 100/1s \
          --store-timeout-ms 5000 --deny-cache-entries "$cache" --json >"$WORK/json"
        cpu1=$(redis_cpu)
        json=$(cat "$WORK/json")
        per_second=$(echo "$json" | sed 's/.*"per_second":\([0-9.]*\).*/\1/')
        requests=$(echo "$json" | sed 's/.*"requests":\([0-9]*\).*/\1/')
        errors=$(echo "$json" | sed 's/.*"errors":\([0-9]*\).*/\1/')
        [ "$errors" = 0 ] || echo "bench-redis: $errors errors in that run" >&2
        if [ "$(best "${OURS_RPS[$keys,$tasks,$cache]:-}" "$per_second" larger)" = "$per_second" ]; then
          OURS_RPS[$keys,$tasks,$cache]=$per_second
          OURS_CALLS[$keys,$tasks,$cache]=$(awk -v c="$(evalsha_stat 1)" -v n="$requests" 'BEGIN { printf "%.3g", c / n }')
          OURS_CPU[$keys,$tasks,$cache]="client $(per_decision "$(cat "$WORK/client_cpu")" "$requests") µs, redis-server $(per_decision "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" "$requests") µs"
        fi
        OURS_USEC[$keys,$tasks,$cache]=$(best "${OURS_USEC[$keys,$tasks,$cache]:-}" "$(evalsha_stat 2)" smaller)
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
  echo "$(awk -v n="$STREAM" -v ns=$((ended - begun)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }') $(evalsha_stat 2)"
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
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The table.
for keys in 1 10000; do
  name="1 hot key"
  [ "$keys" = 10000 ] && name="10k keys"
  for pair in "1 50" "16 500"; do
    set -- $pair
    pipeline=$1 tasks=$2
    target=1.0
    [ "$pipeline" = 16 ] && target=0.8
    seeds=${SEED_RPS[$keys,$pipeline]}
    ours=${OURS_RPS[$keys,$tasks,0]}
    r=$(ratio "$ours" "$seeds")
    row "a, b" "decisions/s, $name" \
      "redis-benchmark -c 50 -P $pipeline: $(printf %.0f "$seeds") (CPU per decision: ${SEED_CPU[$keys,$pipeline]})" \
      "$tasks tasks, no deny cache: $(printf %.0f "$ours") (${OURS_CPU[$keys,$tasks,0]})" \
      "$r" ">= $target" "$(met "$r" '>=' "$target")"
    ours=${OURS_RPS[$keys,$tasks,100000]}
    r=$(ratio "$ours" "$seeds")
    row "b" "decisions/s, $name" "(as above)" \
      "$tasks tasks, deny cache: $(printf %.0f "$ours") (${OURS_CALLS[$keys,$tasks,100000]} EVALSHA per decision)" \
      "$r" "-" "-"
  done
done
for keys in 1 10000; do
  name="1 hot key"
  [ "$keys" = 10000 ] && name="10k keys"
  seeds=${SEED_USEC[$keys,1]}
  ours=${OURS_USEC[$keys,50,0]}
  r=$(ratio "$ours" "$seeds")
  row "c" "usec_per_call, $name" "redis-benchmark -P 1 (fixed time): $seeds" \
    "50 tasks, Redis' clock (TIME): $ours" "$r" "<= 1.0" "$(met "$r" '<=' 1.0)"
  read -r _ seeds <<<"${SAME[seed,$keys,100]}"
  read -r _ ours <<<"${SAME[ours,$keys,100]}"
  r=$(ratio "$ours" "$seeds")
  row "c" "usec_per_call, $name" "same stream: $seeds" "same stream, caller's clock: $ours" \
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
