#!/usr/bin/env python3
"""Generates a history of Debezium change events and produces it as Debezium writes it.

Reads one JSON spec on stdin (every key but "brokers"/"registry" has a default):

  {"brokers": "127.0.0.1:9092",               (not with --dry-run)
   "registry": "http://127.0.0.1:8081",       (only for "encoding": "avro")
   "encoding": "connect_json" | "avro" | "json",
   "connector": "postgresql" | "mysql",
   "server": "shop",                           (topic.prefix)
   "tables": ["customers", "orders", "order_lines", "products", "payments"],
   "topics": {"customers": "actual-topic-name"},   (optional, per table)
   "keys": 100,                                (ids 1..keys in each table)
   "events": 3000,                             (c/u/d change events in all, after the snapshot)
   "snapshot": true,                           (first an op "r" for about half the keys)
   "add_column_at": 0.5,                       (from here on every table has column "note")
   "truncate_table": null,                     (or a table: one op "t" for it, mid-history)
   "seed": 7,
   "expected": "/path/expected.json",         (optional)
   "producer": {"batch.num.messages": 1}}     (optional: more librdkafka producer settings)

"encoding": "connect_json" is Kafka Connect's JsonConverter with schemas.enable=true
({"schema": …, "payload": …} in keys and values); "json" the same converter with
schemas.enable=false (payload only); "avro" Confluent's AvroConverter (the Avro schemas it
derives from Debezium's Connect schemas, registered under <topic>-key / <topic>-value).

The records are shaped like Debezium 3.6.1.Final's: topic <server>.public.<table>
(postgresql) or <server>.inventory.<table> (mysql); key struct <prefix>.Key {id}; value
<prefix>.Envelope {before, after, source, transaction, op, ts_ms, ts_us, ts_ns} with rows
<prefix>.Value {id int64, name string, qty int32, price Decimal(10,2) bytes, updated_at
io.debezium.time.MicroTimestamp, day io.debezium.time.Date, active boolean[, note
optional string]} and source io.debezium.connector.<connector>.Source. Schema names use
the logical topic <prefix> even when "topics" renames a topic (as with a routing SMT).
Updates and deletes carry the full before image (REPLICA IDENTITY FULL,
binlog_row_image=full); each delete is followed by a tombstone (same key, null value); a
truncate has a null key (it needs skipped.operations=none on a real connector), so the
producer puts it on any partition: expected.json assumes a truncate removes only the rows
older than it (by version); with one partition per topic that is also simply "all rows".
Snapshot records have source.snapshot "first", "first_in_data_collection", "true",
"last_in_data_collection", "last" (as 2.x and later write them); streaming ones "false".

Source positions: postgresql `lsn` increases over the whole history (one WAL for all
tables), `txId` per transaction, `sequence` = '["<last commit lsn>","<lsn>"]'; snapshot
records share one lsn and txId. mysql `file` mysql-bin.000003, rotating to
mysql-bin.000004 partway (pos starts low again), `pos` increases within a file, and a
multi-row event gives its rows one pos and `row` 0, 1, 2. ts_ms (envelope and source) never
decreases. So per key the version (pg [lsn]; mysql [file number, pos, row]) strictly
increases.

Produces in history order with the default partitioner (one key, one partition), then
prints {"produced": N, "tombstones": T, "per_topic": {topic: n}}. With "expected", writes
the final state a replica must have: {"<table>": {"topic": …, "rows": {"<id>": {"id": 1,
"name": "…", "qty": 3, "price": "12.34", "updated_at": "2024-01-02 03:04:05.123456",
"day": "2024-01-02", "active": true, "note": null}}}, …, "events": {"c": n, "u": n,
"d": n, "r": n, "t": n}} ("note" only when the column is ever added; a deleted or
truncated key is absent).

  --dry-run        print each record as {"topic", "key", "value"} (one JSON line each; the
                   key/value as the converter writes them; for avro the value the
                   serializer is given, a Decimal as {"$decimal": "12.34"}), write
                   expected.json, produce nothing (the summary goes to stderr)
  --avro-schemas   print the Avro key/value schemas, per table and schema version
  --self-test      generate histories for both connectors and all encodings, replay them
                   with a reference applier (in order, and shuffled keeping the newest
                   version per key) and check the result against expected.json
"""

import argparse
import base64
import copy
import datetime
import decimal
import io
import json
import os
import random
import sys

DEBEZIUM_VERSION = "3.6.1.Final"
DATABASE = "inventory"  # source.db for both connectors (and the MySQL topic's middle part)
PG_SCHEMA = "public"
MYSQL_SERVER_ID = 223344
MYSQL_FIRST_FILE = 3  # mysql-bin.000003, then mysql-bin.000004
MYSQL_ROTATE_AT = 0.6  # the binlog rotates after this fraction of the change events
START_US = 1717200000_000000  # 2024-06-01T00:00:00Z: the snapshot's time
EPOCH = datetime.datetime(1970, 1, 1)
DAY_FIRST = datetime.date(2020, 1, 1)
DAY_SPAN = 6 * 365

DEFAULTS = {
    "brokers": None,
    "registry": None,
    "encoding": "connect_json",
    "connector": "postgresql",
    "server": "shop",
    "tables": ["customers", "orders", "order_lines", "products", "payments"],
    "topics": {},
    "keys": 100,
    "events": 3000,
    "snapshot": True,
    "add_column_at": 0.5,
    "truncate_table": None,
    "seed": 7,
    "expected": None,
    "producer": {},
}

