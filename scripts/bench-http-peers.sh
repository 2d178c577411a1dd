#!/usr/bin/env bash
# slidegate's HTTP path beside its peers on the same framework, under
# the same wrk load, in interleaved rounds (every server sees the same
# machine), on 127.0.0.1 only:
#
#   acquire       slidegate POST /v1/acquire (memory store), 100 per 1 s
#   healthz       slidegate GET /healthz
#   throttlecrab  throttlecrab-server POST /throttle (axum, GCRA, memory),
#                 a burst of 100 and 100 per 1 s
#   axum-hello    a bare axum::serve hello-world (examples/axum_hello.rs)
#
# each with 1 key and with KEYS random keys (the key cells matter to the
# two rate limiters only; healthz and axum-hello run once per round).
# Prints the median req/s and its range over the rounds; the server's CPU
# per request (utime + stime of its process from /proc/PID/stat over the
# run, divided by the requests wrk counted: what a request costs the
# server, whatever the load client manages) and of it the user time (the
# server's own code; the rest is the kernel's socket work, about the same
# for every server); wrk's own CPU per request (a POST with a key drawn
# by wrk's Lua costs the client more than a plain GET: with client and
# server on the same cores, req/s falls with it); and the ratios the path
# is held to. CPU per request is the figure to trust on a busy machine;
# req/s also measures the load client.
#
#   scripts/bench-http-peers.sh
#
# Needs wrk (Debian: apt-get install wrk). throttlecrab-server comes from
# THROTTLECRAB (a path), else PATH, else `cargo install
# throttlecrab-server` into a temporary root (needs protoc: Debian's
# protobuf-compiler). Environment: ROUNDS (default 5), SECONDS_PER_RUN
# (default 5), CONNECTIONS (default 64), KEYS (default 10000), SLIDEGATE
# and AXUM_HELLO (binaries to measure instead of building this tree's;
# AXUM_HELLO=skip leaves the hello-world out, as building the example
# builds the crate's dev-dependencies too).
#
# INSTRUCTIONS=1 runs every server under valgrind's callgrind instead and
# gives instructions per request where the CPU column was (counters zeroed
# after a 1 s warm-up of each cell, dumped after its run; rounds default to
# 1, connections to 8): the same load for all four servers, repeatable
# whatever else runs on the machine. Its req/s are valgrind's, not a figure.
set -euo pipefail
INSTRUCTIONS=${INSTRUCTIONS:-}
if [ -n "$INSTRUCTIONS" ]; then
  ROUNDS=${ROUNDS:-1}
  CONNECTIONS=${CONNECTIONS:-8}
fi
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-10000}
cd "$(dirname "$0")/.."
# need_tools, slidegate_binary, start_work, launch, instructions.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
# free_port, wait_port, cpu_ticks.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh
# median, range.
# shellcheck source=scripts/lib/stats.sh
source scripts/lib/stats.sh
command -v wrk >/dev/null || {
  echo "${0##*/}: wrk is missing (Debian: apt-get install wrk)" >&2
  exit 1
}
[ -z "$INSTRUCTIONS" ] || need_tools valgrind callgrind_control
slidegate_binary
AXUM_HELLO=${AXUM_HELLO:-}
if [ -z "$AXUM_HELLO" ]; then
  cargo build --release --quiet -p slidegate-server --example axum_hello
  AXUM_HELLO=${CARGO_TARGET_DIR:-$(pwd)/target}/release/examples/axum_hello
fi
start_work

throttlecrab_binary

# Under valgrind a server takes a while to listen.
STARTUP=10
[ -n "$INSTRUCTIONS" ] && STARTUP=60

SG_PORT=$(free_port)
launch slidegate "$SLIDEGATE" serve --store memory --http-addr "127.0.0.1:$SG_PORT" --grpc-addr 127.0.0.1:0 \
  --max-connections 4096 >"$WORK/slidegate.log" 2>&1
SG_PID=$!
PIDS+=($!)
TC_PORT=$(free_port)
launch throttlecrab "$THROTTLECRAB" --http --http-host 127.0.0.1 --http-port "$TC_PORT" \
  --log-level error >"$WORK/throttlecrab.log" 2>&1
TC_PID=$!
PIDS+=($!)
HELLO_PORT=
if [ "$AXUM_HELLO" != skip ]; then
  HELLO_PORT=$(free_port)
  launch hello "$AXUM_HELLO" "127.0.0.1:$HELLO_PORT" >"$WORK/hello.log" 2>&1
  HELLO_PID=$!
  PIDS+=($!)
