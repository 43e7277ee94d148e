#!/usr/bin/env python3
"""Produces word events as the field writes them, `#<uid>*<word>@<produced-ms>`, keyed by
uid, at a steady pace, and prints its progress.

    produce.py --brokers 127.0.0.1:9092 --count 20000 --rate 500
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import exlib  # noqa: E402

WORDS = ["kafka", "sluice", "table", "offset", "record", "batch", "plugin", "commit"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--topic", default="words")
    parser.add_argument("--count", type=int, default=20000, help="events to produce")
    parser.add_argument("--start", type=int, default=0, help="first uid")
    parser.add_argument("--rate", type=float, default=0, help="events a second (0: as fast as possible)")
    parser.add_argument("-X", action="append", metavar="KEY=VALUE", help="a librdkafka producer property")
    args = parser.parse_args()

    # Idempotent: a retry after a lost acknowledgement does not write an event twice.
    config = {"enable.idempotence": True, "linger.ms": 5}
    config.update(exlib.kafka_config(args.brokers, args.X))
    sender = exlib.Sender(config)
    started = time.monotonic()
    last_report = started
    for i in range(args.count):
        uid = args.start + i
        value = f"#{uid}*{WORDS[uid % len(WORDS)]}@{int(time.time() * 1000)}"
        sender.send(args.topic, str(uid), value)
        if args.rate > 0:
            due = started + (i + 1) / args.rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        if time.monotonic() - last_report >= 5:
            last_report = time.monotonic()
            print(f"produce: {i + 1} of {args.count} events", flush=True)
    sender.finish()
    elapsed = time.monotonic() - started
    print(f"produce: {args.count} events (uids {args.start}..{args.start + args.count - 1}) "
          f"to {args.topic} in {elapsed:.1f} s", flush=True)


if __name__ == "__main__":
    main()