# ---------------------------------------------------------------------------------------
# Connect schemas, in JsonConverter's form (the order of its keys too), as Debezium builds
# them. The Avro schemas are derived from these.
# ---------------------------------------------------------------------------------------

SNAPSHOT_VALUES = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"


def field(name, type_, optional=False, name_=None, version=None, parameters=None, default=None):
    """One struct field's schema as JsonConverter writes it."""
    schema = {"type": type_, "optional": optional}
    if name_ is not None:
        schema["name"] = name_
    if version is not None:
        schema["version"] = version
    if parameters is not None:
        schema["parameters"] = parameters
    if default is not None:
        schema["default"] = default
    schema["field"] = name
    return schema


def struct(name, fields, optional, version=None):
    schema = {"type": "struct", "fields": fields, "optional": optional, "name": name}
    if version is not None:
        schema["version"] = version
    return schema


def row_fields(with_note):
    """The table's columns (Debezium's Value struct), in column order."""
    fields = [
        field("id", "int64"),
        field("name", "string"),
        field("qty", "int32"),
        field(
            "price",
            "bytes",
            name_="org.apache.kafka.connect.data.Decimal",
            version=1,
            parameters={"scale": "2", "connect.decimal.precision": "10"},
        ),
        field("updated_at", "int64", name_="io.debezium.time.MicroTimestamp", version=1),
        field("day", "int32", name_="io.debezium.time.Date", version=1),
        field("active", "boolean"),
    ]
    if with_note:
        fields.append(field("note", "string", optional=True))
    return fields


def source_schema(connector):
    """io.debezium.connector.<connector>.Source, as 3.6.1's SourceInfoStructMakers build it."""
    fields = [
        field("version", "string"),
        field("connector", "string"),
        field("name", "string"),
        field("ts_ms", "int64"),
        field(
            "snapshot",
            "string",
            optional=True,
            name_="io.debezium.data.Enum",
            version=1,
            parameters={"allowed": SNAPSHOT_VALUES},
            default="false",
        ),
        field("db", "string"),
        field("sequence", "string", optional=True),
        field("ts_us", "int64", optional=True),
        field("ts_ns", "int64", optional=True),
    ]
    if connector == "postgresql":
        fields += [
            field("schema", "string"),
            field("table", "string"),
            field("txId", "int64", optional=True),
            field("lsn", "int64", optional=True),
            field("xmin", "int64", optional=True),
            field("origin", "string", optional=True),
            field("origin_lsn", "int64", optional=True),
        ]
    else:
        fields += [
            field("table", "string", optional=True),
            field("server_id", "int64"),
            field("gtid", "string", optional=True),
            field("file", "string"),
            field("pos", "int64"),
            field("row", "int32"),
            field("thread", "int64", optional=True),
            field("query", "string", optional=True),
        ]
    return struct(f"io.debezium.connector.{connector}.Source", fields, False, version=1)


def transaction_schema():
    return struct(
        "event.block",
        [field("id", "string"), field("total_order", "int64"), field("data_collection_order", "int64")],
        True,
        version=1,
    )


def key_schema(prefix):
    return struct(f"{prefix}.Key", [field("id", "int64")], False)


def envelope_schema(prefix, connector, with_note):
    row = struct(f"{prefix}.Value", row_fields(with_note), True)
    fields = [
        dict(row, field="before"),
        dict(copy.deepcopy(row), field="after"),
        dict(source_schema(connector), field="source"),
        dict(transaction_schema(), field="transaction"),
        field("op", "string"),
        field("ts_ms", "int64", optional=True),
        field("ts_us", "int64", optional=True),
        field("ts_ns", "int64", optional=True),
    ]
    return struct(f"{prefix}.Envelope", fields, False, version=2)


# ---------------------------------------------------------------------------------------
# Avro schemas, as Confluent's AvroData (AvroConverter) derives them from Connect schemas.
# ---------------------------------------------------------------------------------------

AVRO_PRIMITIVE = {
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}


def avro_type(schema, defined):
    """The Avro type of a Connect schema, without the optional union."""
    if schema["type"] == "struct":
        full = schema["name"]
        if full in defined:
            return full
        defined.add(full)
        namespace, _, name = full.rpartition(".")
        record = {"type": "record", "name": name}
        if namespace:
            record["namespace"] = namespace
        record["fields"] = [avro_field(f, defined) for f in schema["fields"]]
        if "version" in schema:
            record["connect.version"] = schema["version"]
        record["connect.name"] = full
        return record
    primitive = AVRO_PRIMITIVE[schema["type"]]
    if "name" not in schema:
        return primitive
    annotated = {"type": primitive}
    if schema["name"] == "org.apache.kafka.connect.data.Decimal":
        annotated["scale"] = int(schema["parameters"]["scale"])
        annotated["precision"] = int(schema["parameters"]["connect.decimal.precision"])
    if "version" in schema:
        annotated["connect.version"] = schema["version"]
    if "parameters" in schema:
        annotated["connect.parameters"] = dict(schema["parameters"])
    if "default" in schema:
        annotated["connect.default"] = schema["default"]
    annotated["connect.name"] = schema["name"]
    if schema["name"] == "org.apache.kafka.connect.data.Decimal":
        annotated["logicalType"] = "decimal"
    return annotated


def avro_field(schema, defined):
    out = {"name": schema["field"]}
    inner = avro_type(schema, defined)
    if not schema["optional"]:
        out["type"] = inner
    elif schema.get("default") is not None:
        out["type"] = [inner, "null"]  # a union's default must be its first branch
        out["default"] = schema["default"]
    else:
        out["type"] = ["null", inner]
        out["default"] = None
    return out


