#!/usr/bin/env python3
"""Produces an order stream in Avro with Confluent's `AvroSerializer`, which registers the
schemas (order.avsc for values, order-key.avsc for keys) with the Schema Registry and
writes the Confluent wire format (magic byte 0, the schema id, the Avro datum).

Each order is placed, then most are paid and shipped, some cancelled: every state is a
new record under the same Avro key, so the table keeps the latest (an upsert). A few
orders are deleted afterwards (a tombstone: the key, no value). Halfway, one record comes
from a service that was never moved to the serializer: plain JSON, which sluice cannot
read as Avro and keeps as a dead letter.

    produce.py --brokers 127.0.0.1:9092 --registry http://127.0.0.1:8081 --orders 1000
"""

import argparse
import datetime
import json
import os
import random
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import exlib  # noqa: E402

CENT = Decimal("0.01")
UTC = datetime.timezone.utc
CITIES = [("Zürich", "CH"), ("São Paulo", "BR"), ("Kraków", "PL"), ("Osaka", "JP"),
          ("Lyon", "FR"), ("Austin", "US")]
CURRENCIES = ["CHF", "EUR", "USD", "JPY"]
# The legacy service's record: JSON where Avro is expected (its first byte, `{`, is not a
# Confluent magic byte): a dead letter of class bad_frame.
LEGACY_KEY = b'{"order_id": 900001}'
LEGACY_VALUE = b'{"order_id": 900001, "status": "PLACED", "amount": "12.50", "currency": "EUR"}'


def schema(name):
    with open(os.path.join(HERE, name)) as f:
        return f.read()


def lifecycle(rng, order_id, base):
    """The states of one order, in order: dicts as AvroSerializer takes them (Decimal for
    the decimal, an aware datetime for timestamp-millis, a date for date, None for null)."""
    city, country = CITIES[order_id % len(CITIES)]
    amount = (Decimal(rng.randrange(1, 5_000_000)) * CENT).quantize(CENT)
    # The edges first: the largest amount precision 12 holds, one cent, a credit note.
    amount = {1: Decimal("9999999999.99"), 2: Decimal("0.01"), 3: Decimal("-0.50")}.get(order_id, amount)
    placed_at = base + datetime.timedelta(milliseconds=order_id * 61_003 + rng.randrange(1000))
    order = {
        "order_id": order_id,
        "status": "PLACED",
        "amount": amount,
        "currency": CURRENCIES[order_id % len(CURRENCIES)],
        "placed_at": placed_at,
        # A leap day for order 4.
        "ship_by": datetime.date(2028, 2, 29) if order_id == 4
        else placed_at.date() + datetime.timedelta(days=rng.randrange(1, 10)),
        "coupon": None,
        "customer": {"id": 1000 + order_id % 97, "name": f"customer {order_id % 97}",
                     "address": {"city": city, "country": country}},
    }
    states = [dict(order)]
    fate = rng.random()
    if fate < 0.15:
        states.append({**order, "status": "CANCELLED"})
        return states
    if fate < 0.9:
        paid = {**order, "status": "PAID"}
        if rng.random() < 0.3:  # paid with a coupon: 10 % off, to the cent
            paid["coupon"] = f"SAVE10-{order_id}"
            paid["amount"] = (amount * Decimal("0.9")).quantize(CENT)
        states.append(paid)
        if fate < 0.7:
            states.append({**paid, "status": "SHIPPED"})
    return states


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--registry", default=os.environ.get("SCHEMA_REGISTRY_URL"),
                        help="the Schema Registry's URL (default: $SCHEMA_REGISTRY_URL)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--orders", type=int, default=1000, help="orders to produce")
    parser.add_argument("--deletes", type=float, default=0.02,
                        help="the share of orders deleted afterwards by a tombstone (0..1)")
    parser.add_argument("--seed", type=int, default=22, help="the same orders again")
    parser.add_argument("-X", action="append", metavar="KEY=VALUE", help="a librdkafka producer property")
    args = parser.parse_args()
    if not args.registry:
        sys.exit("produce: no Schema Registry: pass --registry URL or set SCHEMA_REGISTRY_URL")

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient({"url": args.registry})
    # Subjects orders-value and orders-key (the default TopicNameStrategy).
    value_serializer = AvroSerializer(registry, schema("order.avsc"))
    key_serializer = AvroSerializer(registry, schema("order-key.avsc"))
    config = {"enable.idempotence": True, "linger.ms": 5}
    config.update(exlib.kafka_config(args.brokers, args.X))
    sender = exlib.Sender(config)

    def send(key, value):
        key_bytes = key_serializer(key, SerializationContext(args.topic, MessageField.KEY))
        value_bytes = None if value is None else value_serializer(
            value, SerializationContext(args.topic, MessageField.VALUE))
        sender.send(args.topic, key_bytes, value_bytes)

    rng = random.Random(args.seed)
    base = datetime.datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
    # Each order's states in order, interleaved with the other orders' (as a shop's many
    # orders are): at each step one of the next few open orders moves on.
    pending = [lifecycle(rng, order_id, base) for order_id in range(1, args.orders + 1)]
    # Orders 1 to 4 (the edges) are never deleted.
    deleted = {order_id for order_id in range(5, args.orders + 1) if rng.random() < args.deletes}
    started = time.monotonic()
    records = updates = tombstones = 0
    legacy_at = None
    window = []
    while pending or window:
        while pending and len(window) < 8:
            window.append(pending.pop(0))
        index = rng.randrange(len(window))
        states = window[index]
        state = states.pop(0)
        order_id = state["order_id"]
        send({"order_id": order_id}, state)
        records += 1
        if state["status"] != "PLACED":
            updates += 1
        if not states:
            window.pop(index)
            if order_id in deleted:
                send({"order_id": order_id}, None)
                records += 1
                tombstones += 1
        if legacy_at is None and order_id >= args.orders // 2:
            sender.send(args.topic, LEGACY_KEY, LEGACY_VALUE)
            legacy_at = records
            records += 1
    sender.finish()
    print(f"produce: {args.orders} orders to {args.topic} in Avro through {args.registry}: "
          f"{records} records ({args.orders} placed, {updates} updates, {tombstones} deletes, "
          f"1 not Avro) in {time.monotonic() - started:.1f} s", flush=True)
    print(f"produce: the record that is not Avro: {json.loads(LEGACY_VALUE)}", flush=True)


if __name__ == "__main__":
    main()
