"""Write a sluice transform plugin in Python: one function per record.

A plugin is a directory with a ``pyproject.toml`` and a module ``plugin.py`` that
defines::

    from sluice_plugin import Record

    def init(config: dict[str, str]) -> None:          # optional
        ...                                              # raise to reject the config

    def transform(record: Record) -> Record | list[Record] | None:
        ...                                              # raise to fail this record

``sluice plugin build DIR`` turns it into a WebAssembly component (componentize-py)
that the host runs in its sandbox, exactly like a Rust plugin. What ``transform``
returns decides what becomes of the record:

- a ``Record``: it is mapped to that record;
- a list of records: it becomes those records (flat-map; an empty list filters it);
- ``None``: it is filtered out;
- an exception: this record alone fails, with the exception's type, message and line,
  and the connector's error policy (``fail``, ``skip``, ``dlq``) decides.

An exception raised by ``init`` rejects the configuration: the connector does not
start and ``sluice validate`` shows the message.

The module holds no state the host relies on: the host may re-instantiate the plugin
(calling ``init`` again) after a batch that broke its limits.
"""

from __future__ import annotations

import json as _json
import sys as _sys
from typing import Any, Iterable, Optional, Union

__all__ = ["Record", "log", "Config"]

Header = tuple[str, Optional[bytes]]