def avro_schema(connect_schema):
    return avro_type(connect_schema, set())


# ---------------------------------------------------------------------------------------
# The history: generated from the seed alone, independent of encoding and of Kafka.
# ---------------------------------------------------------------------------------------

NAMES = ["anne", "bob", "chen", "dana", "eli", "fatima", "goran", "hana", "ivo", "jun",
         "kofi", "lena", "marek", "nia", "oskar", "priya", "quinn", "rosa", "sven", "tariq"]
NOTES = ["gift wrap", "call first", "fragile", "leave at door", "priority", "ünïcødé ✓", ""]


class Record:
    """One Kafka record: the key id (None for a truncate), the envelope (None for a
    tombstone) with Python values (price a Decimal), and the row schema version in force."""

    __slots__ = ("table", "topic", "key", "value", "with_note")

    def __init__(self, table, topic, key, value, with_note):
        self.table, self.topic, self.key, self.value, self.with_note = table, topic, key, value, with_note


def load_spec(text_or_dict):
    spec = dict(DEFAULTS)
    given = json.loads(text_or_dict) if isinstance(text_or_dict, str) else dict(text_or_dict)
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        raise SystemExit(f"unknown spec keys: {sorted(unknown)}")
    spec.update(given)
    if spec["encoding"] not in ("connect_json", "avro", "json"):
        raise SystemExit(f"unknown encoding {spec['encoding']!r}")
    if spec["connector"] not in ("postgresql", "mysql"):
        raise SystemExit(f"unknown connector {spec['connector']!r}")
    if spec["truncate_table"] is not None and spec["truncate_table"] not in spec["tables"]:
        raise SystemExit(f"truncate_table {spec['truncate_table']!r} is not one of the tables")
    if not spec["tables"] or spec["keys"] < 1 or spec["events"] < 0:
        raise SystemExit("need at least one table, one key, and events >= 0")
    return spec


def logical_topic(spec, table):
    middle = PG_SCHEMA if spec["connector"] == "postgresql" else DATABASE
    return f"{spec['server']}.{middle}.{table}"


def topic_of(spec, table):
    return spec["topics"].get(table) or logical_topic(spec, table)


class Positions:
    """The connector's source positions: the WAL (postgresql) or the binlog (mysql)."""

    def __init__(self, connector, rng):
        self.connector = connector
        self.rng = rng
        # postgresql
        self.lsn = 24023128
        self.tx_id = 555
        self.last_commit = None
        # mysql
        self.file = MYSQL_FIRST_FILE
        self.pos = 154
        self.thread = None

    # -- transactions ------------------------------------------------------------------
    def begin(self):
        if self.connector == "postgresql":
            self.tx_id += self.rng.randint(1, 3)
        else:
            self.thread = self.rng.randint(7, 12)
            self.pos += 65 + 78  # GTID (or anonymous GTID) event, then QUERY "BEGIN"

    def commit(self):
        if self.connector == "postgresql":
            self.lsn += self.rng.randint(24, 96)
            self.last_commit = self.lsn  # the COMMIT record's lsn
        else:
            self.pos += 31  # XID event

    def rotate(self):
        """mysql: the binlog rotates (between transactions); pos starts low again."""
        self.file += 1  # after a ROTATE event in the old file
        self.pos = 4 + 122 + 31  # magic, FORMAT_DESCRIPTION, PREVIOUS_GTIDS

    # -- one statement: rows of one table and one kind ----------------------------------
    def statement(self, rows):
        """The source position of each row of one statement (one binlog rows event)."""
        if self.connector == "postgresql":
            out = []
            for _ in range(rows):
                self.lsn += self.rng.randint(40, 400)
                out.append({"lsn": self.lsn, "txId": self.tx_id,
                            "sequence": sequence(self.last_commit, self.lsn)})
            return out
        self.pos += 60  # TABLE_MAP event
        at = self.pos
        self.pos += 40 + rows * self.rng.randint(50, 90)  # WRITE/UPDATE/DELETE_ROWS event
        return [{"file": binlog(self.file), "pos": at, "row": i, "thread": self.thread}
                for i in range(rows)]

    def truncate(self):
        """A TRUNCATE: postgresql a TRUNCATE message in its own transaction; mysql a QUERY
        event (DDL, its own implicit transaction)."""
        if self.connector == "postgresql":
            self.tx_id += self.rng.randint(1, 3)
            self.lsn += self.rng.randint(40, 120)
            position = {"lsn": self.lsn, "txId": self.tx_id,
                        "sequence": sequence(self.last_commit, self.lsn)}
            self.commit()
            return position
        self.thread = self.rng.randint(7, 12)
        self.pos += 65
        position = {"file": binlog(self.file), "pos": self.pos, "row": 0, "thread": self.thread}
        self.pos += 90
        return position

    def snapshot(self):
        """Every snapshot record's position: the slot's / binlog's position at the snapshot."""
        if self.connector == "postgresql":
            return {"lsn": self.lsn, "txId": self.tx_id, "sequence": sequence(None, self.lsn)}
        return {"file": binlog(self.file), "pos": self.pos, "row": 0, "thread": None}


def sequence(last_commit, lsn):
    """PostgreSQL's source.sequence: a JSON array of two strings (or nulls), no spaces."""
    return json.dumps([None if last_commit is None else str(last_commit), str(lsn)], separators=(",", ":"))


def binlog(number):
    return f"mysql-bin.{number:06d}"


