#!/usr/bin/env python3
"""Produces deposits and withdrawals, `<account>:<+|-><amount>@<produced-ms>`, keyed by
account, each with its transaction id in the header `tx-id`. With --duplicates, some
transactions are produced a second time a little later, as a producer that retries
without idempotence (or replays its input) does: the same transaction at another offset.

    produce.py --brokers 127.0.0.1:9092 --count 5000 --duplicates 0.05
"""

import argparse
import os
import random
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import exlib  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--topic", default="transactions")
    parser.add_argument("--count", type=int, default=5000, help="transactions to produce")
    parser.add_argument("--accounts", type=int, default=20)
    parser.add_argument("--duplicates", type=float, default=0.0,
                        help="the share of transactions produced twice (0..1)")
    parser.add_argument("--rate", type=float, default=0, help="records a second (0: as fast as possible)")
    parser.add_argument("--seed", type=int, help="for the same amounts again")
    parser.add_argument("-X", action="append", metavar="KEY=VALUE", help="a librdkafka producer property")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    # The article's producer: no idempotence, so a retry can write a record twice.
    config = {"enable.idempotence": False, "acks": "all", "linger.ms": 5}
    config.update(exlib.kafka_config(args.brokers, args.X))
    sender = exlib.Sender(config)

    def send(record):
        key, value, tx = record
        sender.send(args.topic, key, value, headers=[("tx-id", tx)])

    started = time.monotonic()
    sent = 0
    copies = 0
    later = []  # (due index, record): the copies, produced a few records after the original
    for i in range(args.count):
        account = f"acct-{rng.randrange(args.accounts)}"
        cents = rng.randrange(-50000, 100000)
        sign = "-" if cents < 0 else "+"
        amount = f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"
        record = (account, f"{account}:{amount}@{int(time.time() * 1000)}", str(uuid.uuid4()))
        send(record)
        sent += 1
        if rng.random() < args.duplicates:
            later.append((i + rng.randrange(1, 50), record))
        while later and later[0][0] <= i:
            send(later.pop(0)[1])
            sent += 1
            copies += 1
        if args.rate > 0:
            pause = started + sent / args.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    for _, record in later:
        send(record)
        sent += 1
        copies += 1
    sender.finish()
    print(f"produce: {args.count} transactions over {args.accounts} accounts to {args.topic}: "
          f"{sent} records, {copies} of them copies, in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
