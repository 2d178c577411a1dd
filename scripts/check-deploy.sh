#!/usr/bin/env bash
# The deployment recipes, as far as a machine without a container engine can
# check them: runs the Dockerfile's own build command here (a release
# build), then the deployment tests against the binary it built (the
# compose example's files and rules, the Envoy configs, the Dockerfile's
# health check against a running server, the systemd unit through
# systemd-analyze verify). What it cannot run (the image build, the compose
# stack, Envoy itself) is listed in docs/DEPLOYING.md.
set -euo pipefail
cd "$(dirname "$0")/.."

build=$(sed -n 's/^RUN \(cargo build .*\)$/\1/p' Dockerfile)
if [ -z "$build" ] || [ "$(printf '%s\n' "$build" | wc -l)" != 1 ]; then
  echo "error: the Dockerfile needs exactly one 'RUN cargo build ...' line" >&2
  exit 1
fi
echo "==> the Dockerfile's build command: $build"
$build

binary=target/release/slidegate
echo "==> $binary --version"
"$binary" --version
echo "==> $binary validate-config docs/examples/compose/rules"
"$binary" validate-config docs/examples/compose/rules

echo "==> the deployment and migration tests against $binary"
SLIDEGATE_BINARY="$PWD/$binary" cargo test -p slidegate-server --test ops -- deploy:: migrating::
