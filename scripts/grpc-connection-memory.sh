#!/usr/bin/env bash
# What an open gRPC connection costs the server: `slidegate serve` on
# loopback, CONNECTIONS connections opened to its gRPC port, each sending
# the HTTP/2 preface and an empty SETTINGS frame and nothing more (the
# server serves each one, waiting for its first call); the server's
# resident memory (VmRSS) before and after, per connection. Run it on two
# binaries to compare them (SLIDEGATE=...).
#
#   scripts/grpc-connection-memory.sh
#
# Environment: CONNECTIONS (default 1000), SLIDEGATE (a binary to measure
# instead of building this tree's).
set -euo pipefail
CONNECTIONS=${CONNECTIONS:-1000}
cd "$(dirname "$0")/.."
# need_tools, slidegate_binary, start_work.
# shellcheck source=scripts/lib/run.sh
source scripts/lib/run.sh
slidegate_binary
start_work
# free_port, wait_port.
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh

ulimit -n $((CONNECTIONS + 256))
http=$(free_port)
grpc=$(free_port)
# Deadlines and caps past the run: every connection stays open (a binary
# from before --max-connections-per-ip has no cap per address).
cap=$((CONNECTIONS + 16))
flags=(--max-connections "$cap" --header-timeout 10m --idle-timeout 10m)
help=$("$SLIDEGATE" serve --help)
[[ $help == *--max-connections-per-ip* ]] && flags+=(--max-connections-per-ip "$cap")
"$SLIDEGATE" serve --store memory --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$grpc" \
  "${flags[@]}" >"$WORK/serve.log" 2>&1 &
pid=$!
PIDS+=("$pid")
wait_port "$grpc"
sleep 1
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }
before=$(rss)
for _ in $(seq "$CONNECTIONS"); do
  exec {fd}<>"/dev/tcp/127.0.0.1/$grpc"
  printf 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0' >&"$fd"
done
sleep 3
after=$(rss)
echo "$SLIDEGATE: VmRSS $before KiB, $after KiB with $CONNECTIONS connections open:" \
  "$(((after - before) * 1024 / CONNECTIONS)) bytes per connection"
