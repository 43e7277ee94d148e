#!/usr/bin/env python3
"""Recomputes every account's balance from the topic (each transaction once, by its
tx-id header) and compares it with the `balances` view over the ledger. Reads the topic
without a consumer group: run it as often as you like.

    check.py --brokers 127.0.0.1:9092 --wait 60

The exit code says whether every balance matches.
"""

import argparse
import os
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import exlib  # noqa: E402

CENT = Decimal("0.01")


def create_view(conn, dialect):
    with open(os.path.join(HERE, "balances.sql")) as f:
        sql = "\n".join(line for line in f.read().splitlines() if not line.startswith("--"))
    if dialect == "sqlite":
        sql = sql.replace("CREATE VIEW", "CREATE VIEW IF NOT EXISTS", 1)
    else:
        sql = sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1)
    exlib.query(conn, sql)


def expected_balances(records):
    """Balances from the topic, each transaction once; and how many records were copies."""
    balances = {}
    seen = set()
    copies = 0
    for msg in records:
        tx = dict(msg.headers() or []).get("tx-id")
        if tx is not None:
            if tx in seen:
                copies += 1
                continue
            seen.add(tx)
        text = msg.value().decode()
        account, _, rest = text.partition(":")
        amount = Decimal(rest.partition("@")[0])
        balances[account] = balances.get(account, Decimal(0)) + amount
    return balances, len(records) - copies, copies


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--topic", default="transactions")
    parser.add_argument("--url", default=exlib.database_url("sqlite://account-balances.db"))
    parser.add_argument("--wait", type=float, default=0,
                        help="seconds to wait for the ledger to hold every transaction")
    parser.add_argument("-X", action="append", metavar="KEY=VALUE", help="a librdkafka consumer property")
    args = parser.parse_args()

    records = exlib.read_topic(exlib.kafka_config(args.brokers, args.X), args.topic)
    expected, transactions, copies = expected_balances(records)
    conn, dialect = exlib.connect(args.url)

    def ledger_rows():
        try:
            return exlib.query(conn, "SELECT COUNT(*) FROM ledger")[0][0]
        except Exception:  # the ledger is created when sluice starts
            return 0

    exlib.wait_until(lambda: ledger_rows() >= transactions, args.wait)
    if args.wait > 0:
        time.sleep(2)  # a copy written by mistake would land after the last transaction
    create_view(conn, dialect)
    actual = {account: (Decimal(str(balance)), count)
              for account, balance, count, _ in exlib.query(conn, "SELECT * FROM balances")}
    rows = exlib.query(conn, "SELECT COUNT(*) FROM ledger")[0][0]
    wrong = 0
    for account in sorted(set(expected) | set(actual)):
        want = expected.get(account, Decimal(0)).quantize(CENT)
        have = actual.get(account, (Decimal(0), 0))[0].quantize(CENT)
        if want != have:
            wrong += 1
            print(f"check: {account}: balance {have} in the database, {want} from the topic "
                  f"({have - want:+})")
    print(f"check: {len(records)} records in {args.topic}: {transactions} transactions and "
          f"{copies} copies; ledger: {rows} rows; {len(expected)} accounts, {wrong} wrong")
    if wrong or rows != transactions:
        print("check: VERDICT: FAILED: the balances do not match the transactions")
        sys.exit(1)
    print("check: VERDICT: every balance matches: each transaction counted once")


if __name__ == "__main__":
    main()