def _as_bytes(value: Any, what: str) -> Optional[bytes]:
    """A record's key or value from what a plugin gives: bytes as they are, text as
    UTF-8, ``None`` as null, anything else as compact JSON."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    try:
        return _json.dumps(
            value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"record {what} must be bytes, str, None or a JSON value, got {type(value).__name__}: {e}"
        ) from None


def _text(data: Optional[bytes], what: str) -> Optional[str]:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"record {what} is not UTF-8 text: {e}") from None


def _parsed(data: Optional[bytes], what: str) -> Any:
    text = _text(data, what)
    if text is None:
        return None
    try:
        return _json.loads(text)
    except ValueError as e:
        raise ValueError(f"record {what} is not JSON: {e}") from None


class Record:
    """One Kafka record: the type of both inputs and outputs.

    ``key`` and ``value`` are ``bytes`` or ``None`` (a ``None`` value is a tombstone);
    ``headers`` a list of ``(name, bytes | None)`` in wire order (names may repeat);
    ``timestamp`` milliseconds since the epoch or ``None``; ``topic``, ``partition``
    and ``offset`` say where the input came from. The host sets every output's topic,
    partition and offset to its input's, whatever the plugin writes there.
    """

    __slots__ = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")

    def __init__(
        self,
        value: Any = None,
        key: Any = None,
        headers: Optional[Iterable[tuple[str, Any]]] = None,
        timestamp: Optional[int] = None,
        topic: str = "test",
        partition: int = 0,
        offset: int = 0,
    ) -> None:
        self.value: Optional[bytes] = _as_bytes(value, "value")
        self.key: Optional[bytes] = _as_bytes(key, "key")
        pairs = headers.items() if isinstance(headers, dict) else (headers or [])
        self.headers: list[Header] = [
            (str(name), _as_bytes(v, f"header {name!r}")) for name, v in pairs
        ]
        self.timestamp = timestamp
        self.topic = topic
        self.partition = partition
        self.offset = offset

    # Reading.

    @property
    def text(self) -> Optional[str]:
        """The value as text (``None`` for a tombstone); ``ValueError`` if not UTF-8."""
        return _text(self.value, "value")

    def json(self) -> Any:
        """The value parsed as JSON (``None`` for a tombstone); ``ValueError`` if it is
        not UTF-8 JSON."""
        return _parsed(self.value, "value")

    @property
    def key_text(self) -> Optional[str]:
        """The key as text (``None`` for a null key); ``ValueError`` if not UTF-8."""
        return _text(self.key, "key")

    def key_json(self) -> Any:
        """The key parsed as JSON (``None`` for a null key)."""
        return _parsed(self.key, "key")

    def header(self, name: str) -> Optional[bytes]:
        """The value of the first header called ``name``, or ``None``."""
        for n, v in self.headers:
            if n == name:
                return v
        return None

    # Making outputs: copies with one part changed, the rest (metadata) kept.

    def _copy(self) -> "Record":
        out = Record.__new__(Record)
        out.topic, out.partition, out.offset = self.topic, self.partition, self.offset
        out.timestamp, out.key, out.value = self.timestamp, self.key, self.value
        out.headers = list(self.headers)
        return out

    def with_value(self, value: Any) -> "Record":
        """A copy with this value: bytes, text (as UTF-8), ``None`` (a tombstone) or any
        other JSON value (as compact JSON)."""
        out = self._copy()
        out.value = _as_bytes(value, "value")
        return out

    def with_key(self, key: Any) -> "Record":
        """A copy with this key (the forms of ``with_value``)."""
        out = self._copy()
        out.key = _as_bytes(key, "key")
        return out

    def with_header(self, name: str, value: Any) -> "Record":
        """A copy with one more header (the forms of ``with_value``)."""
        out = self._copy()
        out.headers.append((str(name), _as_bytes(value, f"header {name!r}")))
        return out

    def with_timestamp(self, timestamp: Optional[int]) -> "Record":
        """A copy with this timestamp (milliseconds since the epoch, or ``None``)."""
        out = self._copy()
        out.timestamp = timestamp
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in Record.__slots__)

    def __repr__(self) -> str:
        return (
            f"Record(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
            f"key={self.key!r}, value={self.value!r}, headers={self.headers!r}, "
            f"timestamp={self.timestamp!r})"
        )


class Config(dict):
    """The connector's ``config`` map for this plugin, as ``init`` receives it: a
    ``dict[str, str]`` with two helpers."""

    def require(self, key: str) -> str:
        """The value of ``key``; ``ValueError`` naming it when it is missing."""
        if key not in self:
            raise ValueError(f"config `{key}` is required")
        return self[key]

    def deny_unknown(self, known: Iterable[str]) -> None:
        """Raises ``ValueError`` naming the keys that are not in ``known``."""
        known = set(known)
        unknown = sorted(k for k in self if k not in known)
        if unknown:
            raise ValueError(
                f"unknown config key(s) {', '.join(unknown)}; this plugin takes: "
                f"{', '.join(sorted(known)) or 'none'}"
            )


class _Log:
    """The host's log: lines go to sluice's log with the connector and plugin names.
    Outside the sandbox (a plugin's own unit tests) they go to stderr."""

    _levels = ("trace", "debug", "info", "warn", "error")

    def __init__(self) -> None:
        self._host = None
        # Inside the component, lines logged before the host's first `init` (at the
        # module's top level, which runs when the component is built, with no host) wait
        # and go out at that `init`.
        self._live = False
        self._early: list[tuple[int, str]] = []

    def _emit(self, level: int, message: str) -> None:
        if self._host is None:
            try:
                from wit_world.imports import host  # only inside the component
            except ImportError:
                host = False
            self._host = host
        if self._host and self._live:
            self._host.log(self._host.Level(level), str(message))
        elif self._host:
            if len(self._early) < 100:
                self._early.append((level, str(message)))
        else:
            print(f"[{self._levels[level]}] {message}", file=_sys.stderr)

    def _go_live(self) -> None:
        """Called by the component's ``init``: the host is there from now on."""
        self._live = True
        early, self._early = self._early, []
        for level, message in early:
            self._emit(level, message)

    def trace(self, message: str) -> None:
        self._emit(0, message)

    def debug(self, message: str) -> None:
        self._emit(1, message)

    def info(self, message: str) -> None:
        self._emit(2, message)

    def warn(self, message: str) -> None:
        self._emit(3, message)

    def error(self, message: str) -> None:
        self._emit(4, message)


log = _Log()
