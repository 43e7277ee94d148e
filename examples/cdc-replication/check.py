#!/usr/bin/env python3
"""Checks the replica against the shop's source: replays the history shop.py makes (the
same --seed, --customers and --orders as produce.py) to the source's final state, and
compares each replicated table with it row by row: every row the source has, with each
column's value; no row the source deleted; no dead letter.

    check.py --url postgres://127.0.0.1/shop --customers 50 --orders 400 --seed 7 --wait 60

The exit code says whether the replica equals the source.
"""

import argparse
import datetime
import os
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import exlib  # noqa: E402
import shop  # noqa: E402

CENT = Decimal("0.01")
COLUMNS = {
    "customers": ["id", "name", "created_at", "email"],
    "orders": ["id", "customer_id", "status", "total"],
    "order_lines": ["order_id", "line_no", "sku", "qty"],
}


def wall_clock(v):
    """A timestamp column as a naive datetime (SQLite keeps text)."""
    if v is None:
        return None
    if isinstance(v, str):
        v = datetime.datetime.fromisoformat(v.replace("Z", "").replace(" ", "T"))
    return v.replace(tzinfo=None)


def exact(v):
    return None if v is None else Decimal(str(v)).quantize(CENT)


def expected_rows(state):
    """The source's final rows, each as the tuple check compares."""
    def micros(v):
        return datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=v)

    rows = {}
    for table in shop.TABLES:
        rows[table] = {}
        for key, row in state[table].items():
            if table == "customers":
                value = (row["id"], row["name"], micros(row["created_at"]), row.get("email"))
            elif table == "orders":
                value = (row["id"], row["customer_id"], row["status"], exact(row["total"]))
            else:
                value = (row["order_id"], row["line_no"], row["sku"], row["qty"])
            rows[table][key] = value
    return rows


def actual_rows(conn, table):
    rows = {}
    for r in exlib.query(conn, f"SELECT {', '.join(COLUMNS[table])} FROM {table}"):
        if table == "customers":
            value = (int(r[0]), r[1], wall_clock(r[2]), r[3])
        elif table == "orders":
            value = (int(r[0]), int(r[1]), r[2], exact(r[3]))
        else:
            value = (int(r[0]), int(r[1]), r[2], None if r[3] is None else int(r[3]))
        rows[tuple(value[:len(shop.KEYS[table])])] = value
    return rows


def dead_letters(conn):
    try:
        return exlib.query(conn, "SELECT source_topic, source_offset, error_class, error_message "
                                 "FROM shop_dead_letters")
    except Exception:  # created at sluice's start
        return []


def differences(expected, conn):
    lines = []
    counts = {}
    for table in shop.TABLES:
        try:
            have = actual_rows(conn, table)
        except Exception as e:  # created when a batch first names it
            lines.append(f"{table}: cannot be read yet ({e})")
            continue
        counts[table] = len(have)
        want = expected[table]
        for key in sorted(set(want) | set(have)):
            w, h = want.get(key), have.get(key)
            if h is None:
                lines.append(f"{table} {key}: missing from the replica (want {w})")
            elif w is None:
                lines.append(f"{table} {key}: in the replica, but not in the source: {h}")
            elif w != h:
                wrong = [f"{c} {hv!r} (want {wv!r})" for c, wv, hv in zip(COLUMNS[table], w, h) if wv != hv]
                lines.append(f"{table} {key}: " + ", ".join(wrong))
    for letter in dead_letters(conn):
        lines.append(f"dead letter: {letter}")
    return lines, counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=exlib.database_url("sqlite://cdc-replication.db"))
    parser.add_argument("--customers", type=int, default=50)
    parser.add_argument("--orders", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--wait", type=float, default=0,
                        help="seconds to wait for the replica to match the source")
    args = parser.parse_args()

    changes, state = shop.history(args.seed, args.customers, args.orders)
    expected = expected_rows(state)
    conn, _ = exlib.connect(args.url)
    exlib.wait_until(lambda: not differences(expected, conn)[0], args.wait)
    if args.wait > 0:
        time.sleep(2)  # a late write (an older change over a newer row) would land by now
    lines, counts = differences(expected, conn)
    for line in lines[:20]:
        print(f"check: {line}")
    if len(lines) > 20:
        print(f"check: ... and {len(lines) - 20} more")
    deleted = sum(1 for c in changes if c.op == "d")
    print(f"check: {len(changes)} source changes ({deleted} deletes); replica "
          + ", ".join(f"{t} {counts.get(t, '?')} rows (source {len(expected[t])})" for t in shop.TABLES))
    if lines:
        print(f"check: VERDICT: FAILED: {len(lines)} differences between the replica and the source")
        sys.exit(1)
    print("check: VERDICT: the replica equals the source, row by row, in every table")


if __name__ == "__main__":
    main()
