#!/usr/bin/env bash
# slidegate's gRPC ShouldRateLimit beside Limitador's, under the same load
# client, in interleaved rounds (slidegate, Limitador, slidegate, ...:
# both see the same machine), on 127.0.0.1 only.
#
#   slidegate  `slidegate serve` with the rule of scripts/bench-server.sh:
#              every value of `key` in domain `bench` has its own 100/1s
#   Limitador  Limitador's library (`limitador` 0.14.0) behind an RLS
#              server written for this benchmark after limitador-server's
#              (scripts/peers/limitador-rls), with the same rule
#
# For each store (memory, then a local redis-server this script starts:
# slidegate's Redis store against Limitador's AsyncRedisStorage, its
# `redis` mode) and each key count, both are driven by
#   slidegate bench --target grpc://... --op should-rate-limit --keys K
#     --concurrency CONCURRENCY --duration SECONDS_PER_RUNs --json
# Prints the server's CPU per decision (utime + stime of its process from
# /proc/PID/stat over the run, divided by the calls answered; then its
# user time alone in a table of its own) and the
# median req/s, their ranges over the rounds, and the ratios slidegate /
# Limitador (of the medians, and the range of the rounds' own ratios).
# For the Redis store, a third table: redis-server's own CPU per
# decision during each server's runs, and the server's and Redis' CPU
# together.
# CPU per decision is the figure to trust on a busy machine: req/s also
# measures the load client, which shares the cores. Then the first round's
# answers of each server (admitted, denied, errors), to check the two
# agree: with 1 key both admit about 100 a second.
#
#   scripts/bench-limitador.sh
#
# Needs redis-server and redis-cli (for the Redis rows), cargo and perl.
# The harness builds once into target/peers/ (LIMITADOR_RLS: a binary to
# use instead). Environment: ROUNDS (default 5), SECONDS_PER_RUN (default
# 5), CONCURRENCY (default 64), KEY_COUNTS (default "1 10000"), STORES
# (default "memory redis"), SLIDEGATE (a binary to measure instead of
# building this tree's; SLIDEGATE_COMMIT names its commit in the
# report), LIMITADOR_THREADS (the harness's runtime threads,
# default 1: limitador-server serves gRPC on one thread).
#
# INSTRUCTIONS=1 runs both servers under valgrind's callgrind instead and
# gives instructions per decision where the CPU columns were (counters
# zeroed after a 1 s warm-up of each run, dumped after it; ROUNDS default
# 1, CONCURRENCY 8): repeatable whatever else runs on the machine. Its
# req/s are valgrind's, not a figure; Redis' CPU is still measured.
#
# Exits 1 if an answer counted as "no limit applied" (a harness or rule
# mismatch: the figures would measure a lookup, not a limit).
set -euo pipefail
INSTRUCTIONS=${INSTRUCTIONS:-}
if [ -n "$INSTRUCTIONS" ]; then
  ROUNDS=${ROUNDS:-1}
  CONCURRENCY=${CONCURRENCY:-8}
fi
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONCURRENCY=${CONCURRENCY:-64}
KEY_COUNTS=${KEY_COUNTS:-1 10000}
STORES=${STORES:-memory redis}
LIMITADOR_THREADS=${LIMITADOR_THREADS:-1}
TICKS=$(getconf CLK_TCK)
SERVERS="slidegate limitador"
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PEER=$ROOT/scripts/peers/limitador-rls
PEER_TARGET=$ROOT/target/peers
LIMITADOR_SRC=$PEER_TARGET/limitador-0.14.0
# need_tools, slidegate_binary, start_work, launch, instructions.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
# free_port, wait_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh
# median, range.
# shellcheck source=scripts/lib/stats.sh
source scripts/lib/stats.sh
need_tools cargo perl
[ -z "$INSTRUCTIONS" ] || need_tools valgrind callgrind_control
[[ " $STORES " == *" redis "* ]] && need_tools redis-server redis-cli
start_work

