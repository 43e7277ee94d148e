"""A shop's source database, scripted: the history of its `customers`, `orders` and
`order_lines` tables, and the change events Debezium's PostgreSQL connector writes for it
(Kafka Connect's JSON converter with schemas, one topic per table: `shop.public.<table>`).

The producer sends these events; the checker replays the same history (the same seed and
sizes make the same history) to the source's final state, and compares the replica with it.

The history: customers are created, renamed and some deleted and created again; orders are
placed with one to three lines, paid, shipped, some cancelled (deleted with their lines);
lines change their quantity or are removed. Halfway, the `customers` table gains a column
(`email`): its events carry a second row schema from then on, as Debezium's do after an
`ALTER TABLE`.
"""

import base64
import random
from decimal import Decimal

TOPIC_PREFIX = "shop.public."
TABLES = ("customers", "orders", "order_lines")

# The row schemas: (field, Connect type, optional, logical name, parameters).
CUSTOMERS_V1 = [
    ("id", "int64", False, None, None),
    ("name", "string", True, None, None),
    ("created_at", "int64", True, "io.debezium.time.MicroTimestamp", None),
]
CUSTOMERS_V2 = CUSTOMERS_V1 + [("email", "string", True, None, None)]
ORDERS = [
    ("id", "int64", False, None, None),
    ("customer_id", "int64", False, None, None),
    ("status", "string", True, None, None),
    ("total", "bytes", True, "org.apache.kafka.connect.data.Decimal", {"scale": "2"}),
]
ORDER_LINES = [
    ("order_id", "int64", False, None, None),
    ("line_no", "int32", False, None, None),
    ("sku", "string", True, None, None),
    ("qty", "int32", True, None, None),
]
KEYS = {"customers": ("id",), "orders": ("id",), "order_lines": ("order_id", "line_no")}

# 2024-01-01T00:00:00, in microseconds.
EPOCH_MICROS = 1_704_067_200_000_000


def field_schema(field):
    name, kind, optional, logical, parameters = field
    schema = {"type": kind, "optional": optional, "field": name}
    if logical:
        schema["name"] = logical
        schema["version"] = 1
    if parameters:
        schema["parameters"] = parameters
    return schema


def row_schema(table, fields, which):
    return {"type": "struct", "optional": True, "name": f"shop.public.{table}.Value",
            "field": which, "fields": [field_schema(f) for f in fields]}


