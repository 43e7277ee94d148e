#!/usr/bin/env python3
"""Produces records with Confluent's own serializers, for sluice's format suites.

Reads one JSON spec on stdin:

  {"brokers": "127.0.0.1:9092", "topic": "t", "registry": "http://127.0.0.1:8081",
   "serializer": "avro" | "protobuf" | "json" | "raw",
   "schema": "<Avro schema or JSON Schema text>",              (avro, json)
   "proto": {"dir": "/path", "file": "orders.proto", "message": "Order"},   (protobuf)
   "key_serializer": "avro" | "string" | null, "key_schema": "<Avro schema text>",
   "header_mode": false,       (the schema id in the __value_schema_id header)
   "records": [{"key": ..., "value": ..., "raw_value_hex": "...", "raw_key_hex": "..."}]}

Values are JSON; a few markers stand for the Python types the serializers take for logical
types: {"$decimal": "12.50"}, {"$date": "2024-01-02"}, {"$time": "12:34:56.789012"},
{"$datetime": "2024-01-02T03:04:05.123456+00:00"} (aware; naive without an offset),
{"$uuid": "…"}, {"$bytes": "<base64>"}, {"$branch": "com.acme.Card", "value": {...}} (an
Avro union branch by name). Protobuf values are JSON objects in protobuf's JSON mapping.
Prints the number of records produced.
"""

import base64
import datetime
import decimal
import importlib
import json
import os
import subprocess
import sys
import tempfile
import uuid

from confluent_kafka import Producer
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    header_schema_id_serializer,
)
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer


def convert(value):
    """The markers, as Python objects."""
    if isinstance(value, list):
        return [convert(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (marker, inner), = value.items()
        if marker == "$decimal":
            return decimal.Decimal(inner)
        if marker == "$date":
            return datetime.date.fromisoformat(inner)
        if marker == "$time":
            return datetime.time.fromisoformat(inner)
        if marker == "$datetime":
            return datetime.datetime.fromisoformat(inner)
        if marker == "$uuid":
            return uuid.UUID(inner)
        if marker == "$bytes":
            return base64.b64decode(inner)
    if set(value) == {"$branch", "value"}:
        return (value["$branch"], convert(value["value"]))
    return {k: convert(v) for k, v in value.items()}


def proto_class(spec):
    """Compiles the .proto with grpc_tools' protoc and imports the message's class."""
    from grpc_tools import protoc
    import grpc_tools

    out = tempfile.mkdtemp(prefix="sluice-proto-")
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    files = spec.get("files", [spec["file"]])
    code = protoc.main(
        ["protoc", f"-I{spec['dir']}", f"-I{include}", f"--python_out={out}"] + files
    )
    if code != 0:
        raise SystemExit(f"protoc failed on {files}")
    sys.path.insert(0, out)
    module = importlib.import_module(spec["file"][: -len(".proto")].replace("/", ".") + "_pb2")
    cls = module
    for part in spec["message"].split("."):
        cls = getattr(cls, part)
    return cls


def main():
    spec = json.load(sys.stdin)
    topic = spec["topic"]
    producer = Producer({"bootstrap.servers": spec["brokers"], "linger.ms": 20})
    registry = None
    if spec.get("registry"):
        registry = SchemaRegistryClient({"url": spec["registry"]})
    conf = {"auto.register.schemas": True}
    if spec.get("header_mode"):
        conf["schema.id.serializer"] = header_schema_id_serializer
    kind = spec["serializer"]
    message_class = None
    if kind == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        value_serializer = AvroSerializer(registry, spec["schema"], conf=conf)
    elif kind == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        message_class = proto_class(spec["proto"])
        value_serializer = ProtobufSerializer(
            message_class, registry, conf={**conf, "use.deprecated.format": False}
        )
    elif kind == "json":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        value_serializer = JSONSerializer(spec["schema"], registry, conf=conf)
    elif kind == "raw":
        value_serializer = None
    else:
        raise SystemExit(f"unknown serializer {kind}")
    key_serializer = None
    if spec.get("key_serializer") == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        key_serializer = AvroSerializer(registry, spec["key_schema"], conf=conf)
    elif spec.get("key_serializer") == "string":
        key_serializer = StringSerializer("utf_8")

    produced = 0
    for record in spec["records"]:
        headers = []
        if "raw_value_hex" in record:
            value = bytes.fromhex(record["raw_value_hex"])
        elif record.get("value") is None:
            value = None
        elif message_class is not None:
            from google.protobuf import json_format

            message = json_format.ParseDict(record["value"], message_class())
            value = value_serializer(
                message, SerializationContext(topic, MessageField.VALUE, headers)
            )
        else:
            value = value_serializer(
                convert(record["value"]),
                SerializationContext(topic, MessageField.VALUE, headers),
            )
        if "raw_key_hex" in record:
            key = bytes.fromhex(record["raw_key_hex"])
        elif record.get("key") is None:
            key = None
        elif key_serializer is not None:
            key = key_serializer(
                convert(record["key"]), SerializationContext(topic, MessageField.KEY, headers)
            )
        else:
            key = json.dumps(record["key"]).encode()
        producer.produce(topic, key=key, value=value, headers=headers or None)
        produced += 1
        producer.poll(0)
    remaining = producer.flush(30)
    if remaining:
        raise SystemExit(f"{remaining} records not delivered")
    print(produced)


if __name__ == "__main__":
    main()
