#!/usr/bin/env bash
# Runs each fuzz target for a bounded time (default 60 s each) with
# cargo-fuzz on the nightly toolchain, growing fuzz/corpus/. A crash stops
# the run and leaves its input in fuzz/artifacts/. The corpus itself is
# replayed on stable by `scripts/test.sh` (crates/slidegate-server/tests/fuzz_corpus.rs).
#
#   scripts/fuzz.sh            # every target, 60 s each
#   scripts/fuzz.sh 300 http_body
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(rate_parser config_parser http_body grpc_request resp_frame)

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "error: fuzzing needs the nightly toolchain: rustup toolchain install nightly" >&2
  exit 1
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

cd fuzz
for target in "${targets[@]}"; do
  echo "==> fuzzing $target for ${seconds}s"
  cargo +nightly fuzz run -O "$target" -- -max_total_time="$seconds" -max_len=4096
done
echo "==> minimising the corpus"
for target in "${targets[@]}"; do
  cargo +nightly fuzz cmin -O "$target" >/dev/null
done
