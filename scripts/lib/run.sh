# Shared by the benchmark scripts that drive `slidegate` (sourced, not
# run, from the repository's root): the tools they need, the binary they
# measure, and a work directory whose processes stop with the script.

# need_tools TOOL...: exits with a message naming the first one missing.
need_tools() {
  for tool in "$@"; do
    command -v "$tool" >/dev/null || {
      echo "${0##*/}: $tool is missing (Debian: apt-get install redis-server)" >&2
      exit 1
    }
  done
}

# slidegate_binary: SLIDEGATE, or this tree's release build (built now).
slidegate_binary() {
  if [ -z "${SLIDEGATE:-}" ]; then
    cargo build --release --quiet -p slidegate-server
    SLIDEGATE=${CARGO_TARGET_DIR:-$(pwd)/target}/release/slidegate
  fi
}

# start_work: WORK, a temporary directory, and PIDS, the processes to
# stop; both cleaned up when the script exits.
start_work() {
  WORK=$(mktemp -d)
  PIDS=()
  trap cleanup_work EXIT
}

cleanup_work() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

# bench_rules FILE: the rules the server benchmarks send ShouldRateLimit
# and /v1/check against: every value of `key` in domain `bench` has its
# own 100/1s.
bench_rules() {
  cat >"$1" <<'YAML'
domain: bench
descriptors:
  - key: key
    rate_limit:
      unit: second
      requests_per_unit: 100
YAML
}

# start_redis: a redis-server of the script's own on a free port, nothing
# saved, its files in WORK (start_work first, and source
# scripts/lib/ports.sh); sets REDIS_PORT, REDIS, its URL, and REDIS_PID.
start_redis() {
  REDIS_PORT=$(free_port)
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  # shellcheck disable=SC2034 # read by the scripts that source this
  REDIS_PID=$!
  PIDS+=($!)
  wait_port "$REDIS_PORT"
  # shellcheck disable=SC2034 # read by the scripts that source this
  REDIS=redis://127.0.0.1:$REDIS_PORT
}

# throttlecrab_binary: THROTTLECRAB, or throttlecrab-server from PATH, or
# one installed now with cargo into the work directory (start_work first).
throttlecrab_binary() {
  if [ -z "${THROTTLECRAB:-}" ]; then
    if command -v throttlecrab-server >/dev/null; then
      THROTTLECRAB=$(command -v throttlecrab-server)
    else
      command -v protoc >/dev/null || {
        echo "${0##*/}: protoc is missing (Debian: apt-get install protobuf-compiler), needed to build throttlecrab-server" >&2
        exit 1
      }
      echo "==> cargo install throttlecrab-server (into $WORK/throttlecrab)" >&2
      cargo install --quiet --locked throttlecrab-server --root "$WORK/throttlecrab"
      THROTTLECRAB=$WORK/throttlecrab/bin/throttlecrab-server
    fi
  fi
}

# launch NAME COMMAND...: COMMAND in the background (its PID in $!), under
# valgrind's callgrind when INSTRUCTIONS is set, its dumps in
# WORK/callgrind.NAME.* (start_work first).
launch() {
  local name=$1
  shift
  if [ -n "${INSTRUCTIONS:-}" ]; then
    valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.$name" "$@" &
  else
    "$@" &
  fi
}

# instructions NAME: the instructions counted in NAME's newest callgrind
# dump (see launch; `callgrind_control -d PID` writes one).
instructions() {
  local newest
  newest=$(find "$WORK" -name "callgrind.$1.*" -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2)
  awk '/^summary:/ { print $2; exit }' "$newest"
}