def envelope_schema(table, fields):
    return {
        "type": "struct", "optional": False, "name": f"shop.public.{table}.Envelope",
        "fields": [
            row_schema(table, fields, "before"),
            row_schema(table, fields, "after"),
            {"type": "struct", "optional": False, "field": "source",
             "name": "io.debezium.connector.postgresql.Source",
             "fields": [
                 {"type": "string", "optional": False, "field": "version"},
                 {"type": "string", "optional": False, "field": "connector"},
                 {"type": "string", "optional": False, "field": "name"},
                 {"type": "int64", "optional": False, "field": "ts_ms"},
                 {"type": "string", "optional": True, "field": "snapshot"},
                 {"type": "string", "optional": False, "field": "db"},
                 {"type": "string", "optional": True, "field": "sequence"},
                 {"type": "string", "optional": False, "field": "schema"},
                 {"type": "string", "optional": False, "field": "table"},
                 {"type": "int64", "optional": True, "field": "txId"},
                 {"type": "int64", "optional": True, "field": "lsn"},
                 {"type": "int64", "optional": True, "field": "xmin"},
             ]},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def key_schema(table):
    fields = {f[0]: f for f in schema_of(table, 2)}
    return {"type": "struct", "optional": False, "name": f"shop.public.{table}.Key",
            "fields": [field_schema(fields[k][:2] + (False, None, None)) for k in KEYS[table]]}


def schema_of(table, version):
    if table == "customers":
        return CUSTOMERS_V2 if version >= 2 else CUSTOMERS_V1
    return ORDERS if table == "orders" else ORDER_LINES


def decimal_bytes(value):
    """Connect's Decimal: the unscaled value, big-endian two's complement, base64."""
    unscaled = int((value * 100).to_integral_value())
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def wire_row(table, row):
    """A row as the payload carries it (a decimal as its bytes)."""
    if row is None:
        return None
    if table == "orders" and row.get("total") is not None:
        return {**row, "total": decimal_bytes(row["total"])}
    return dict(row)


class Change:
    """One change of the source: its table, op (c, u, d), key, row before and after, the
    log position, and the version of the table's row schema."""

    def __init__(self, table, op, key, before, after, lsn, version):
        self.table, self.op, self.key = table, op, key
        self.before, self.after, self.lsn, self.version = before, after, lsn, version

    def topic(self):
        return TOPIC_PREFIX + self.table

    def key_json(self):
        return {"schema": key_schema(self.table), "payload": dict(self.key)}

    def value_json(self):
        """The Debezium event, in Connect's JSON envelope."""
        fields = schema_of(self.table, self.version)
        names = [f[0] for f in fields]

        def shaped(row):
            row = wire_row(self.table, row)
            return None if row is None else {n: row.get(n) for n in names}

        ts_ms = 1_704_067_200_000 + self.lsn
        return {
            "schema": envelope_schema(self.table, fields),
            "payload": {
                "before": shaped(self.before), "after": shaped(self.after), "op": self.op,
                "ts_ms": ts_ms,
                "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "shop",
                           "ts_ms": ts_ms, "snapshot": "false", "db": "shop",
                           "sequence": f'[null,"{self.lsn}"]', "schema": "public",
                           "table": self.table, "txId": 1000 + self.lsn, "lsn": self.lsn,
                           "xmin": None},
            },
        }


def history(seed, customers, orders):
    """The changes, in commit order, and the final state: {table: {key tuple: row}}."""
    rng = random.Random(seed)
    state = {t: {} for t in TABLES}
    changes = []
    lsn = [1000]
    customer_version = [1]

    def key_of(table, row):
        return tuple(row[k] for k in KEYS[table])

    def emit(table, op, before, after):
        lsn[0] += rng.randint(1, 40)
        row = after if after is not None else before
        key = {k: row[k] for k in KEYS[table]}
        version = customer_version[0] if table == "customers" else 1
        if table == "customers" and version < 2:
            before = None if before is None else {k: v for k, v in before.items() if k != "email"}
            after = None if after is None else {k: v for k, v in after.items() if k != "email"}
        changes.append(Change(table, op, key, before, after, lsn[0], version))
        if after is None:
            state[table].pop(key_of(table, before), None)
        else:
            state[table][key_of(table, after)] = dict(after)

    def new_customer(cid):
        row = {"id": cid, "name": f"customer {cid}",
               "created_at": EPOCH_MICROS + cid * 1_000_001 + rng.randint(0, 999)}
        if customer_version[0] >= 2:
            row["email"] = f"c{cid}@shop.example"
        emit("customers", "c", None, row)

    for cid in range(1, customers + 1):
        new_customer(cid)
    next_order = 1
    for step in range(orders):
        if step == orders // 2:
            # ALTER TABLE customers ADD COLUMN email: later events carry the new schema,
            # and the rows already there read NULL.
            customer_version[0] = 2
        live_customers = sorted(state["customers"])
        if not live_customers:
            new_customer(customers + step + 1)
            live_customers = sorted(state["customers"])
        oid = next_order
        next_order += 1
        cid = rng.choice(live_customers)[0]
        lines = [{"order_id": oid, "line_no": n, "sku": f"sku-{rng.randint(1, 50)}",
                  "qty": rng.randint(1, 5)} for n in range(1, rng.randint(1, 3) + 1)]
        total = sum(Decimal(l["qty"]) * Decimal("4.99") for l in lines).quantize(Decimal("0.01"))
        emit("orders", "c", None, {"id": oid, "customer_id": cid, "status": "new", "total": total})
        for line in lines:
            emit("order_lines", "c", None, line)
        # Something else happens in the shop meanwhile.
        roll = rng.random()
        live_orders = sorted(state["orders"])
        if roll < 0.25 and live_orders:
            (o,) = rng.choice(live_orders)
            before = state["orders"][(o,)]
            status = {"new": "paid", "paid": "shipped"}.get(before["status"], before["status"])
            emit("orders", "u", dict(before), {**before, "status": status})
        elif roll < 0.40 and state["order_lines"]:
            k = rng.choice(sorted(state["order_lines"]))
            before = state["order_lines"][k]
            emit("order_lines", "u", dict(before), {**before, "qty": before["qty"] + 1})
        elif roll < 0.50 and state["order_lines"]:
            k = rng.choice(sorted(state["order_lines"]))
            emit("order_lines", "d", dict(state["order_lines"][k]), None)
        elif roll < 0.60 and live_orders:
            # A cancelled order: its lines go first, then the order.
            (o,) = rng.choice(live_orders)
            for k in sorted(k for k in state["order_lines"] if k[0] == o):
                emit("order_lines", "d", dict(state["order_lines"][k]), None)
            emit("orders", "d", dict(state["orders"][(o,)]), None)
        elif roll < 0.75 and live_customers:
            k = rng.choice(live_customers)
            before = state["customers"][k]
            after = {**before, "name": before["name"] + " jr"}
            if customer_version[0] >= 2:
                after["email"] = f"c{k[0]}.{lsn[0]}@shop.example"
            emit("customers", "u", dict(before), after)
        elif roll < 0.80 and live_customers:
            # A customer deleted, and created again under the same id.
            k = rng.choice(live_customers)
            emit("customers", "d", dict(state["customers"][k]), None)
            new_customer(k[0])
    return changes, state