fi
for port in "$SG_PORT" "$TC_PORT" $HELLO_PORT; do wait_port "$port" "$STARTUP"; done
declare -A NAME_OF=(["$SG_PID"]=slidegate ["$TC_PID"]=throttlecrab)
[ -n "$HELLO_PORT" ] && NAME_OF[$HELLO_PID]=hello
# name_of PID: the name a server was launched under.
name_of() { echo "${NAME_OF[$1]}"; }

# post.lua: a POST of BODY to PATH, %KEY% in BODY replaced by a random key
# below KEYS (by the same key, 0, when KEYS is 1).
cat >"$WORK/post.lua" <<'LUA'
local path, body, keys = os.getenv("POST_PATH"), os.getenv("POST_BODY"), tonumber(os.getenv("POST_KEYS"))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local key = "k" .. tostring(math.random(0, keys - 1))
  return wrk.format(nil, path, nil, (body:gsub("%%KEY%%", key)))
end
LUA
SG_BODY='{"key":"%KEY%","limit":100,"window_ms":1000}'
TC_BODY='{"key":"%KEY%","max_burst":100,"count_per_period":100,"period":1,"quantity":1}'

# A decision each, to fail early on a body the server does not take.
check() {
  local status
  status=$(curl -s -o "$WORK/check.out" -w '%{http_code}' -H 'content-type: application/json' \
    --data-binary "${2//%KEY%/k0}" "$1")
  [ "$status" = 200 ] || {
    echo "${0##*/}: $1 answered $status: $(cat "$WORK/check.out")" >&2
    exit 1
  }
}
check "http://127.0.0.1:$SG_PORT/v1/acquire" "$SG_BODY"
check "http://127.0.0.1:$TC_PORT/throttle" "$TC_BODY"

TICKS=$(getconf CLK_TCK)
UNIT="us CPU"
[ -n "$INSTRUCTIONS" ] && UNIT=instructions

