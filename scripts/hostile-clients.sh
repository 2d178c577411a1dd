#!/usr/bin/env bash
# The "Hostile clients" figures of docs/RELIABILITY.md, measured on the
# release binary with its default bounds:
#
#   1. how long a half-sent request head is held (--header-timeout);
#   2. how long SIGTERM takes with a stalled request and a silent gRPC
#      connection open (--shutdown-grace);
#   3. the server's RSS while 50 gRPC streams send 4 MiB messages
#      (--grpc-max-message-bytes);
#   4. reloads counted over 2 minutes while a reader reads the rules file
#      every 100 ms.
#
# Each test asserts what its figure is about (the head closed at 10 s, exit
# 0 within the grace, every 4 MiB message refused and RSS within its
# budget, no reload counted or logged); the script exits non-zero when one
# fails.
#
# Usage: scripts/hostile-clients.sh   (builds the release binary first;
#   SLIDEGATE=path/to/slidegate to use a binary already built). About 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${SLIDEGATE:-}" ]; then
  cargo build --release -q -p slidegate-server --bin slidegate
  SLIDEGATE="${CARGO_TARGET_DIR:-target}/release/slidegate"
fi

# Each figure's test also asserts its bound: a broken bound prints the
# failure and the script exits non-zero.
SLIDEGATE_BINARY="$(realpath "$SLIDEGATE")" \
  cargo test -q -p slidegate-server --test hostile_figures -- \
  --ignored --nocapture --test-threads 1 2>&1 | grep -E -o "FIGURE.*|panicked at.*|^(assertion|RSS grew|held|exited|reloads|every).*|test result: .*"

