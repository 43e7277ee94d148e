#!/usr/bin/env python3
"""Writes a shop's change stream as Debezium's PostgreSQL connector would: one topic per
table (`shop.public.customers`, `shop.public.orders`, `shop.public.order_lines`), each
event in Kafka Connect's JSON envelope with its schema, keyed by the row's primary key
(with its schema), a delete followed by its tombstone. The history comes from shop.py:
the same --seed, --customers and --orders give the same history, which check.py replays.

    produce.py --brokers 127.0.0.1:9092 --customers 50 --orders 400 --seed 7
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import exlib  # noqa: E402
import shop  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--customers", type=int, default=50)
    parser.add_argument("--orders", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=float, default=0, help="changes per second (0: as fast as it goes)")
    parser.add_argument("-X", action="append", metavar="KEY=VALUE", help="a librdkafka producer property")
    args = parser.parse_args()

    changes, state = shop.history(args.seed, args.customers, args.orders)
    sender = exlib.Sender(exlib.kafka_config(args.brokers, args.X))
    started = time.monotonic()
    records = 0
    for n, change in enumerate(changes):
        key = json.dumps(change.key_json()).encode()
        sender.send(change.topic(), key, json.dumps(change.value_json()).encode())
        records += 1
        if change.op == "d":
            # Debezium's tombstone after a delete, for log compaction.
            sender.send(change.topic(), key, None)
            records += 1
        if args.rate > 0:
            ahead = (n + 1) / args.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    sender.finish()
    ops = {op: sum(1 for c in changes if c.op == op) for op in "cud"}
    print(f"produce: {len(changes)} changes ({ops['c']} creates, {ops['u']} updates, "
          f"{ops['d']} deletes) as {records} records; the source ends with "
          + ", ".join(f"{len(state[t])} {t}" for t in shop.TABLES))


if __name__ == "__main__":
    main()
