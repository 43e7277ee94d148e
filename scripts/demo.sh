#!/usr/bin/env bash
# Quick start, part one: build sluice and run `sluice demo` on the embedded default
# (in-process Kafka, SQLite file sluice-demo.db, the connectors.yaml at the top).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The dev profile shares its build with scripts/test.sh (dependencies are optimised in it);
# for production, `cargo build --release -p sluice`.
exec cargo run -p sluice -- demo --config connectors.yaml "$@"
