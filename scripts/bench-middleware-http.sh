#!/usr/bin/env bash
# The layer's cost over real HTTP on loopback: examples/bench_server.rs
# serves one trivial axum handler with no layer, with slidegate's layer
# (memory store, sliding log) and with tower_governor, keyed by the peer
# address (1 key) or by an x-client header (10,000 keys); wrk drives each
# in turn, round after round, and the median req/s of each is printed.
#
#   scripts/bench-middleware-http.sh
#
# Needs wrk. Environment: ROUNDS (default 3), SECONDS_PER_RUN (default 5),
# CONNECTIONS (default 64).
set -euo pipefail
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-64}
command -v wrk >/dev/null || {
  echo "bench-middleware-http: wrk is missing (Debian: apt-get install wrk)" >&2
  exit 1
}
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$(pwd)/target}
cargo build --release --quiet -p slidegate --example bench_server --features tower
SERVER=$TARGET/release/examples/bench_server
WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cat >"$WORK/clients.lua" <<'LUA'
n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, { ["x-client"] = tostring(n % 10000) })
end
LUA
PORT=$((20000 + RANDOM % 20000))
declare -A RESULTS
for _ in $(seq "$ROUNDS"); do
  for key in ip header; do
    for layer in none slidegate governor; do
      "$SERVER" "$layer" "$key" "127.0.0.1:$PORT" >/dev/null 2>&1 &
      PID=$!
      for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        sleep 0.05
      done
      script=()
      [ "$key" = header ] && script=(-s "$WORK/clients.lua")
      rps=$(wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" "${script[@]}" "http://127.0.0.1:$PORT/" |
        sed -n 's/^Requests\/sec: *//p')
      RESULTS[$key,$layer]="${RESULTS[$key,$layer]:-} $rps"
      kill "$PID"
      wait "$PID" 2>/dev/null || true
      PID=
    done
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "wrk -t1 -c$CONNECTIONS, $ROUNDS rounds of ${SECONDS_PER_RUN}s, median req/s; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| keys | no layer | slidegate | tower_governor | slidegate loss | governor loss |"
echo "|---|---|---|---|---|---|"
for key in ip header; do
  none=$(echo "${RESULTS[$key,none]}" | median)
  ours=$(echo "${RESULTS[$key,slidegate]}" | median)
  gov=$(echo "${RESULTS[$key,governor]}" | median)
  name="1 (peer address)"
  [ "$key" = header ] && name="10,000 (x-client header)"
  awk -v n="$name" -v a="$none" -v b="$ours" -v c="$gov" 'BEGIN {
    printf "| %s | %.0f | %.0f | %.0f | %.1f%% | %.1f%% |\n", n, a, b, c, (1 - b / a) * 100, (1 - c / a) * 100 }'
done
