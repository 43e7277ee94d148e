#!/usr/bin/env bash
# A first look at the avro-orders example: sluice on the embedded Kafka (in-process) and an
# SQLite file, ORDERS orders produced in Avro through the Schema Registry at
# $SCHEMA_REGISTRY_URL, then every row and the dead letter checked against the topic.
#
#   SCHEMA_REGISTRY_URL=http://127.0.0.1:8081 examples/avro-orders/run.sh [ORDERS]
#                                                    (default: 1000 orders)
#
# SCHEMA_REGISTRY_URL is required: a Schema Registry cannot be embedded (README.md says how
# to start one). DATABASE_URL writes to another database instead (postgres://, mysql://):
# the table `orders` there must not exist yet. SLUICE names a built sluice binary (else:
# cargo build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
orders=${1:-1000}
how="start one and point SCHEMA_REGISTRY_URL at it, for example Redpanda's dev container
(a broker and a registry in one):
  docker run -d -p 8081:8081 docker.redpanda.com/redpandadata/redpanda redpanda start --mode dev-container
  export SCHEMA_REGISTRY_URL=http://127.0.0.1:8081
or Confluent's confluentinc/cp-schema-registry, or Karapace (both keep their schemas in a
Kafka topic: give them a broker). See examples/avro-orders/README.md."
if [ -z "${SCHEMA_REGISTRY_URL:-}" ]; then
  echo "run.sh: SCHEMA_REGISTRY_URL is not set: this example's producer registers its Avro schemas with a Schema Registry, and sluice reads them from it; $how" >&2
  exit 2
fi
python=$("$root/examples/lib/python.sh")
# The registry answers GET /subjects (a JSON list) when it is up.
if ! answer=$("$python" - "$SCHEMA_REGISTRY_URL" 2>&1 <<'EOF'
import json, sys, urllib.request
url = sys.argv[1].rstrip("/") + "/subjects"
try:
    with urllib.request.urlopen(url, timeout=5) as response:
        if not isinstance(json.load(response), list):
            sys.exit(f"GET {url} did not answer a list of subjects: is it a Schema Registry?")
except Exception as e:
    sys.exit(f"GET {url}: {e}")
EOF
); then
  echo "run.sh: the Schema Registry at SCHEMA_REGISTRY_URL=$SCHEMA_REGISTRY_URL does not answer ($answer); $how" >&2
  exit 2
fi
if [ -z "${SLUICE:-}" ]; then
  (cd "$root" && cargo build --quiet --bin sluice)
fi
sluice=${SLUICE:-$root/target/debug/sluice}
work=$(mktemp -d)
export DATABASE_URL=${DATABASE_URL:-sqlite://$work/avro-orders.db}
# shellcheck source=../lib/embedded.sh
. "$root/examples/lib/embedded.sh"
trap 'kill "${pid:-}" 2>/dev/null || true' EXIT
start_sluice "$here/connectors.yaml"
wait_assigned 2
echo "run.sh: sluice runs on the embedded Kafka at $brokers, schemas from $SCHEMA_REGISTRY_URL, into $DATABASE_URL"

"$python" "$here/produce.py" --brokers "$brokers" --registry "$SCHEMA_REGISTRY_URL" --orders "$orders"
status=0
"$python" "$here/check.py" --brokers "$brokers" --registry "$SCHEMA_REGISTRY_URL" \
  --url "$DATABASE_URL" --wait 120 || status=$?
stop_sluice || status=$?
if [ "$status" -ne 0 ]; then show_log; else rm -rf "$work"; fi
exit "$status"