# limitador_source: the published limitador 0.14.0, unpacked into
# LIMITADOR_SRC (the harness's [patch]), with the two `cfg` attributes
# that keep 0.14.0 from building without `disk_storage` widened to
# `redis_storage` (see the harness's Cargo.toml).
limitador_source() {
  [ -f "$LIMITADOR_SRC/Cargo.toml" ] && return
  mkdir -p "$WORK/fetch/src" "$PEER_TARGET"
  cat >"$WORK/fetch/Cargo.toml" <<'TOML'
[package]
name = "fetch"
version = "0.0.0"
edition = "2021"

[workspace]

[dependencies]
limitador = { version = "=0.14.0", default-features = false }
TOML
  : >"$WORK/fetch/src/main.rs"
  local manifest
  manifest=$(cargo metadata --quiet --format-version 1 --manifest-path "$WORK/fetch/Cargo.toml" |
    perl -MJSON::PP -e 'local $/; my $m = decode_json(<STDIN>);
      print $_->{manifest_path} for grep { $_->{name} eq "limitador" } @{ $m->{packages} }')
  [ -f "$manifest" ] || {
    echo "${0##*/}: cargo found no limitador 0.14.0" >&2
    exit 1
  }
  rm -rf "$LIMITADOR_SRC.tmp"
  cp -r "$(dirname "$manifest")" "$LIMITADOR_SRC.tmp"
  perl -0777 -pi -e 's/#\[cfg\(feature = "disk_storage"\)\](\npub mod bin \{)/#[cfg(any(feature = "disk_storage", feature = "redis_storage"))]$1/ or die "keys.rs: no bin module to widen\n"' \
    "$LIMITADOR_SRC.tmp/src/storage/keys.rs"
  perl -0777 -pi -e 's/#\[cfg\(feature = "disk_storage"\)\](\n\s*pub\(crate\) fn variables_for_key)/#[cfg(any(feature = "disk_storage", feature = "redis_storage"))]$1/ or die "counter.rs: no variables_for_key to widen\n"' \
    "$LIMITADOR_SRC.tmp/src/counter.rs"
  mv "$LIMITADOR_SRC.tmp" "$LIMITADOR_SRC"
}

if [ -z "${LIMITADOR_RLS:-}" ]; then
  LIMITADOR_RLS=$PEER_TARGET/release/limitador-rls
  if [ ! -x "$LIMITADOR_RLS" ]; then
    limitador_source
    echo "==> building the Limitador harness into $PEER_TARGET" >&2
    cargo build --release --locked --quiet --manifest-path "$PEER/Cargo.toml" --target-dir "$PEER_TARGET"
  fi
fi
slidegate_binary

bench_rules "$WORK/bench.yaml"

REDIS=
if [[ " $STORES " == *" redis "* ]]; then
  start_redis
fi

# cell NUMBERS FORMAT: "median (lo–hi)" of the rounds' figures.
cell() { echo "$(echo "$1" | median | xargs printf "$2") ($(echo "$1" | range "$2"))"; }

UNLIMITED=0
ROWS=()
# Under valgrind a server takes a while to listen.
STARTUP=10
[ -n "$INSTRUCTIONS" ] && STARTUP=60
UNIT="µs CPU"
CPU_FORMAT=%.1f
if [ -n "$INSTRUCTIONS" ]; then
  UNIT=instructions
  CPU_FORMAT=%.0f
fi

REDIS_ROWS=()
USER_ROWS=()
COUNTS=()
for store in $STORES; do
  url=memory
  [ "$store" = redis ] && url=$REDIS
  declare -A PORT=() PID=()
  PORT[slidegate]=$(free_port)
  launch "slidegate-$store" "$SLIDEGATE" serve --store "$url" --config "$WORK/bench.yaml" \
    --http-addr 127.0.0.1:0 --grpc-addr "127.0.0.1:${PORT[slidegate]}" >"$WORK/slidegate.log" 2>&1
  PID[slidegate]=$!
  PIDS+=($!)
  wait_port "${PORT[slidegate]}" "$STARTUP"
  PORT[limitador]=$(free_port)
  redis_flag=()
  [ "$store" = redis ] && redis_flag=(--redis "$REDIS")
  launch "limitador-$store" "$LIMITADOR_RLS" --addr "127.0.0.1:${PORT[limitador]}" "${redis_flag[@]}" \
    --threads "$LIMITADOR_THREADS" >"$WORK/limitador.log" 2>&1
  PID[limitador]=$!
  PIDS+=($!)
  wait_port "${PORT[limitador]}" "$STARTUP"
  for keys in $KEY_COUNTS; do
    declare -A RPS=() CPU=() UCPU=() RCPU=() BOTH=()
    RATIO_RPS=""
    RATIO_CPU=""
    for round in $(seq "$ROUNDS"); do
      declare -A THIS_RPS=() THIS_CPU=()
      for server in $SERVERS; do
        # Both stores start each run from empty counters.
        [ "$store" = redis ] && redis-cli -p "$REDIS_PORT" flushall >/dev/null
        if [ -n "$INSTRUCTIONS" ]; then
          "$SLIDEGATE" bench --target "grpc://127.0.0.1:${PORT[$server]}" --op should-rate-limit \
            --keys "$keys" --concurrency "$CONCURRENCY" --duration 1s --json >/dev/null
          callgrind_control -z "${PID[$server]}" >/dev/null 2>&1
        fi
        before=$(cpu_ticks "${PID[$server]}")
        user_before=$(user_ticks "${PID[$server]}")
        redis_before=0
        [ "$store" = redis ] && redis_before=$(cpu_ticks "$REDIS_PID")
        json=$("$SLIDEGATE" bench --target "grpc://127.0.0.1:${PORT[$server]}" --op should-rate-limit \
          --keys "$keys" --concurrency "$CONCURRENCY" --duration "${SECONDS_PER_RUN}s" --json)
        after=$(cpu_ticks "${PID[$server]}")
        user_after=$(user_ticks "${PID[$server]}")
        redis_after=0
        [ "$store" = redis ] && redis_after=$(cpu_ticks "$REDIS_PID")
        read -r rps requests allowed unlimited denied errors seconds <<<"$(echo "$json" | perl -MJSON::PP -e '
          local $/; my $r = decode_json(<STDIN>);
          print join(" ", map { $r->{$_} } qw(per_second requests allowed unlimited denied errors seconds))')"
        [ "$round" = 1 ] && echo "bench-limitador: $store, $keys keys, $server, first run: $json" >&2
        [ "$errors" = 0 ] || echo "bench-limitador: $errors errors ($store, $keys keys, $server)" >&2
        if [ "$unlimited" != 0 ]; then
          echo "bench-limitador: $unlimited answers with no limit ($store, $keys keys, $server)" >&2
          UNLIMITED=1
        fi
        if [ -n "$INSTRUCTIONS" ]; then
          callgrind_control -d "${PID[$server]}" >/dev/null 2>&1
          cpu=$(awk -v i="$(instructions "$server-$store")" -v n="$requests" \
            'BEGIN { printf "%.0f", (n > 0) ? i / n : 0 }')
        else
          cpu=$(awk -v t="$((after - before))" -v hz="$TICKS" -v n="$requests" \
            'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
        fi
        RPS[$server]+="$rps "
        CPU[$server]+="$cpu "
        UCPU[$server]+="$(awk -v t="$((user_after - user_before))" -v hz="$TICKS" -v n="$requests" \
          'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }') "
        rcpu=$(awk -v t="$((redis_after - redis_before))" -v hz="$TICKS" -v n="$requests" \
          'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
        RCPU[$server]+="$rcpu "
        BOTH[$server]+="$(awk -v a="$cpu" -v b="$rcpu" 'BEGIN { printf "%.2f", a + b }') "
        THIS_RPS[$server]=$rps
        THIS_CPU[$server]=$cpu
        if [ "$round" = 1 ]; then
          COUNTS+=("| $store | $keys | $server | $requests | $allowed | $denied | $errors | $(awk -v a="$allowed" -v s="$seconds" 'BEGIN { printf "%.0f", a / s }') |")
        fi
        echo "bench-limitador: $store, $keys keys, round $round, $server: $(printf '%.0f' "$rps") req/s, $cpu $UNIT per decision (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      done
      RATIO_RPS+="$(awk -v a="${THIS_RPS[slidegate]}" -v b="${THIS_RPS[limitador]}" 'BEGIN { printf "%.3f", a / b }') "
      RATIO_CPU+="$(awk -v a="${THIS_CPU[slidegate]}" -v b="${THIS_CPU[limitador]}" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }') "
    done
    rps_ratio=$(awk -v a="$(echo "${RPS[slidegate]}" | median)" -v b="$(echo "${RPS[limitador]}" | median)" 'BEGIN { printf "%.2f", a / b }')
    cpu_ratio=$(awk -v a="$(echo "${CPU[slidegate]}" | median)" -v b="$(echo "${CPU[limitador]}" | median)" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
    if [ "$store" = redis ]; then
      rcpu_ratio=$(awk -v a="$(echo "${RCPU[slidegate]}" | median)" -v b="$(echo "${RCPU[limitador]}" | median)" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
      both_ratio=$(awk -v a="$(echo "${BOTH[slidegate]}" | median)" -v b="$(echo "${BOTH[limitador]}" | median)" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
      REDIS_ROWS+=("| $keys | $(cell "${RCPU[slidegate]}" '%.1f') | $(cell "${RCPU[limitador]}" '%.1f') | **$rcpu_ratio** | $(cell "${BOTH[slidegate]}" '%.1f') | $(cell "${BOTH[limitador]}" '%.1f') | **$both_ratio** |")
    fi
    ucpu_ratio=$(awk -v a="$(echo "${UCPU[slidegate]}" | median)" -v b="$(echo "${UCPU[limitador]}" | median)" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
    USER_ROWS+=("| $store | $keys | $(cell "${UCPU[slidegate]}" '%.1f') | $(cell "${UCPU[limitador]}" '%.1f') | **$ucpu_ratio** |")
    ROWS+=("| $store | $keys | $(cell "${CPU[slidegate]}" "$CPU_FORMAT") | $(cell "${CPU[limitador]}" "$CPU_FORMAT") | **$cpu_ratio** ($(echo "$RATIO_CPU" | range '%.2f')) | $(cell "${RPS[slidegate]}" '%.0f') | $(cell "${RPS[limitador]}" '%.0f') | **$rps_ratio** ($(echo "$RATIO_RPS" | range '%.2f')) |")
  done
  for server in $SERVERS; do
    kill "${PID[$server]}"
    wait "${PID[$server]}" 2>/dev/null || true
  done
done

echo
echo "slidegate ${SLIDEGATE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')} against limitador 0.14.0 (harness: $LIMITADOR_THREADS runtime thread(s)), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "gRPC ShouldRateLimit, $CONCURRENCY tasks, ${SECONDS_PER_RUN}s per run, $ROUNDS interleaved rounds: median (range)"
echo
echo "| store | keys | slidegate $UNIT per decision | Limitador $UNIT per decision | $UNIT slidegate / Limitador | slidegate req/s | Limitador req/s | req/s slidegate / Limitador |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
if [ -z "$INSTRUCTIONS" ]; then
  echo
  echo "Of the server's CPU, its user time (its own code; the rest is the kernel's socket work for the call):"
  echo
  echo "| store | keys | slidegate µs user CPU per decision | Limitador µs user CPU per decision | user CPU slidegate / Limitador |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${USER_ROWS[@]}"
fi
if [ -z "$INSTRUCTIONS" ] && [ "${#REDIS_ROWS[@]}" -gt 0 ]; then
  echo
  echo "redis-server's own CPU per decision during each server's runs, and the server's and Redis' together:"
  echo
  echo "| keys | Redis µs CPU per slidegate decision | per Limitador decision | Redis CPU slidegate / Limitador | server + Redis µs, slidegate | server + Redis µs, Limitador | together slidegate / Limitador |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${REDIS_ROWS[@]}"
fi
echo
echo "First round's answers (limit: 100/1s for each key):"
echo
echo "| store | keys | server | calls | admitted | denied | errors | admitted/s |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${COUNTS[@]}"
[ "$UNLIMITED" = 0 ] || exit 1
