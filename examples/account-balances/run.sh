#!/usr/bin/env bash
# A first look at the account-balances example: sluice on the embedded Kafka (in-process)
# and an SQLite file, COUNT transactions, then every balance recomputed from the topic and
# compared with the database.
#
#   examples/account-balances/run.sh ids [COUNT]       pattern 1: producer ids, de-duplicated
#                                                       (5 % of transactions produced twice)
#   examples/account-balances/run.sh offsets [COUNT]   pattern 2: offsets in the database
#
# DATABASE_URL writes to another database instead (postgres://, mysql://): the table
# `ledger` there must not exist yet. SLUICE names a built sluice binary (else: cargo build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pattern=${1:-ids}
count=${2:-5000}
case "$pattern" in
  ids) config=$here/connectors-ids.yaml; duplicates=0.05 ;;
  offsets) config=$here/connectors.yaml; duplicates=0 ;;
  *) echo "usage: $0 ids|offsets [COUNT]" >&2; exit 2 ;;
esac
if [ -z "${SLUICE:-}" ]; then
  (cd "$root" && cargo build --quiet --bin sluice)
fi
sluice=${SLUICE:-$root/target/debug/sluice}
python=$("$root/examples/lib/python.sh")
work=$(mktemp -d)
export DATABASE_URL=${DATABASE_URL:-sqlite://$work/account-balances.db}
# shellcheck source=../lib/embedded.sh
. "$root/examples/lib/embedded.sh"
trap 'kill "${pid:-}" 2>/dev/null || true' EXIT
start_sluice "$config"
# The connector's two tasks join its group; on the embedded cluster that takes a few
# seconds (events produced before then would wait for it, and show as latency).
wait_assigned 2
echo "run.sh: sluice runs on the embedded Kafka at $brokers, into $DATABASE_URL"

"$python" "$here/produce.py" --brokers "$brokers" --count "$count" --duplicates "$duplicates" --rate 2000
status=0
"$python" "$here/check.py" --brokers "$brokers" --url "$DATABASE_URL" --wait 120 || status=$?
stop_sluice || status=$?
if [ "$status" -ne 0 ]; then show_log; else rm -rf "$work"; fi
exit "$status"
