#!/usr/bin/env python3
"""Produces the benchmark's word events in Avro, as Confluent's own serializer writes them.

  produce_avro.py BROKERS REGISTRY_URL TOPIC N [WORKERS]

Records uid 0..N-1, keyed by the uid's decimal text (as the JSON topic is, so librdkafka's
default partitioner puts each on the same partition), the value
{uid, word: "w{uid % 97}", produced_at: 1_700_000_000_000 + uid} serialized by
confluent_kafka's AvroSerializer (Confluent wire format: magic byte, schema id, datum; the
schema registered under TOPIC-value) and produced with confluent_kafka.Producer in lz4
batches of up to 10,000 records, as the benchmark's Rust producer writes the JSON topic.
WORKERS processes (default 2) each take a contiguous share of the uids. Prints the
records produced and the seconds taken.
"""

import multiprocessing
import sys
import time

SCHEMA = """{
  "type": "record", "name": "WordEvent", "namespace": "sluice.bench",
  "fields": [
    {"name": "uid", "type": "long"},
    {"name": "word", "type": "string"},
    {"name": "produced_at", "type": {"type": "long", "logicalType": "timestamp-millis"}}
  ]
}"""


def produce(brokers, registry_url, topic, first, end):
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(
        SchemaRegistryClient({"url": registry_url}),
        SCHEMA,
        conf={"auto.register.schemas": True},
    )
    producer = Producer(
        {
            "bootstrap.servers": brokers,
            "compression.codec": "lz4",
            "batch.num.messages": 10000,
            "batch.size": 1000000,
            "linger.ms": 50,
            "queue.buffering.max.messages": 1000000,
            "queue.buffering.max.kbytes": 1048576,
        }
    )
    failed = []

    def delivered(error, _message):
        if error is not None:
            failed.append(error)

    context = SerializationContext(topic, MessageField.VALUE)
    for uid in range(first, end):
        value = serializer(
            {"uid": uid, "word": f"w{uid % 97}", "produced_at": 1_700_000_000_000 + uid},
            context,
        )
        while True:
            try:
                producer.produce(topic, key=str(uid).encode(), value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if uid % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining or failed:
        raise SystemExit(f"{remaining} records not delivered, {len(failed)} failed: {failed[:3]}")


def main():
    if len(sys.argv) not in (5, 6):
        raise SystemExit(__doc__)
    brokers, registry_url, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    workers = int(sys.argv[5]) if len(sys.argv) == 6 else 2
    started = time.monotonic()
    shares = [(n * i // workers, n * (i + 1) // workers) for i in range(workers)]
    processes = [
        multiprocessing.Process(target=produce, args=(brokers, registry_url, topic, a, b))
        for a, b in shares
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    if any(p.exitcode != 0 for p in processes):
        raise SystemExit("a producer failed")
    print(f"{n} {time.monotonic() - started:.2f}")


if __name__ == "__main__":
    main()
