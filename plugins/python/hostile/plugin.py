"""hostile in Python: misbehaves on purpose, as a Python author can, for the host's
sandbox tests (transform/tests/python.rs). ``init`` picks the behaviour from config key
``mode``:

| mode        | ``transform`` does                                                  |
|-------------|---------------------------------------------------------------------|
| ``echo``    | returns the record (the well-behaved control)                       |
| ``loop``    | ``while True: pass`` (the CPU deadline); with ``on``, only on the records whose value is ``on`` |
| ``memory``  | appends 1 MiB blocks to a list without end (the memory cap)         |
| ``recursion`` | a function that calls itself without end (Python's recursion limit) |
| ``big``     | answers one record with a ``size``-byte value (the output bound)    |
| ``raise-every`` | raises on the records whose offset is a multiple of ``every`` (default 1000) |
| ``socket``  | ``import socket`` (which succeeds), then ``socket.create_connection(addr)`` |
| ``connect`` | a raw ``socket.socket().connect(addr)``, without a name lookup      |
| ``file``    | ``open(path)`` (default ``/etc/passwd``) and returns what it read   |
| ``print``   | prints to stdout and stderr (the host's log gets them), then echoes |
| ``system``  | ``os.system("echo escaped")``                                       |
"""

import os
import sys
import socket  # importing it is allowed; using it is not

from sluice_plugin import Config, Record, log

# Logged when the module is imported, at build time with no host: it waits for the
# host's first `init` (it used to fail the build).
log.info("hostile plugin loaded")

settings: dict[str, str] = {}
hoard: list[bytes] = []

MODES = {
    "echo", "loop", "memory", "recursion", "big", "raise-every", "socket", "connect", "file",
    "system", "print",
}


def init(config: Config) -> None:
    global settings
    mode = config.get("mode", "echo")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; one of {', '.join(sorted(MODES))}")
    settings = dict(config)


def _recurse(n: int) -> int:
    return _recurse(n + 1) + 1


def transform(record: Record):
    mode = settings.get("mode", "echo")
    if mode == "loop" and settings.get("on") in (None, record.text):
        while True:
            pass
    if mode == "loop":
        return record
    if mode == "memory":
        while True:
            hoard.append(bytes(1 << 20))
    if mode == "recursion":
        return record.with_value(str(_recurse(0)))
    if mode == "big":
        return record.with_value(b"x" * int(settings.get("size", str(8 << 20))))
    if mode == "raise-every":
        if record.offset % int(settings.get("every", "1000")) == 0:
            raise RuntimeError(f"record {record.offset} fails on purpose")
        return record
    if mode == "socket":
        host, _, port = settings.get("addr", "127.0.0.1:5432").rpartition(":")
        with socket.create_connection((host, int(port)), timeout=1) as conn:
            return record.with_value(f"connected to {conn.getpeername()}")
    if mode == "connect":
        host, _, port = settings.get("addr", "127.0.0.1:5432").rpartition(":")
        conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        conn.connect((host, int(port)))
        return record.with_value(f"connected to {conn.getpeername()}")
    if mode == "file":
        with open(settings.get("path", "/etc/passwd"), "rb") as f:
            return record.with_value(f.read())
    if mode == "print":
        print("to stdout", record.offset)
        print("to stderr", file=sys.stderr)
        return record
    if mode == "system":
        return record.with_value(f"os.system returned {os.system('echo escaped')}")
    return record
