#!/usr/bin/env bash
# The one test command: formatting, lints and every test of the workspace,
# including those that start real redis-server processes.
set -euo pipefail
cd "$(dirname "$0")/.."

need_redis() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1
}

if ! need_redis; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing redis-server (Debian package) for the Redis tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "error: the tests need redis-server and redis-cli on PATH." >&2
    echo "       Debian/Ubuntu: sudo apt-get install redis-server   macOS: brew install redis" >&2
    exit 1
  fi
fi

# Tools the ops tests run: bash (the Dockerfile's health check),
# systemd-analyze (verify of the systemd unit of docs/examples) and
# script(1) (a terminal for the log colour tests). Without one, its test
# is skipped and says so; under CI=true it fails.
need_tool() { # COMMAND DEBIAN_PACKAGE WHAT
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing $2 (Debian package) for $3"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
  else
    echo "note: $1 is missing and this is not root with apt-get:" \
      "the $3 test will be skipped (and fail under CI=true)"
  fi
}
need_tool bash bash "the Dockerfile health check"
need_tool systemd-analyze systemd "systemd-analyze verify"
need_tool script bsdutils "terminal log colour"

# The proxies of the forward-auth recipes (tests/proxies.rs, docs/PROXIES.md):
# NGINX and Caddy from Debian's packages. Missing, their test is skipped
# and says so; under CI=true it fails.
need_tool nginx nginx "NGINX auth_request recipe"
need_tool caddy caddy "Caddy forward_auth recipe"

# The Redis clients of tests/resp.rs: redis-py in a virtualenv and ioredis
# in a directory of their own, under the build directory. Missing (no
# python3 -m venv, no npm), their test is skipped and says so; under
# CI=true it fails.
export SLIDEGATE_TEST_CLIENTS="${SLIDEGATE_TEST_CLIENTS:-${CARGO_TARGET_DIR:-target}/test-clients}"
case "$SLIDEGATE_TEST_CLIENTS" in /*) ;; *) SLIDEGATE_TEST_CLIENTS="$(pwd)/$SLIDEGATE_TEST_CLIENTS" ;; esac
mkdir -p "$SLIDEGATE_TEST_CLIENTS"
if [ ! -x "$SLIDEGATE_TEST_CLIENTS/venv/bin/python" ] ||
  ! "$SLIDEGATE_TEST_CLIENTS/venv/bin/python" -c 'import redis' 2>/dev/null; then
  if ! python3 -m venv "$SLIDEGATE_TEST_CLIENTS/venv" >/dev/null 2>&1 &&
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing python3-venv (Debian package) for the redis-py test"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    python3 -m venv "$SLIDEGATE_TEST_CLIENTS/venv"
  fi
  echo "==> installing redis-py (PyPI) for the RESP port test"
  "$SLIDEGATE_TEST_CLIENTS/venv/bin/pip" install -q redis ||
    echo "note: redis-py could not be installed: its test will be skipped (and fail under CI=true)"
fi
# The OpenAPI document's tools (tests/openapi.rs), from PyPI in the same
# virtualenv: openapi-spec-validator, and Schemathesis (`st`) run against
# a live server. Missing, their tests are skipped and say so; under CI=true
# they fail.
if [ -x "$SLIDEGATE_TEST_CLIENTS/venv/bin/python" ] &&
  { [ ! -x "$SLIDEGATE_TEST_CLIENTS/venv/bin/openapi-spec-validator" ] ||
    [ ! -x "$SLIDEGATE_TEST_CLIENTS/venv/bin/st" ]; }; then
  echo "==> installing openapi-spec-validator and schemathesis (PyPI) for the OpenAPI test"
  "$SLIDEGATE_TEST_CLIENTS/venv/bin/python" -m pip install -q openapi-spec-validator schemathesis ||
    echo "note: the OpenAPI tools could not be installed: their tests will be skipped (and fail under CI=true)"
fi
if [ ! -d "$SLIDEGATE_TEST_CLIENTS/node_modules/ioredis" ]; then
  need_tool npm npm "ioredis RESP port"
  echo "==> installing ioredis (npm) for the RESP port test"
  npm install --silent --no-audit --no-fund --prefix "$SLIDEGATE_TEST_CLIENTS" ioredis >/dev/null ||
    echo "note: ioredis could not be installed: its test will be skipped (and fail under CI=true)"
fi

# The status page is tested in headless Chromium (tests/ui.rs); under
# CI=true a missing browser fails that test.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing chromium (Debian package) for the status page test"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "note: chromium is missing and this is not root with apt-get:" \
      "the status page browser test will be skipped (and fail under CI=true)"
  fi
fi

# A clean checkout gains nothing from incremental builds, which would add
# several GB to the build directory.
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL=0
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The library alone, with no feature and with each one, as users build it.
for features in "" "--features http" "--features tower" "--features redis"; do
  # shellcheck disable=SC2086
  cargo clippy -p slidegate --lib $features -- -D warnings
done

echo "==> cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps

echo "==> cargo test"
cargo test --workspace --all-features

target_dir="${CARGO_TARGET_DIR:-target}"
echo "==> build directory: $(du -sh "$target_dir" 2>/dev/null | cut -f1) in $target_dir"
