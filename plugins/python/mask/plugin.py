"""mask in Python: replaces fields of a JSON value with the hex SHA-256 of a secret salt
and the field's JSON text, so that equal values stay equal (joins and counts still
work) and the values themselves do not reach the table.

Config:

- ``fields`` (required): comma-separated fields, each a top-level name (``email``) or a
  JSON Pointer (``/user/email``);
- ``salt`` (required, not empty): the secret prepended before hashing. Without one, a
  hash of a short value (a phone number, a postcode) is found by trying them all.

A field that is absent is left alone; a value that is not a JSON object is the record's
error; a tombstone passes through unchanged.
"""

import hashlib
import json

from sluice_plugin import Config, Record

pointers: list[list[str]] = []
salt = b""


def _pointer(field: str) -> list[str]:
    """A field as the path of keys it names (RFC 6901's escapes undone)."""
    if not field.startswith("/"):
        return [field]
    return [p.replace("~1", "/").replace("~0", "~") for p in field[1:].split("/")]


def init(config: Config) -> None:
    global pointers, salt
    config.deny_unknown(["fields", "salt"])
    fields = [f.strip() for f in config.require("fields").split(",") if f.strip()]
    if not fields:
        raise ValueError("config `fields` names no field")
    if not config.get("salt"):
        raise ValueError("config `salt` is required and must not be empty: it keeps the hashes from being reversed by trying every value")
    pointers = [_pointer(f) for f in fields]
    salt = config["salt"].encode("utf-8")


def _hash(value) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(salt + text.encode("utf-8")).hexdigest()


def transform(record: Record):
    if record.value is None:
        return record
    document = record.json()
    if not isinstance(document, dict):
        raise ValueError(f"the value is a JSON {type(document).__name__}, not an object")
    for path in pointers:
        parent = document
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent:
            parent[path[-1]] = _hash(parent[path[-1]])
    return record.with_value(document)
