#!/usr/bin/env bash
# Prints a Python that has what the examples need (examples/requirements.txt): $PYTHON if
# it has them, or the virtual environment target/examples-venv, made the first time (under
# a lock: tests running at once share it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
check='import confluent_kafka, confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, confluent_kafka.schema_registry.json_schema, grpc_tools, psycopg, pymysql'
if [ -n "${PYTHON:-}" ] && "$PYTHON" -c "$check" 2>/dev/null; then
  echo "$PYTHON"
  exit 0
fi
venv=$root/target/examples-venv
mkdir -p "$root/target"
(
  flock 9
  if ! "$venv/bin/python3" -c "$check" 2>/dev/null; then
    echo "examples: installing examples/requirements.txt into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/examples/requirements.txt" >&2
  fi
) 9>"$root/target/examples-venv.lock"
echo "$venv/bin/python3"
