"""What the examples' scripts share: a database connection from a sink URL (the one in
connectors.yaml), and a Kafka producer and reader from confluent-kafka."""

import os
import sqlite3
import sys
import urllib.parse


def connect(url):
    """A DB-API connection for a sluice sink URL, and its dialect: postgres, mysql, sqlite."""
    scheme = url.split("://", 1)[0]
    if scheme in ("postgres", "postgresql"):
        import psycopg

        return psycopg.connect(url, autocommit=True), "postgres"
    if scheme in ("mysql", "mariadb"):
        import pymysql

        parts = urllib.parse.urlsplit(url)
        return (
            pymysql.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 3306,
                user=urllib.parse.unquote(parts.username or "root"),
                password=urllib.parse.unquote(parts.password or ""),
                database=parts.path.lstrip("/"),
                autocommit=True,
            ),
            "mysql",
        )
    if scheme == "sqlite":
        path = url[len("sqlite://"):].split("?", 1)[0]
        return sqlite3.connect(path, isolation_level=None), "sqlite"
    sys.exit(f"unsupported database URL {url!r}: use postgres://, mysql:// or sqlite://")


def database_url(default):
    """DATABASE_URL, as connectors.yaml reads it, or the example's default."""
    return os.environ.get("DATABASE_URL") or default


def kafka_config(brokers, extra):
    """librdkafka properties: bootstrap servers and each `-X key=value`."""
    config = {"bootstrap.servers": brokers}
    for item in extra or []:
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"-X {item!r}: write key=value")
        config[key] = value
    return config


class Sender:
    """A confluent-kafka producer that waits when its queue is full and counts failed
    deliveries; `finish` flushes and exits with the failures, if any."""

    def __init__(self, config):
        from confluent_kafka import Producer

        self.producer = Producer(config)
        self.failed = []

    def _delivered(self, err, _msg):
        if err is not None:
            self.failed.append(err)

    def send(self, topic, key, value, headers=None):
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers,
                                      on_delivery=self._delivered)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def finish(self, timeout=120):
        remaining = self.producer.flush(timeout)
        if self.failed or remaining:
            sys.exit(f"produce: {len(self.failed)} records failed, {remaining} not delivered: "
                     f"{self.failed[:3]}")


def wait_until(ready, seconds):
    """Calls `ready()` every half second until it is true or `seconds` pass; its last answer."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        answer = ready()
        if answer or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


def query(conn, sql, params=()):
    """All rows of one statement."""
    cur = conn.cursor()
    cur.execute(sql, params)
    rows = cur.fetchall() if cur.description else []
    cur.close()
    return rows


def read_topic(config, topic, quiet=3.0, timeout=30.0):
    """Every record of `topic` from its start, read until none has come for `quiet`
    seconds, without a consumer group (nothing is committed: run it as often as you
    like). Run it once the producer is done."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": "sluice-example-reader", "enable.auto.commit": False})
    metadata = consumer.list_topics(topic, timeout=timeout)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        sys.exit(f"topic {topic} not found")
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    records = []
    while True:
        msg = consumer.poll(quiet if records else timeout)
        if msg is None:
            break
        if msg.error():
            sys.exit(f"reading {topic}: {msg.error()}")
        records.append(msg)
    consumer.close()
    return records