class Clock:
    """The database's commit time and Kafka Connect's processing time, in microseconds."""

    def __init__(self, rng):
        self.rng = rng
        self.commit_us = START_US
        self.processed_us = START_US

    def tick(self, low_us=1_000, high_us=150_000):
        self.commit_us += self.rng.randint(low_us, high_us)
        return self.commit_us

    def process(self):
        """The envelope's ts_*: a little after the commit, never going back."""
        self.processed_us = max(self.processed_us + self.rng.randint(1, 40),
                                self.commit_us + self.rng.randint(300, 8_000))
        return self.processed_us


def generate(spec):
    """The history as a list of Records, and the expected final state."""
    rng = random.Random(spec["seed"])
    connector, tables = spec["connector"], list(spec["tables"])
    positions = Positions(connector, rng)
    clock = Clock(rng)
    events, keys = spec["events"], spec["keys"]
    add_at = spec["add_column_at"]
    if add_at is None or add_at >= 1:
        add_index = None  # never
    else:
        add_index = max(0, int(add_at * events))
    note_from_start = add_index is not None and add_at <= 0
    truncate_index = events // 2 if spec["truncate_table"] is not None else None
    rotate_index = int(events * MYSQL_ROTATE_AT) if connector == "mysql" else None

    state = {t: {} for t in tables}  # table -> id -> row
    with_note = note_from_start
    counts = {"c": 0, "u": 0, "d": 0, "r": 0, "t": 0}
    records = []

    def source(table, position, ts_us, snapshot):
        common = {
            "version": DEBEZIUM_VERSION,
            "connector": connector,
            "name": spec["server"],
            "ts_ms": ts_us // 1000,
            "snapshot": snapshot,
            "db": DATABASE,
            "sequence": position.get("sequence"),
            "ts_us": ts_us,
            "ts_ns": ts_us * 1000,
        }
        if connector == "postgresql":
            common.update({
                "schema": PG_SCHEMA, "table": table, "txId": position["txId"],
                "lsn": position["lsn"], "xmin": None, "origin": None, "origin_lsn": None,
            })
        else:
            common.update({
                "table": table,
                "server_id": 0 if snapshot != "false" else MYSQL_SERVER_ID,
                "gtid": None, "file": position["file"], "pos": position["pos"],
                "row": position["row"], "thread": position["thread"], "query": None,
            })
            # MySQL's binlog timestamps: the source ts has no sub-millisecond part
            common["ts_us"] = common["ts_ms"] * 1000
            common["ts_ns"] = common["ts_ms"] * 1_000_000
        return common

    def envelope(op, before, after, src):
        done = clock.process()
        return {"before": before, "after": after, "source": src, "transaction": None,
                "op": op, "ts_ms": done // 1000, "ts_us": done,
                "ts_ns": done * 1000 + rng.randrange(1000)}

    def emit(table, key, value):
        records.append(Record(table, topic_of(spec, table), key, value, with_note))

    def new_row(key, at_us):
        row = {
            "id": key,
            "name": f"{rng.choice(NAMES)}-{key}",
            "qty": rng.randint(0, 500),
            "price": decimal.Decimal(rng.randint(1, 999_999)).scaleb(-2),
            "updated_at": at_us,
            "day": rng.randrange(DAY_SPAN) + (DAY_FIRST - EPOCH.date()).days,
            "active": rng.random() < 0.7,
        }
        if with_note:
            row["note"] = rng.choice(NOTES) if rng.random() < 0.6 else None
        return row

    def changed_row(row, at_us):
        row = dict(row)
        row["qty"] = rng.randint(0, 500)
        if rng.random() < 0.5:
            row["price"] = decimal.Decimal(rng.randint(1, 999_999)).scaleb(-2)
        if rng.random() < 0.2:
            row["name"] = f"{rng.choice(NAMES)}-{row['id']}"
        if rng.random() < 0.2:
            row["active"] = not row["active"]
        if with_note and rng.random() < 0.5:
            row["note"] = rng.choice(NOTES) if rng.random() < 0.6 else None
        row["updated_at"] = at_us
        return row

    # -- the initial snapshot (op "r") ---------------------------------------------------
    if spec["snapshot"]:
        position = positions.snapshot()
        initial = {t: [k for k in range(1, keys + 1) if rng.random() < 0.5] for t in tables}
        for t in tables:  # rows written before the snapshot, at times before it
            for k in initial[t]:
                state[t][k] = new_row(k, START_US - rng.randint(1, 90 * 86_400_000_000))
        order = [(t, k) for t in tables for k in initial[t]]
        for i, (t, k) in enumerate(order):
            first_in_table = i == 0 or order[i - 1][0] != t
            last_in_table = i == len(order) - 1 or order[i + 1][0] != t
            if i == len(order) - 1:
                marker = "last"
            elif i == 0:
                marker = "first"
            elif last_in_table:
                marker = "last_in_data_collection"
            elif first_in_table:
                marker = "first_in_data_collection"
            else:
                marker = "true"
            read_us = clock.tick(5, 400)  # the time the row was read
            emit(t, k, envelope("r", None, dict(state[t][k]), source(t, position, read_us, marker)))
            counts["r"] += 1

    # -- the change events: transactions of statements of rows ---------------------------
    done = 0  # c/u/d rows so far
    truncated = False
    rotated = False
    while done < events:
        # schema change, truncate, binlog rotation: between transactions
        if add_index is not None and not with_note and done >= add_index:
            with_note = True
            for t in tables:  # ALTER TABLE … ADD COLUMN note: existing rows get NULL
                for row in state[t].values():
                    row["note"] = None
        if truncate_index is not None and not truncated and done >= truncate_index:
            truncated = True
            t = spec["truncate_table"]
            position = positions.truncate()
            at_us = clock.tick()
            emit(t, None, envelope("t", None, None, source(t, position, at_us, "false")))
            counts["t"] += 1
            state[t].clear()
        if rotate_index is not None and not rotated and done >= rotate_index:
            rotated = True
            positions.rotate()
        # the next boundary this transaction must not cross
        bounds = [events]
        for index, passed in ((add_index, with_note), (truncate_index, truncated), (rotate_index, rotated)):
            if index is not None and not passed and index > done:
                bounds.append(index)
        limit = min(bounds)

        positions.begin()
        commit_us = clock.tick()
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
            if done >= limit:
                break
            t = rng.choice(tables)
            present = sorted(state[t])
            absent = [k for k in range(1, keys + 1) if k not in state[t]]
            op = rng.choices(("c", "u", "d"), weights=(30, 55, 15))[0]
            if op == "c" and not absent:
                op = "u"
            if op in ("u", "d") and not present:
                op = "c"
            pool = absent if op == "c" else present
            rows = 1 if rng.random() < 0.7 else rng.randint(2, 3)
            rows = min(rows, len(pool), limit - done)
            chosen = rng.sample(pool, rows)
            for k, position in zip(chosen, positions.statement(rows)):
                src = source(t, position, commit_us, "false")
                if op == "c":
                    row = new_row(k, commit_us)
                    state[t][k] = row
                    emit(t, k, envelope("c", None, dict(row), src))
                elif op == "u":
                    before = state[t][k]
                    row = changed_row(before, commit_us)
                    state[t][k] = row
                    emit(t, k, envelope("u", dict(before), dict(row), src))
                else:
                    before = state[t].pop(k)
                    emit(t, k, envelope("d", dict(before), None, src))
                    emit(t, k, None)  # the tombstone
                counts[op] += 1
                done += 1
        positions.commit()

    note_column = note_from_start or with_note
    expected = {
        t: {"topic": topic_of(spec, t),
            "rows": {str(k): expected_row(state[t][k], note_column) for k in sorted(state[t])}}
        for t in tables
    }
    expected["events"] = counts
    return records, expected