# run PID URL [KEYS PATH BODY]: req/s of one wrk run and the server's CPU
# microseconds per request (with INSTRUCTIONS=1, its instructions per
# request).
run() {
  local pid=$1 url=$2 keys=${3:-} before after user_before user_after out requests rps script=()
  if [ -n "$keys" ]; then
    script=(-s "$WORK/post.lua")
    export POST_KEYS=$keys POST_PATH=$4 POST_BODY=$5
  fi
  if [ -n "$INSTRUCTIONS" ]; then
    wrk -t1 -c"$CONNECTIONS" -d1s "${script[@]}" "$url" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
  fi
  before=$(cpu_ticks "$pid")
  user_before=$(user_ticks "$pid")
  # bash's `time` gives wrk's own CPU (user and system seconds).
  local TIMEFORMAT='%U %S'
  { time wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" "${script[@]}" "$url" >"$WORK/wrk.out"; } 2>"$WORK/wrk.time"
  out=$(cat "$WORK/wrk.out")
  after=$(cpu_ticks "$pid")
  user_after=$(user_ticks "$pid")
  requests=$(echo "$out" | awk '/requests in/ { print $1 }')
  rps=$(echo "$out" | awk '/^Requests\/sec/ { printf "%.0f", $2 }')
  if [ -n "$INSTRUCTIONS" ]; then
    callgrind_control -d "$pid" >/dev/null 2>&1
    echo "$rps $(awk -v i="$(instructions "$(name_of "$pid")")" -v n="$requests" 'BEGIN { printf "%.0f", i / n }') - -"
  else
    echo "$rps $(awk -v t=$((after - before)) -v hz="$TICKS" -v n="$requests" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')" \
      "$(awk -v t=$((user_after - user_before)) -v hz="$TICKS" -v n="$requests" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')" \
      "$(awk -v n="$requests" '{ printf "%.2f", ($1 + $2) * 1e6 / n }' "$WORK/wrk.time")"
  fi
}

# CASES: name, server's pid, URL, and for a POST its path and body (the
# key count comes from the cell).
CASES=(
  "acquire|$SG_PID|http://127.0.0.1:$SG_PORT|/v1/acquire|$SG_BODY"
  "throttlecrab|$TC_PID|http://127.0.0.1:$TC_PORT|/throttle|$TC_BODY"
  "healthz|$SG_PID|http://127.0.0.1:$SG_PORT/healthz||"
)
[ -n "$HELLO_PORT" ] && CASES+=("axum-hello|$HELLO_PID|http://127.0.0.1:$HELLO_PORT/||")
declare -A RPS CPU USER_CPU CLIENT_CPU
for round in $(seq "$ROUNDS"); do
  for case in "${CASES[@]}"; do
    IFS='|' read -r name pid url path body <<<"$case"
    cells=1
    [ -n "$path" ] && cells="1 $KEYS"
    for keys in $cells; do
      cell=$name
      if [ -n "$path" ]; then
        cell=$name/$keys
        read -r rps cpu user client < <(run "$pid" "$url" "$keys" "$path" "$body")
      else
        read -r rps cpu user client < <(run "$pid" "$url")
      fi
      RPS[$cell]+=" $rps"
      CPU[$cell]+=" $cpu"
      USER_CPU[$cell]+=" $user"
      CLIENT_CPU[$cell]+=" $client"
      echo "round $round, $cell: $rps req/s, $cpu $UNIT/request (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
done

echo "wrk -t1 -c$CONNECTIONS, ${SECONDS_PER_RUN}s runs, $ROUNDS interleaved rounds; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-20s %12s %24s %16s %12s %14s\n' case req/s range "server $UNIT/req" "of it user" "wrk's CPU/req"
CELLS=(acquire/1 "acquire/$KEYS" throttlecrab/1 "throttlecrab/$KEYS" healthz)
[ -n "$HELLO_PORT" ] && CELLS+=(axum-hello)
for cell in "${CELLS[@]}"; do
  user=- client=-
  if [ -z "$INSTRUCTIONS" ]; then
    user=$(median <<<"${USER_CPU[$cell]}") client=$(median <<<"${CLIENT_CPU[$cell]}")
  fi
  printf '%-20s %12s %24s %16s %12s %14s\n' "$cell" "$(median <<<"${RPS[$cell]}")" \
    "$(range %.0f <<<"${RPS[$cell]}")" "$(median <<<"${CPU[$cell]}")" "$user" "$client"
done
# ratio NAME A B GOAL: A over B (medians of req/s, or of CPU with cpu:
# of instructions with INSTRUCTIONS=1; of user CPU with user; of server
# and wrk CPU together with both).
ratio() {
  local what=$1 a=$2 b=$3 goal=$4 x y
  if [ "$what" = cpu ]; then
    x=$(median <<<"${CPU[$a]}") y=$(median <<<"${CPU[$b]}")
  elif [ "$what" = user ]; then
    x=$(median <<<"${USER_CPU[$a]}") y=$(median <<<"${USER_CPU[$b]}")
  elif [ "$what" = both ]; then
    x=$(awk -v s="$(median <<<"${CPU[$a]}")" -v c="$(median <<<"${CLIENT_CPU[$a]}")" 'BEGIN { print s + c }')
    y=$(awk -v s="$(median <<<"${CPU[$b]}")" -v c="$(median <<<"${CLIENT_CPU[$b]}")" 'BEGIN { print s + c }')
  else
    x=$(median <<<"${RPS[$a]}") y=$(median <<<"${RPS[$b]}")
  fi
  [ "$what" = cpu ] && [ -n "$INSTRUCTIONS" ] && what=instr
  awk -v a="$a" -v b="$b" -v x="$x" -v y="$y" -v w="$what" -v g="$goal" \
    'BEGIN { printf "%-4s %-20s / %-20s %6.2fx  (goal %s)\n", w, a, b, x / y, g }'
}
for keys in 1 "$KEYS"; do
  ratio req/s "acquire/$keys" "throttlecrab/$keys" ">= 1.2"
  ratio cpu "acquire/$keys" "throttlecrab/$keys" "<= 0.83"
  # The server's own code alone: the kernel's work per request (reading and
  # writing the socket) is about the same for both and dilutes the ratio.
  [ -z "$INSTRUCTIONS" ] && ratio user "acquire/$keys" "throttlecrab/$keys" "-"
done
ratio req/s healthz throttlecrab/1 ">= 1.0"
ratio req/s "acquire/$KEYS" healthz ">= 0.9"
# Server and wrk CPU per request together, healthz over acquire: the req/s
# ratio the two cells can reach when both share the cores to the full.
[ -z "$INSTRUCTIONS" ] && ratio both healthz "acquire/$KEYS" "- (server + wrk CPU, healthz over acquire)"
[ -n "$HELLO_PORT" ] && ratio cpu healthz axum-hello "as near 1 as it goes"
ratio cpu "acquire/$KEYS" healthz "-"
# The peer's own decision against a bare answer on the same framework: what
# a decision over HTTP/JSON costs beside a hello-world, for comparison with
# acquire over healthz.
[ -n "$HELLO_PORT" ] && ratio req/s "throttlecrab/$KEYS" axum-hello "- (the peer's decision over a bare answer)"
