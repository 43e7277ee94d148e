#!/usr/bin/env bash
# The pipeline benchmark (release build): a backlog of 1M records (--records N) produced in
# lz4 batches, drained by sluice into PostgreSQL, MariaDB and SQLite, beside the baselines of
# the same run (psql \copy, a bare librdkafka drain, a per-row INSERT consumer, and, with a
# SQLite run, a bare sqlx loop into SQLite). The Avro run (`postgres insert avro 1t`) has
# its topic written by confluent_kafka's AvroSerializer, with the Python of
# examples/lib/python.sh ($PYTHON, or target/examples-venv made once). The runs
# `postgres insert word_parse in Python 1t` and `… in JavaScript 1t` build the twins of the
# Rust word_parse first (componentize-py, componentize-js: setup.sh installs them). Prints
# one table and writes it as JSON to target/bench/pipeline.json. What each column means,
# and the figures from the development machine: docs/performance.md.
#
#   scripts/bench.sh                      # everything, about 10 minutes on 2 cores
#   scripts/bench.sh --records 200000     # a smaller backlog
#   scripts/bench.sh --only "postgres insert,restart"   # runs whose names contain these
#   scripts/bench.sh --only "postgres insert json 1t,postgres insert avro 1t"   # Avro against JSON
#   scripts/bench.sh --only "postgres insert word_parse 1t,postgres insert word_parse in"   # the
#                                         # Rust plugin against its Python and JavaScript twins
#   scripts/bench.sh --rounds 3 --only "postgres insert word_parse 1t,postgres insert json 1t"
#                                         # every run three times, alternated; the ratios
#                                         # and issue 47's targets (printed last) are the
#                                         # means over the rounds
#   scripts/bench.sh --sluice path/to/sluice            # measure another build; it
#                                         # makes its own tables, so give an older one
#                                         # fresh databases (SLUICE_TEST_POSTGRES_URL,
#                                         # SLUICE_TEST_MYSQL_URL); the "keys present" run
#                                         # makes them itself, at this build's version
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
exec cargo bench -p sluice --bench pipeline -- "$@"
