#!/usr/bin/env bash
# slidegate's gRPC instructions per call beside a bare tonic server's (the
# floor: what tonic itself costs per call), under callgrind and the same
# load. The bare server (scripts/peers/tonic-bare) is
# `tonic::transport::Server::builder()` with no options, serving the
# standard health service and an Envoy RLS service that answers every
# call OK without a limiter; it builds once into target/peers/
# (TONIC_BARE: a binary to use instead).
#
#   scripts/bench-tonic-floor.sh
#
# For each server and each case (the health `Check`, `ShouldRateLimit`):
# the server runs under valgrind, a 2 s warm-up is sent, its counters are
# zeroed, then
#   slidegate bench --target grpc://... --op CASE --keys KEYS
#     --concurrency CONNECTIONS --duration REQUESTS_SECONDSs
# and the instructions counted since are divided by the calls answered.
# Environment: SLIDEGATE (a binary to measure instead of building this
# tree's; it is the load client too), REQUESTS_SECONDS (default 10), KEYS
# (default 10000), CONNECTIONS (default 8), as scripts/bench-instructions.sh.
set -euo pipefail
SECONDS_PER_RUN=${REQUESTS_SECONDS:-10}
KEYS=${KEYS:-10000}
CONNECTIONS=${CONNECTIONS:-8}
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PEER=$ROOT/scripts/peers/tonic-bare
PEER_TARGET=$ROOT/target/peers
# need_tools, slidegate_binary, start_work, bench_rules.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
# free_port, wait_port.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh
need_tools cargo valgrind callgrind_control
start_work

if [ -z "${TONIC_BARE:-}" ]; then
  TONIC_BARE=$PEER_TARGET/release/tonic-bare
  if [ ! -x "$TONIC_BARE" ]; then
    echo "==> building the bare tonic server into $PEER_TARGET" >&2
    cargo build --release --locked --quiet --manifest-path "$PEER/Cargo.toml" --target-dir "$PEER_TARGET"
  fi
fi
slidegate_binary
bench_rules "$WORK/bench.yaml"

# measure SERVER CASE: instructions per call, and the counts on stderr.
measure() {
  local server=$1 case=$2 grpc out pid json requests errors dump ir
  grpc=$(free_port)
  out="$WORK/callgrind.$server.$case"
  if [ "$server" = bare ]; then
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$TONIC_BARE" "127.0.0.1:$grpc" >"$WORK/serve.log" 2>&1 &
  else
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$SLIDEGATE" serve --store memory --config "$WORK/bench.yaml" \
      --http-addr 127.0.0.1:0 --grpc-addr "127.0.0.1:$grpc" >"$WORK/serve.log" 2>&1 &
  fi
  pid=$!
  PIDS+=("$pid")
  # Under valgrind a server takes a while to listen.
  wait_port "$grpc" 60
  "$SLIDEGATE" bench --target "grpc://127.0.0.1:$grpc" --op "$case" --keys "$KEYS" \
    --concurrency "$CONNECTIONS" --duration 2s --json >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  json=$("$SLIDEGATE" bench --target "grpc://127.0.0.1:$grpc" --op "$case" --keys "$KEYS" \
    --concurrency "$CONNECTIONS" --duration "${SECONDS_PER_RUN}s" --json)
  callgrind_control -d "$pid" >/dev/null 2>&1
  requests=$(echo "$json" | sed -n 's/.*"requests":\([0-9]*\).*/\1/p')
  errors=$(echo "$json" | sed -n 's/.*"errors":\([0-9]*\).*/\1/p')
  [ "$errors" = 0 ] || { echo "${0##*/}: $server $case: $errors errors" >&2; exit 1; }
  # The dump made by -d: the file with the highest part number.
  dump=$(ls -v "$out".* 2>/dev/null | tail -1)
  ir=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$dump" | head -1)
  [ -n "$ir" ] || ir=$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$dump" | head -1)
  echo "${0##*/}: $server $case: $requests calls, $ir instructions (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  awk -v i="$ir" -v n="$requests" 'BEGIN { printf "%.0f", i / n }'
}

echo "| case | bare tonic instructions/call | slidegate instructions/call | slidegate − bare | slidegate / bare |"
echo "|---|---|---|---|---|"
for case in health should-rate-limit; do
  bare=$(measure bare "$case")
  ours=$(measure slidegate "$case")
  awk -v c="$case" -v a="$bare" -v b="$ours" \
    'BEGIN { printf "| %s | %d | %d | %d | %.3f |\n", c, a, b, b - a, b / a }'
done
