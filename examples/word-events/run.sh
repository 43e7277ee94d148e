#!/usr/bin/env bash
# A first look at the word-events example: sluice on the embedded Kafka (in-process) and
# an SQLite file, COUNT word events produced at a steady pace while sluice writes them,
# then the article's questions answered for the table.
#
#   examples/word-events/run.sh [COUNT] [RATE]     (default: 10000 events, 2000 a second)
#
# DATABASE_URL writes to another database instead (postgres://, mysql://): the table
# `words` there must not exist yet. SLUICE names a built sluice binary (else: cargo build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
count=${1:-10000}
rate=${2:-2000}
if [ -z "${SLUICE:-}" ]; then
  (cd "$root" && cargo build --quiet --bin sluice)
fi
sluice=${SLUICE:-$root/target/debug/sluice}
python=$("$root/examples/lib/python.sh")
work=$(mktemp -d)
export DATABASE_URL=${DATABASE_URL:-sqlite://$work/word-events.db}
# shellcheck source=../lib/embedded.sh
. "$root/examples/lib/embedded.sh"
trap 'kill "${pid:-}" 2>/dev/null || true' EXIT
start_sluice "$here/connectors.yaml"
# The connector's two tasks join its group; on the embedded cluster that takes a few
# seconds (events produced before then would wait for it, and show as latency).
wait_assigned 2
echo "run.sh: sluice runs on the embedded Kafka at $brokers, into $DATABASE_URL"

"$python" "$here/produce.py" --brokers "$brokers" --count "$count" --rate "$rate"
status=0
"$python" "$here/report.py" --url "$DATABASE_URL" --expect "$count" --wait 120 || status=$?
stop_sluice || status=$?
if [ "$status" -ne 0 ]; then show_log; else rm -rf "$work"; fi
exit "$status"
