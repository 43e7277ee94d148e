#!/usr/bin/env bash
# Quick start, part two: the whole test suite — unit tests, the plugin suites, and the
# end-to-end suites against a real Kafka-protocol broker and PostgreSQL, MariaDB, SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
t=$SECONDS
# What the tests run (the benchmarks are left to `scripts/bench.sh`; CI's clippy checks
# that they compile).
cargo build --workspace --lib --bins --tests --examples
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
