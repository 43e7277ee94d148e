#!/usr/bin/env python3
"""Answers the article's questions about the words table (queries/<database>.sql, then
queries/common.sql):
throughput, produce-to-insert latency, duplicates, missing and out-of-sequence events.

    report.py                      # the table at DATABASE_URL, as it is now
    report.py --expect 20000 --wait 120
                                   # wait for 20,000 events, then check: each once, none missing

With --expect, the exit code says whether the table holds exactly the events 0..N-1.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import exlib  # noqa: E402


def statements(name):
    """(title, sql) of each query of queries/NAME.sql: blocks after a `-- title` line."""
    with open(os.path.join(HERE, "queries", f"{name}.sql")) as f:
        text = f.read()
    out = []
    for block in text.split("\n\n"):
        lines = [line for line in block.strip().splitlines() if line.strip()]
        if not lines or not any(not line.startswith("--") for line in lines):
            continue
        title = lines[0][2:].strip() if lines[0].startswith("--") else ""
        sql = "\n".join(line for line in lines if not line.startswith("--")).rstrip(";")
        out.append((title, sql))
    return out


def table(header, rows):
    cells = [[str(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    line = lambda values: "  ".join(v.rjust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in cells])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=exlib.database_url("sqlite://word-events.db"))
    parser.add_argument("--expect", type=int, help="events produced: uids 0..N-1")
    parser.add_argument("--wait", type=float, default=0, help="seconds to wait for --expect events")
    args = parser.parse_args()

    conn, dialect = exlib.connect(args.url)
    if args.expect is not None and args.wait > 0:
        def seen():
            try:
                return exlib.query(conn, "SELECT COUNT(DISTINCT event_uid) FROM words")[0][0]
            except Exception:  # the table is created when sluice starts
                return 0

        exlib.wait_until(lambda: seen() >= args.expect, args.wait)
        time.sleep(2)  # a duplicate would land after the last event: give it the time

    answers = {}
    for title, sql in statements(dialect) + statements("common"):
        cur = conn.cursor()
        cur.execute(sql)
        header = [d[0] for d in cur.description]
        rows = cur.fetchall()
        cur.close()
        print(f"-- {title}\n{table(header, rows)}\n")
        if len(rows) == 1 and len(header) <= 2:
            answers.update(zip(header, rows[0]))
    events = int(answers.get("events") or 0)
    duplicates = int(answers.get("duplicates") or 0)
    missing = int(answers.get("missing") or 0)
    out_of_sequence = int(answers.get("out_of_sequence") or 0)
    print(f"report: {events} rows, {duplicates} duplicates, {missing} missing, "
          f"{out_of_sequence} out of sequence")
    if args.expect is None:
        return
    (distinct, low, high) = exlib.query(
        conn, "SELECT COUNT(DISTINCT event_uid), MIN(event_uid), MAX(event_uid) FROM words")[0]
    exact = (events == args.expect and distinct == args.expect and duplicates == 0
             and (args.expect == 0 or (low == 0 and high == args.expect - 1)))
    if exact:
        print(f"report: VERDICT: exactly once: all {args.expect} events, each once")
    else:
        print(f"report: VERDICT: FAILED: expected events 0..{args.expect - 1} once each, "
              f"found {events} rows of {distinct} distinct uids ({low}..{high})")
        sys.exit(1)


if __name__ == "__main__":
    main()
