#!/usr/bin/env python3
"""Checks the orders table and its dead letters against the topic. Reads every record of
the topic (without a consumer group: run it as often as you like) and decodes it with
Confluent's own `AvroDeserializer`, schemas from the registry, not with sluice: the latest
state of each order is the row it expects (a tombstone: no row), every column exact (the
amount to the cent, the instant to the millisecond); a record that is not Avro is the
dead letter it expects (stage source, class bad_frame, the value as it arrived).

    check.py --brokers 127.0.0.1:9092 --registry http://127.0.0.1:8081 --wait 60

The exit code says whether the table and the dead letters are exactly what the topic says.
"""

import argparse
import datetime
import json
import os
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import exlib  # noqa: E402

UTC = datetime.timezone.utc
CENT = Decimal("0.01")
COLUMNS = ["order_id", "status", "amount", "currency", "placed_at", "ship_by", "coupon",
           "customer_id", "city", "country", "order_key"]


def expected_state(records, registry_url, topic):
    """The rows the topic means, by order_id, and the dead letters, by (partition, offset):
    the value as it arrived. And the records' count of each kind."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

    registry = SchemaRegistryClient({"url": registry_url})
    deserialize = AvroDeserializer(registry)
    rows, letters = {}, {}
    kinds = {"avro": 0, "tombstones": 0, "not avro": 0}
    for msg in records:  # each partition in offset order; an order's records share one
        try:
            key = deserialize(msg.key(), SerializationContext(topic, MessageField.KEY))
            value = None if msg.value() is None else deserialize(
                msg.value(), SerializationContext(topic, MessageField.VALUE))
        except SerializationError:
            kinds["not avro"] += 1
            letters[(msg.partition(), msg.offset())] = msg.value()
            continue
        if value is None:
            kinds["tombstones"] += 1
            rows.pop(key["order_id"], None)
            continue
        kinds["avro"] += 1
        rows[value["order_id"]] = (
            value["order_id"], value["status"], value["amount"], value["currency"],
            value["placed_at"], value["ship_by"], value["coupon"], value["customer"]["id"],
            value["customer"]["address"]["city"], value["customer"]["address"]["country"],
            key,
        )
    return rows, letters, kinds


def instant(v):
    """A timestamptz column as an aware datetime: PostgreSQL gives one, MySQL a naive UTC
    one, SQLite the text `YYYY-MM-DD HH:MM:SS.ffffff` (UTC)."""
    if isinstance(v, str):
        v = datetime.datetime.fromisoformat(v.replace(" ", "T").replace("Z", "+00:00"))
    return v if v.tzinfo else v.replace(tzinfo=UTC)


def day(v):
    return datetime.date.fromisoformat(v) if isinstance(v, str) else v


def exact(v):
    """A numeric column as a Decimal: PostgreSQL and MySQL give a Decimal; SQLite, which
    has no exact decimal type, the decimal's exact text."""
    return v if isinstance(v, Decimal) else Decimal(str(v))


def document(v):
    return json.loads(v) if isinstance(v, (str, bytes)) else v


def actual_rows(conn):
    rows = {}
    for r in exlib.query(conn, f"SELECT {', '.join(COLUMNS)} FROM orders"):
        (order_id, status, amount, currency, placed_at, ship_by, coupon, customer_id,
         city, country, order_key) = r
        rows[order_id] = (order_id, status, exact(amount), currency, instant(placed_at),
                          day(ship_by), coupon, customer_id, city, country, document(order_key))
    return rows


def actual_letters(conn):
    letters = {}
    for partition, offset, stage, error_class, value in exlib.query(
            conn, "SELECT source_partition, source_offset, stage, error_class, record_value "
                  "FROM orders_dead_letters WHERE connector = 'avro-orders'"):
        letters[(partition, offset)] = (stage, error_class, bytes(value) if value is not None else None)
    return letters


def differences(expected, letters, conn):
    """What differs between the database and the topic, one line each."""
    try:
        rows, dead = actual_rows(conn), actual_letters(conn)
    except Exception as e:  # the tables are created when sluice starts
        return [f"cannot read the tables yet: {e}"], {}
    lines = []
    for order_id in sorted(set(expected) | set(rows)):
        want, have = expected.get(order_id), rows.get(order_id)
        if have is None:
            lines.append(f"order {order_id}: missing from the table (want {want})")
        elif want is None:
            lines.append(f"order {order_id}: in the table, but deleted or never produced: {have}")
        elif want != have:
            wrong = [f"{c} {h!r} (want {w!r})" for c, w, h in zip(COLUMNS, want, have) if w != h]
            lines.append(f"order {order_id}: " + ", ".join(wrong))
    for where in sorted(set(letters) | set(dead)):
        want = ("source", "bad_frame", letters.get(where))
        have = dead.get(where)
        if where not in letters:
            lines.append(f"dead letter at partition {where[0]} offset {where[1]}: unexpected {have}")
        elif have != want:
            lines.append(f"dead letter at partition {where[0]} offset {where[1]}: {have} (want {want})")
    return lines, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--registry", default=os.environ.get("SCHEMA_REGISTRY_URL"),
                        help="the Schema Registry's URL (default: $SCHEMA_REGISTRY_URL)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--url", default=exlib.database_url("sqlite://avro-orders.db"))
    parser.add_argument("--wait", type=float, default=0,
                        help="seconds to wait for the database to match the topic")
    parser.add_argument("-X", action="append", metavar="KEY=VALUE", help="a librdkafka consumer property")
    args = parser.parse_args()
    if not args.registry:
        sys.exit("check: no Schema Registry: pass --registry URL or set SCHEMA_REGISTRY_URL")

    records = exlib.read_topic(exlib.kafka_config(args.brokers, args.X), args.topic)
    expected, letters, kinds = expected_state(records, args.registry, args.topic)
    conn, _ = exlib.connect(args.url)
    exlib.wait_until(lambda: not differences(expected, letters, conn)[0], args.wait)
    if args.wait > 0:
        time.sleep(2)  # a late write (a stale state over the latest) would land by now
    lines, rows = differences(expected, letters, conn)
    for line in lines[:20]:
        print(f"check: {line}")
    if len(lines) > 20:
        print(f"check: ... and {len(lines) - 20} more")

    print(f"check: {len(records)} records in {args.topic}: {kinds['avro']} Avro order states, "
          f"{kinds['tombstones']} tombstones, {kinds['not avro']} not Avro")
    for order_id in sorted(rows)[:3]:
        print("check: row " + ", ".join(f"{c}={v}" for c, v in zip(COLUMNS, rows[order_id])))
    total_want = sum((r[2] for r in expected.values()), Decimal(0)).quantize(CENT)
    total_have = sum((r[2] for r in rows.values()), Decimal(0)).quantize(CENT)
    print(f"check: table orders: {len(rows)} rows, {len(expected)} expected; amounts total "
          f"{total_have} in the table, {total_want} from the topic; "
          f"dead letters: {len(letters)} expected (bad_frame)")
    if lines or not expected:
        print(f"check: VERDICT: FAILED: {len(lines)} differences between the database and the topic")
        sys.exit(1)
    print(f"check: VERDICT: every order exact ({len(rows)} rows, each column as produced), "
          f"dead letters as expected ({len(letters)}, bad_frame)")


if __name__ == "__main__":
    main()
