#!/usr/bin/env bash
# Runtime limits: how long a change takes to reach every server, and what
# the per-key limits cost in memory.
#
#   scripts/bench-runtime-limits.sh [BINARY]   (default target/release/slidegate)
#
# 1. Reach: three `slidegate serve` on one local redis-server (started and
#    stopped by this script). CHANGES times, a new limit for one key is
#    PUT to the first server (a different server each time would change
#    nothing: every server reads Redis); from the PUT's answer, each
#    server's GET /v1/keys/{key}/limit (which reads the table the
#    server's decisions use, not Redis) is polled until it names the new
#    version. Prints the median and max over the changes of the time for
#    the slowest of the three servers to see it.
# 2. Memory: one server on the memory store (limits in memory only);
#    its RSS before and after KEYS per-key limits of one rule each are
#    PUT, over one connection; prints the difference per key and per
#    100k keys.
#
# Needs redis-server, curl and python3. Environment: CHANGES (default
# 100), KEYS (default 100000).
set -euo pipefail
BINARY=${1:-target/release/slidegate}
CHANGES=${CHANGES:-100}
KEYS=${KEYS:-100000}
TOKEN=bench-runtime-limits-token
for tool in redis-server curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-runtime-limits: $tool is not installed" >&2; exit 1; }
done
[ -x "$BINARY" ] || { echo "bench-runtime-limits: no binary at $BINARY (cargo build --release)" >&2; exit 1; }
# start_work, bench_rules, start_redis.
# shellcheck source=lib/run.sh
source "$(dirname "$0")/lib/run.sh"
start_work

# free_port, wait_port.
# shellcheck source=scripts/lib/ports.sh
source "$(dirname "$0")/lib/ports.sh"

serve() { # serve STORE_URL LOG: starts a server, prints its HTTP port
  local http grpc
  http=$(free_port)
  grpc=$(free_port)
  "$BINARY" serve --store "$1" --admin-token "$TOKEN" \
    --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$grpc" >"$2" 2>&1 &
  PIDS+=($!)
  wait_port "$http" 20
  echo "$http"
}

# 1. Reach.
start_redis
PORTS=()
for i in 1 2 3; do
  # Not in $(...): the server's pid must reach PIDS in this shell.
  serve "$REDIS" "$WORK/serve.$i.log" >"$WORK/port.$i"
  PORTS+=("$(cat "$WORK/port.$i")")
done
echo "bench-runtime-limits: $CHANGES changes, three servers on one redis-server (load $(cut -d' ' -f1 /proc/loadavg))" >&2
python3 - "$TOKEN" "$CHANGES" "${PORTS[@]}" <<'PY'
import http.client, json, statistics, sys, time
token, changes, ports = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
auth = {"authorization": "Bearer " + token, "content-type": "application/json"}
conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=5) for p in ports]
def call(conn, method, path, body=None):
    conn.request(method, path, body=body, headers=auth)
    reply = conn.getresponse()
    return reply.status, reply.read()
reach = []
for i in range(changes):
    body = json.dumps({"rules": [{"limit": 100 + i, "window_ms": 60000}]})
    status, answer = call(conns[0], "PUT", "/v1/keys/tenant:reach/limit", body)
    assert status == 200, (status, answer)
    put_at = time.monotonic()
    version = json.loads(answer)["version"]
    waiting = set(range(len(conns)))
    while waiting:
        if time.monotonic() - put_at > 5:
            sys.exit(f"change {i}: servers {sorted(waiting)} did not see version {version} within 5 s")
        for s in sorted(waiting):
            status, seen = call(conns[s], "GET", "/v1/keys/tenant:reach/limit")
            if status == 200 and json.loads(seen)["version"] >= version:
                waiting.discard(s)
    reach.append((time.monotonic() - put_at) * 1000)
reach.sort()
print(f"| reach of a change, three servers on one Redis ({changes} changes) | median {statistics.median(reach):.2f} ms | p90 {reach[int(len(reach) * 0.9)]:.2f} ms | max {reach[-1]:.2f} ms |")
PY
for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
wait 2>/dev/null || true
PIDS=()

# 2. Memory: KEYS limits in all (the default --max-runtime-keys is 100k).
serve memory "$WORK/serve.memory.log" >"$WORK/port.memory"
PORT=$(cat "$WORK/port.memory")
SERVER=${PIDS[0]}
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$SERVER/status"; }
# A first limit, so that what is made once (the table, the first shard)
# is in the baseline.
curl -sf -X PUT -H "authorization: Bearer $TOKEN" -H "content-type: application/json" \
  --data-binary '{"rules":[{"limit":100,"window_ms":60000}]}' \
  "http://127.0.0.1:$PORT/v1/keys/tenant:first/limit" >/dev/null
before=$(rss)
# One curl for every key (one connection), not one process each.
for ((i = 1; i < KEYS; i++)); do
  echo "url = \"http://127.0.0.1:$PORT/v1/keys/tenant:$i/limit\""
  echo 'output = "/dev/null"'
done >"$WORK/limits.curl"
start=$(date +%s.%N)
curl -sf -X PUT -H "authorization: Bearer $TOKEN" -H "content-type: application/json" \
  --data-binary '{"rules":[{"limit":100,"window_ms":60000}]}' -K "$WORK/limits.curl"
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
keys=$(curl -sf -H "authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/readyz" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["runtime_limits"]["keys"])')
[ "$keys" -ge "$KEYS" ] || { echo "bench-runtime-limits: the server holds $keys limits, not $KEYS" >&2; exit 1; }
after=$(rss)
awk -v b="$before" -v a="$after" -v n="$((KEYS - 1))" -v t="$took" 'BEGIN {
  printf "| memory of %d per-key limits (memory store) | RSS %d -> %d KiB | %.0f bytes a key | %.1f MiB per 100k keys | PUTs took %.1f s |\n",
    n, b, a, (a - b) * 1024 / n, (a - b) * 100000 / n / 1024, t }'
