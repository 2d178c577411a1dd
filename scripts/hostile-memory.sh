#!/usr/bin/env bash
# The memory figures of docs/RELIABILITY.md, "Hostile clients", measured on
# the release binary with `slidegate serve --store memory`:
#
#   1. Rules flood: `slidegate bench` on one key (bench:0) under a rule of
#      an hour for BENCH seconds, then FLOOD requests to POST /v1/acquire,
#      each with 16 new rules (10-year windows) on that same key, then the
#      bench again: on the rule held since before the flood, and on a new
#      rule. Prints the answers to the flood and the median latency of its
#      last 1,000 requests, the server's VmRSS before and after, and the
#      bench figures.
#   2. Admission flood: ADMISSIONS requests, each 16 admissions under huge
#      limits (10^12) and 10-year windows, over 4 keys, at a server started
#      with --max-memory-bytes SMALL_BUDGET, in four rounds. Prints the
#      answers and VmRSS after each round.
#
# Usage: scripts/hostile-memory.sh         (builds the release binary first)
#   BENCH=3 FLOOD=10000 ADMISSIONS=100000 SMALL_BUDGET=16777216
#   SLIDEGATE=path/to/slidegate to use a binary already built;
#   SERVE_FLAGS="..." for extra `serve` flags; NO_BUDGET=1 to start the
#   second server without --max-memory-bytes (a binary that predates it).
# Needs curl and jq.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCH=${BENCH:-3}
FLOOD=${FLOOD:-10000}
ADMISSIONS=${ADMISSIONS:-100000}
SMALL_BUDGET=${SMALL_BUDGET:-16777216}
SERVE_FLAGS=${SERVE_FLAGS:-}
TEN_YEARS_MS=315360000000

for tool in curl jq awk; do
  command -v "$tool" >/dev/null || {
    echo "error: $tool is needed (Debian/Ubuntu: apt-get install curl jq)" >&2
    exit 1
  }
done

if [ -z "${SLIDEGATE:-}" ]; then
  cargo build --release -q -p slidegate-server --bin slidegate
  SLIDEGATE="${CARGO_TARGET_DIR:-target}/release/slidegate"
fi

work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# free_port, wait_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh

serve() { # serve FLAGS...: starts the server, sets HTTP and server_pid
  HTTP="127.0.0.1:$(free_port)"
  # shellcheck disable=SC2086
  "$SLIDEGATE" serve --store memory --max-adhoc-limit 1000000000000 --max-adhoc-window 3650d --http-addr "$HTTP" --grpc-addr "127.0.0.1:$(free_port)" \
    $SERVE_FLAGS "$@" 2>"$work/serve.log" &
  server_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://$HTTP/healthz" >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "error: the server did not start" >&2
  cat "$work/serve.log" >&2
  exit 1
}

stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}

rss_mib() {
  awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$server_pid/status"
}

# requests FILE N FIRST_LIMIT STEP KEYS: a curl config of N requests of 16
# rules each, limits FIRST_LIMIT + STEP * n + 0..15, over KEYS keys
# (bench:0 when KEYS is 0).
requests() {
  awk -v n="$2" -v first="$3" -v step="$4" -v keys="$5" -v window="$TEN_YEARS_MS" \
    -v url="http://$HTTP/v1/acquire" 'BEGIN {
    for (r = 0; r < n; r++) {
      key = keys == 0 ? "bench:0" : "greedy-" (r % keys)
      rules = ""
      for (i = 0; i < 16; i++) {
        limit = sprintf("%.0f", first + step * r + i) # whole, even past 2^31
        rules = rules (i ? "," : "") "{\"limit\":" limit ",\"window_ms\":" window "}"
      }
      printf "url = \"%s\"\nheader = \"content-type: application/json\"\n", url
      # Unquoted: the JSON has no spaces, and quotes need no escaping.
      printf "data = {\"key\":\"%s\",\"rules\":[%s]}\n", key, rules
      printf "output = \"/dev/null\"\nwrite-out = \"%%{http_code} %%{time_total}\\n\"\n"
      if (r + 1 < n) print "next"
    }
  }' >"$1"
}

answers() { # answers CONFIG: sends it; prints "N x STATUS" per status and
  # the median time of the last 1,000 requests
  curl -s -K "$1" >"$work/answers"
  awk '{ print $1 }' "$work/answers" | sort | uniq -c | awk '{ printf "%s x %s, ", $1, $2 }'
  tail -n 1000 "$work/answers" | awk '{ print $2 * 1000 }' | sort -n |
    awk '{ t[NR] = $1 } END { printf "median of the last %d: %.2f ms\n", NR, t[int((NR + 1) / 2)] }'
}

bench() { # bench RATE: one connection on bench:0
  "$SLIDEGATE" bench --target "http://$HTTP" --keys 1 --concurrency 1 \
    --duration "${BENCH}s" --rate "$1" --json 2>/dev/null |
    jq -r '"p50 \(.latency_us.p50) µs, p99 \(.latency_us.p99) µs, \(.per_second | floor) req/s, \(.allowed) allowed, \(.denied) denied, \(.errors) errors"'
}

echo "== 1. rules flood: $FLOOD requests of 16 new rules on one key"
serve
echo "bench, rule held:      $(bench 1000000000/1h)"
before=$(rss_mib)
requests "$work/rules.curl" "$FLOOD" 1000 16 0
echo "flood answers: $(answers "$work/rules.curl")"
after=$(rss_mib)
echo "VmRSS: $before MiB before, $after MiB after the flood"
echo "bench, rule held:      $(bench 1000000000/1h)"
echo "bench, rule new:       $(bench 999999999/1h)"
stop

echo "== 2. admission flood: $ADMISSIONS requests of 16 admissions under 10^12/10y, 4 keys"
if [ -n "${NO_BUDGET:-}" ]; then
  serve
  echo "(no --max-memory-bytes)"
else
  serve --max-memory-bytes "$SMALL_BUDGET"
  echo "--max-memory-bytes $SMALL_BUDGET"
fi
round=$((ADMISSIONS / 4))
requests "$work/admit.curl" "$round" $((1000000000000 - 16)) 0 4
echo "VmRSS $(rss_mib) MiB at start"
for n in 1 2 3 4; do
  echo "round $n: $(answers "$work/admit.curl") VmRSS $(rss_mib) MiB"
done
stop