def expected_row(row, note_column):
    out = {
        "id": row["id"],
        "name": row["name"],
        "qty": row["qty"],
        "price": f"{row['price']:.2f}",
        "updated_at": micros_text(row["updated_at"]),
        "day": (EPOCH.date() + datetime.timedelta(days=row["day"])).isoformat(),
        "active": row["active"],
    }
    if note_column:
        out["note"] = row.get("note")
    return out


def micros_text(us):
    return (EPOCH + datetime.timedelta(microseconds=us)).strftime("%Y-%m-%d %H:%M:%S.%f")


# ---------------------------------------------------------------------------------------
# Encoding: what the converters write.
# ---------------------------------------------------------------------------------------


def decimal_bytes(value, scale=2):
    """Connect's Decimal: the unscaled value, big-endian two's complement, as Java's
    BigInteger.toByteArray() (the fewest bytes that hold the sign)."""
    unscaled = int(value.scaleb(scale))
    bits = (unscaled if unscaled >= 0 else ~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def json_row(row):
    if row is None:
        return None
    out = dict(row)
    out["price"] = base64.b64encode(decimal_bytes(row["price"])).decode()
    return out


def json_payload(envelope):
    """The envelope as JsonConverter writes its payload (Decimal as BASE64)."""
    out = dict(envelope)
    out["before"] = json_row(envelope["before"])
    out["after"] = json_row(envelope["after"])
    return out


def marked_payload(envelope):
    """The envelope as the Avro serializer is given it, in JSON: a Decimal as {"$decimal"}."""
    def mark(row):
        if row is None:
            return None
        return dict(row, price={"$decimal": f"{row['price']:.2f}"})
    return dict(envelope, before=mark(envelope["before"]), after=mark(envelope["after"]))


class Schemas:
    """The Connect and Avro schemas of each table, built once."""

    def __init__(self, spec):
        self.spec = spec
        self.cache = {}

    def get(self, table, with_note):
        at = (table, with_note)
        if at not in self.cache:
            prefix = logical_topic(self.spec, table)
            key = key_schema(prefix)
            value = envelope_schema(prefix, self.spec["connector"], with_note)
            self.cache[at] = {"key": key, "value": value,
                              "avro_key": avro_schema(key), "avro_value": avro_schema(value)}
        return self.cache[at]


def encoded(record, spec, schemas):
    """The record's key and value as JSON values (what --dry-run prints)."""
    encoding = spec["encoding"]
    s = schemas.get(record.table, record.with_note)
    key = value = None
    if record.key is not None:
        key = {"id": record.key}
        if encoding == "connect_json":
            key = {"schema": s["key"], "payload": key}
    if record.value is not None:
        if encoding == "avro":
            value = marked_payload(record.value)
        else:
            value = json_payload(record.value)
            if encoding == "connect_json":
                value = {"schema": s["value"], "payload": value}
    return key, value


def compact_json(value):
    """UTF-8 JSON without spaces, as JsonConverter (Jackson) writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def dry_run(spec, out):
    records, expected = generate(spec)
    schemas = Schemas(spec)
    for record in records:
        key, value = encoded(record, spec, schemas)
        out.write(json.dumps({"topic": record.topic, "key": key, "value": value},
                             ensure_ascii=False, separators=(",", ":")) + "\n")
    return records, expected


def summary(records):
    per_topic = {}
    for record in records:
        per_topic[record.topic] = per_topic.get(record.topic, 0) + 1
    tombstones = sum(1 for r in records if r.value is None)
    return {"produced": len(records), "tombstones": tombstones, "per_topic": per_topic}


def write_expected(spec, expected):
    if spec["expected"]:
        with open(spec["expected"], "w") as f:
            json.dump(expected, f, indent=1, ensure_ascii=False)
            f.write("\n")


# ---------------------------------------------------------------------------------------
# Producing.
# ---------------------------------------------------------------------------------------


def produce(spec, records):
    if not spec["brokers"]:
        raise SystemExit("the spec needs \"brokers\" (or use --dry-run)")
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    encoding = spec["encoding"]
    schemas = Schemas(spec)
    producer = Producer({
        "bootstrap.servers": spec["brokers"],
        "linger.ms": 20,
        "enable.idempotence": True,  # no reordering on retries: history order per partition
        # Extra librdkafka settings: tests against a broker that cannot serve a fetch
        # inside a multi-record batch produce one record per batch.
        **spec["producer"],
    })
    serializers = {}
    registry = None
    if encoding == "avro":
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer

        if not spec["registry"]:
            raise SystemExit("encoding avro needs \"registry\"")
        registry = SchemaRegistryClient({"url": spec["registry"]})

        def avro_serializer(table, with_note, part):
            at = (table, with_note, part)
            if at not in serializers:
                schema = schemas.get(table, with_note)["avro_" + part]
                serializers[at] = AvroSerializer(
                    registry, json.dumps(schema), conf={"auto.register.schemas": True}
                )
            return serializers[at]

    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(str(err))

    for record in records:
        if encoding == "avro":
            key = value = None
            if record.key is not None:
                key = avro_serializer(record.table, False, "key")(
                    {"id": record.key}, SerializationContext(record.topic, MessageField.KEY))
            if record.value is not None:
                value = avro_serializer(record.table, record.with_note, "value")(
                    record.value, SerializationContext(record.topic, MessageField.VALUE))
        else:
            key, value = encoded(record, spec, schemas)
            key = None if key is None else compact_json(key)
            value = None if value is None else compact_json(value)
        while True:
            try:
                producer.produce(record.topic, key=key, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.5)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise SystemExit(f"{remaining} records not delivered")
    if failures:
        raise SystemExit(f"{len(failures)} records failed: {failures[0]}")
    print(json.dumps(summary(records)))


# ---------------------------------------------------------------------------------------
# The self-test: a reference applier over the printed records.
# ---------------------------------------------------------------------------------------


def decode_row(row, encoding, note_column):
    """A row as printed, in expected.json's form."""
    if row is None:
        return None
    if encoding == "avro":
        price = decimal.Decimal(row["price"]["$decimal"])
    else:
        unscaled = int.from_bytes(base64.b64decode(row["price"]), "big", signed=True)
        price = decimal.Decimal(unscaled).scaleb(-2)
    plain = dict(row, price=price)
    if note_column:
        plain.setdefault("note", None)
    return expected_row(plain, note_column)


def version(source):
    """The source position as the sink reads it: pg [lsn]; mysql [file number, pos, row]."""
    if source["connector"] == "postgresql":
        return (source["lsn"],)
    return (int(source["file"].rsplit(".", 1)[1]), source["pos"], source["row"])


def parse_line(line, encoding, table_of):
    """(table, key id, envelope payload or None) of one printed record."""
    record = json.loads(line)
    table = table_of[record["topic"]]
    key = record["key"]
    if key is not None:
        key = key["payload"]["id"] if encoding == "connect_json" else key["id"]
    value = record["value"]
    if value is not None and encoding == "connect_json":
        value = value["payload"]
    return table, key, value


def apply(events, encoding, tables, note_column):
    """Applies (table, key, payload) in the given order, by version: c/r/u upsert if newer,
    d deletes and remembers its version, t deletes every row older than it (and remembers
    that too). Returns the tables' rows as in expected.json."""
    latest = {t: {} for t in tables}  # table -> key -> (version, row or None)
    floor = {t: None for t in tables}  # table -> newest truncate's version
    for table, key, payload in events:
        if payload is None:
            continue  # a tombstone: its delete came before it
        v = version(payload["source"])
        if payload["op"] == "t":
            if floor[table] is None or v > floor[table]:
                floor[table] = v
            continue
        current = latest[table].get(key)
        if current is not None and current[0] >= v:
            continue
        row = None if payload["op"] == "d" else decode_row(payload["after"], encoding, note_column)
        latest[table][key] = (v, row)
    return {
        t: {str(k): row for k, (v, row) in sorted(latest[t].items())
            if row is not None and (floor[t] is None or v > floor[t])}
        for t in tables
    }


def check_connect(schema, value, path="value"):
    """The value fits its Connect schema (JsonConverter's reading, strictly)."""
    if value is None:
        assert schema["optional"] or "default" in schema, f"{path}: null for a required field"
        return
    kind = schema["type"]
    if kind == "struct":
        assert isinstance(value, dict), f"{path}: not an object"
        names = [f["field"] for f in schema["fields"]]
        assert set(value) == set(names), f"{path}: fields {sorted(value)} != schema {sorted(names)}"
        for f in schema["fields"]:
            check_connect(f, value[f["field"]], f"{path}.{f['field']}")
    elif kind in ("int32", "int64"):
        bits = 31 if kind == "int32" else 63
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: not an integer"
        assert -(1 << bits) <= value < (1 << bits), f"{path}: out of {kind} range"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{path}: not a boolean"
    elif kind == "string":
        assert isinstance(value, str), f"{path}: not a string"
        if schema.get("name") == "io.debezium.data.Enum":
            assert value in schema["parameters"]["allowed"].split(","), f"{path}: {value!r} not allowed"
    elif kind == "bytes":
        base64.b64decode(value, validate=True)
    else:
        raise AssertionError(f"{path}: unexpected type {kind}")


def self_test():
    try:
        import fastavro
    except ImportError:  # the producing venv has it; without it the Avro checks are skipped
        fastavro = None
    variants = [
        {"snapshot": True, "truncate_table": "orders", "add_column_at": 0.5},
        {"snapshot": False, "truncate_table": None, "add_column_at": None},
        {"snapshot": True, "truncate_table": "customers", "add_column_at": 0},
        {"snapshot": True, "truncate_table": None, "add_column_at": 0.9, "events": 0},
    ]
    checked = 0
    for connector in ("postgresql", "mysql"):
        for encoding in ("connect_json", "json", "avro"):
            for n, variant in enumerate(variants):
                base = {"connector": connector, "encoding": encoding, "keys": 25, "events": 900,
                        "tables": ["customers", "orders", "order_lines"], "seed": 11 + n,
                        "topics": {"order_lines": f"it-{connector}-lines-{n}"}}
                spec = load_spec(dict(base, **variant))
                out = io.StringIO()
                records, expected = dry_run(spec, out)
                lines = out.getvalue().splitlines()
                assert len(lines) == len(records)
                check_history(spec, records, expected, lines, fastavro)
                checked += 1
    # determinism: the same seed gives the same bytes, another seed another history
    spec = load_spec({"events": 300, "keys": 10})
    a, b, c = io.StringIO(), io.StringIO(), io.StringIO()
    dry_run(spec, a)
    dry_run(spec, b)
    dry_run(dict(spec, seed=8), c)
    assert a.getvalue() == b.getvalue(), "the same seed gave another history"
    assert a.getvalue() != c.getvalue(), "another seed gave the same history"
    # the fixtures are JSON, and each key names the row of its value
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    for prefix, row_id in (("pg", 1), ("mysql", 1004)):
        for op in ("create", "update", "delete", "tombstone", "truncate"):
            with open(os.path.join(here, f"{prefix}_{op}.value.json")) as f:
                value = json.load(f)
            if op == "truncate":
                assert value["payload"]["op"] == "t"
                continue
            with open(os.path.join(here, f"{prefix}_{op}.key.json")) as f:
                key = json.load(f)
            assert key["payload"] == {"id": row_id}, f"{prefix}_{op}.key.json"
            if op == "tombstone":
                assert value is None
            else:
                payload = value["payload"]
                assert payload["op"] == op[0]
                assert (payload["after"] or payload["before"])["id"] == row_id
    print(f"self-test passed: {checked} histories (fastavro checks: {'on' if fastavro else 'skipped'})")


def check_history(spec, records, expected, lines, fastavro):
    encoding, connector, tables = spec["encoding"], spec["connector"], spec["tables"]
    label = f"{connector}/{encoding}/seed {spec['seed']}"
    table_of = {expected[t]["topic"]: t for t in tables}
    note_column = any("note" in row for t in tables for row in expected[t]["rows"].values()) \
        or any(r.with_note for r in records)
    events = [parse_line(line, encoding, table_of) for line in lines]

    # 1. in order, and shuffled keeping the newest version per key: the expected state
    want = {t: expected[t]["rows"] for t in tables}
    assert apply(events, encoding, tables, note_column) == want, f"{label}: in-order replay differs"
    shuffled = list(events)
    random.Random(99).shuffle(shuffled)
    assert apply(shuffled, encoding, tables, note_column) == want, f"{label}: shuffled replay differs"
    counts = {op: 0 for op in "cudrt"}
    for _, _, payload in events:
        if payload is not None:
            counts[payload["op"]] += 1
    assert counts == expected["events"], f"{label}: counts {counts} != {expected['events']}"
    assert counts["c"] + counts["u"] + counts["d"] == spec["events"]

    # 2. versions: distinct per key (so totally ordered), increasing in history order per
    # key; a truncate's version is above everything before it in its table. Ops per key
    # follow the row's life: r/c make it live, u/d need it live, d and t end it; each d is
    # followed at once by its tombstone, and the before image is the previous after.
    seen = {}
    live = {}  # (table, key) -> the row's last after image, while it exists
    for i, (table, key, payload) in enumerate(events):
        if payload is None:
            prev_table, prev_key, prev = events[i - 1]
            assert prev is not None and prev["op"] == "d" and (prev_table, prev_key) == (table, key), \
                f"{label}: a tombstone not right after its delete"
            continue
        if payload["op"] == "d":
            assert i + 1 < len(events) and events[i + 1] == (table, key, None), \
                f"{label}: a delete without its tombstone"
        v = version(payload["source"])
        op = payload["op"]
        if op == "t":
            assert all(w < v for (t, _), w in seen.items() if t == table), f"{label}: truncate not newest"
            for at in [at for at in live if at[0] == table]:
                del live[at]
            continue
        if (table, key) in seen:
            assert seen[(table, key)] < v, f"{label}: version of {table}/{key} not increasing"
        seen[(table, key)] = v
        if op in ("r", "c"):
            assert (table, key) not in live and payload["before"] is None, f"{label}: {op} of a live row"
            live[(table, key)] = payload["after"]
        else:
            assert (table, key) in live, f"{label}: {op} of {table}/{key}, which does not exist"
            before = dict(payload["before"])
            previous = dict(live[(table, key)])
            if "note" in before and "note" not in previous:  # ADD COLUMN in between
                previous["note"] = None
            assert before == previous, f"{label}: before image is not the previous row"
            if op == "u":
                live[(table, key)] = payload["after"]
            else:
                assert payload["after"] is None
                del live[(table, key)]
    assert {t: {str(k) for (tt, k) in live if tt == t} for t in tables} == \
        {t: set(want[t]) for t in tables}, f"{label}: live keys differ from expected.json"

    # 3. positions and times as the connectors write them
    sources = [p["source"] for _, _, p in events if p is not None]
    last_ms = last_src_ms = 0
    for _, _, payload in events:
        if payload is None:
            continue
        assert payload["ts_ms"] >= last_ms and payload["source"]["ts_ms"] >= last_src_ms, f"{label}: ts_ms went back"
        assert payload["ts_ms"] == payload["ts_us"] // 1000 == payload["ts_ns"] // 1_000_000
        last_ms, last_src_ms = payload["ts_ms"], payload["source"]["ts_ms"]
    snap = [s for s in sources if s["snapshot"] != "false"]
    stream = [s for s in sources if s["snapshot"] == "false"]
    if spec["snapshot"] and snap:
        assert snap[0]["snapshot"] == "first" and snap[-1]["snapshot"] == "last"
        assert len({version(s) for s in snap}) == 1, f"{label}: snapshot records at several positions"
        if stream:
            assert version(snap[0]) < version(stream[0]), f"{label}: streaming not after the snapshot"
    if connector == "postgresql":
        lsns = [s["lsn"] for s in stream]
        assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns), f"{label}: lsn not increasing"
        for s in stream:
            last_commit, lsn = json.loads(s["sequence"])
            assert lsn == str(s["lsn"]) and (last_commit is None or int(last_commit) < s["lsn"])
    else:
        files = [s["file"] for s in stream]
        if spec["events"] > 10:
            assert files[0] == "mysql-bin.000003" and files[-1] == "mysql-bin.000004", f"{label}: no rotation"
        previous = None
        for s in stream:
            here = (s["file"], s["pos"], s["row"])
            if previous is not None and previous[0] == here[0]:
                assert (here[1], here[2]) > (previous[1], previous[2]), f"{label}: pos/row going back"
                if here[1] == previous[1]:
                    assert here[2] == previous[2] + 1, f"{label}: row numbering"
            elif previous is not None:
                assert here[1] < previous[1], f"{label}: pos did not start low again"
            if previous is None or previous[1] != here[1] or previous[0] != here[0]:
                assert here[2] == 0, f"{label}: an event's rows do not start at 0"
            previous = here
        if spec["events"] > 100:
            assert any(s["row"] > 0 for s in stream), f"{label}: no multi-row event"

    # 4. deleted keys come back; the column and the truncate are where they should be
    if spec["events"] > 100:
        ops = {}
        for table, key, payload in events:
            if payload is not None and key is not None:
                ops.setdefault((table, key), []).append(payload["op"])
        assert any("d" in o and "c" in o[o.index("d"):] for o in ops.values()), f"{label}: no re-create"
    if spec["truncate_table"] is not None and spec["events"]:
        assert counts["t"] == 1
        at = next(i for i, (_, _, p) in enumerate(events) if p is not None and p["op"] == "t")
        assert events[at][1] is None and events[at][0] == spec["truncate_table"]
    with_note = [r.with_note for r in records if r.value is not None]
    assert with_note == sorted(with_note), f"{label}: the note column came and went"

    # 5. each record fits its schema: Connect (connect_json) or Avro (fastavro)
    schemas = Schemas(spec)
    for record, line in zip(records, lines):
        printed = json.loads(line)
        s = schemas.get(record.table, record.with_note)
        if encoding == "connect_json":
            if printed["key"] is not None:
                assert printed["key"]["schema"] == s["key"]
                check_connect(s["key"], printed["key"]["payload"], "key")
            if printed["value"] is not None:
                assert printed["value"]["schema"] == s["value"]
                check_connect(s["value"], printed["value"]["payload"])
        elif encoding == "json":
            if printed["value"] is not None:
                check_connect(s["value"], printed["value"])
        elif fastavro is not None:
            parsed = fastavro.parse_schema(s["avro_value"])
            if record.value is not None:
                buffer = io.BytesIO()
                fastavro.schemaless_writer(buffer, parsed, record.value)
                buffer.seek(0)
                back = fastavro.schemaless_reader(buffer, parsed)
                assert back == record.value, f"{label}: Avro round trip differs"
            if record.key is not None:
                fastavro.validation.validate({"id": record.key}, fastavro.parse_schema(s["avro_key"]))


# ---------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description="Debezium-shaped change histories for sluice's CDC tests.")
    parser.add_argument("--dry-run", action="store_true", help="print the records; produce nothing")
    parser.add_argument("--avro-schemas", action="store_true", help="print the Avro schemas")
    parser.add_argument("--self-test", action="store_true", help="check the generator")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    spec = load_spec(sys.stdin.read() or "{}")
    if args.avro_schemas:
        schemas = Schemas(spec)
        out = {}
        for table in spec["tables"]:
            out[table] = {"key": schemas.get(table, False)["avro_key"],
                          "value": schemas.get(table, False)["avro_value"],
                          "value_with_note": schemas.get(table, True)["avro_value"]}
        print(json.dumps(out, indent=1))
        return
    if args.dry_run:
        records, expected = dry_run(spec, sys.stdout)
        write_expected(spec, expected)
        print(json.dumps(summary(records)), file=sys.stderr)
        return
    records, expected = generate(spec)
    write_expected(spec, expected)
    produce(spec, records)


if __name__ == "__main__":
    main()
