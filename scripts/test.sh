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

# The systemd unit of docs/examples is checked with systemd-analyze verify;
# without it that test is skipped (and says so).
if ! command -v systemd-analyze >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing systemd (Debian package) for systemd-analyze verify"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
  else
    echo "note: systemd-analyze is missing and this is not root with apt-get:" \
      "the systemd unit test will be skipped"
  fi
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
