#!/usr/bin/env bash
# A first look at the cdc-replication example: sluice on the embedded Kafka (in-process)
# and an SQLite file, a shop's change stream in Debezium's shape (three tables, ORDERS
# orders), then the replica compared with the source, row by row.
#
#   examples/cdc-replication/run.sh [ORDERS]     (default: 400 orders)
#
# DATABASE_URL writes to another database instead (postgres://, mysql://): the tables
# customers, orders and order_lines there must not exist yet. SLUICE names a built sluice
# binary (else: cargo build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
orders=${1:-400}
if [ -z "${SLUICE:-}" ]; then
  (cd "$root" && cargo build --quiet --bin sluice)
fi
sluice=${SLUICE:-$root/target/debug/sluice}
python=$("$root/examples/lib/python.sh")
work=$(mktemp -d)
export DATABASE_URL=${DATABASE_URL:-sqlite://$work/cdc-replication.db}
# shellcheck source=../lib/embedded.sh
. "$root/examples/lib/embedded.sh"
trap 'kill "${pid:-}" 2>/dev/null || true' EXIT
start_sluice "$here/connectors.yaml"
echo "run.sh: sluice runs on the embedded Kafka at $brokers, into $DATABASE_URL"

"$python" "$here/produce.py" --brokers "$brokers" --orders "$orders"
status=0
"$python" "$here/check.py" --url "$DATABASE_URL" --orders "$orders" --wait 120 || status=$?
stop_sluice || status=$?
if [ "$status" -ne 0 ]; then show_log; else rm -rf "$work"; fi
exit "$status"
