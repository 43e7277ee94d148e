#!/usr/bin/env bash
# Throughput figures: 100k records into each database, with baselines from the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
exec cargo bench -p sluice --bench pipeline "$@"
