#!/usr/bin/env bash
# Quick start, part two: the whole test suite — unit tests, the plugin suites, and the
# end-to-end suites against a real Kafka-protocol broker and PostgreSQL, MariaDB, SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
t=$SECONDS
# The lints run in the build: clippy's driver compiles the workspace's own crates (every
# target, the benchmarks included) and fails the build on any warning, as
# `cargo clippy --workspace --all-targets -- -D warnings` does; the dependencies are
# compiled by rustc as before. A `cargo clippy` of its own checked every dependency a
# second time: about 750 s of CPU on two cores, beside the tests. The variables stay set
# for nextest, whose own build then finds everything built. SLUICE_TEST_LINTS=0 builds
# without the lints (and then nextest rebuilds the workspace's crates without them too).
if [ "${SLUICE_TEST_LINTS:-1}" != 0 ]; then
  RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver || rustup which clippy-driver)"
  export RUSTC_WORKSPACE_WRAPPER
  # How `cargo clippy -- -D warnings` hands its arguments to the driver.
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
cargo build --workspace --all-targets
echo "test: the build took $((SECONDS - t)) s" >&2
t=$SECONDS
# The plugins are their own workspace (built for wasm32-wasip2 by transform/build.rs);
# their unit tests are plain native tests.
cargo test --manifest-path plugins/Cargo.toml --quiet
# The Python plugin SDK's own tests, in a plain Python.
python3 -m unittest discover -q -s plugins/sdk-python/tests
# The JavaScript SDK's own tests, and the JavaScript examples' unit tests, in Node (each
# example links the SDK by its `file:` dependency; nothing comes from the registry).
node --test plugins/sdk-js/test/
for example in plugins/js/filter plugins/js/word_parse; do
  (cd "$example" && npm install --offline --no-package-lock --no-audit --no-fund --silent && node --test)
done
echo "test: the plugin, SDK and example unit tests took $((SECONDS - t)) s" >&2
# nextest prints its own total at the end.
exec cargo nextest run --workspace --no-fail-fast "$@"
