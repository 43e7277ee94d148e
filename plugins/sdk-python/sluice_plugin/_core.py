"""What the SDK does around a plugin's functions, free of the component's bindings so
that it runs (and is tested) in a plain Python too."""

from __future__ import annotations

import traceback
from typing import Any, Callable, Optional

from . import Config, Record

# The host cuts a record's error to 4 KiB (MAX_ERROR_MESSAGE_BYTES); cutting here keeps a
# huge message from crossing the boundary at all.
MAX_ERROR_BYTES = 4096


def error_text(error: BaseException, plugin_file: Optional[str] = None) -> str:
    """``Type: message (plugin.py, line N)``: the exception, and the line of the plugin's
    own code it was raised from (the deepest frame in ``plugin_file``, else the deepest
    frame), cut to the host's limit."""
    try:
        message = str(error)
    except Exception:  # an exception whose __str__ itself raises
        message = "<the message could not be read>"
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if plugin_file is not None:
        own = [f for f in frames if f.filename.endswith(plugin_file)]
        frames = own or frames
    where = ""
    if frames:
        last = frames[-1]
        name = last.filename.rsplit("/", 1)[-1]
        where = f" ({name}, line {last.lineno})"
    # Lone surrogates (text decoded with surrogateescape) cannot cross as UTF-8.
    data = text.encode("utf-8", "replace")
    room = MAX_ERROR_BYTES - len(where.encode("utf-8"))
    if len(data) > room:
        data = data[: room - 3] + b"..."
    return data.decode("utf-8", "ignore") + where


def outputs(result: Any) -> list[Record]:
    """The records ``transform`` answered: a ``Record``, a list (or tuple) of them, or
    ``None`` for none. Anything else is the record's error."""
    if result is None:
        return []
    if isinstance(result, Record):
        return [result]
    if isinstance(result, (list, tuple)):
        for i, r in enumerate(result):
            if not isinstance(r, Record):
                raise TypeError(
                    f"transform returned a list whose item {i} is a {type(r).__name__}; "
                    "return a Record, a list of Records, or None"
                )
        return list(result)
    raise TypeError(
        f"transform returned a {type(result).__name__}; return a Record, a list of Records, or None"
    )


class Plugin:
    """A plugin module's ``init`` and ``transform``, found and checked once."""

    def __init__(self, module: Any, plugin_file: str = "plugin.py") -> None:
        self.file = plugin_file
        transform = getattr(module, "transform", None)
        if not callable(transform):
            raise TypeError(
                f"{plugin_file} must define `def transform(record)`; it has no function `transform`"
            )
        init = getattr(module, "init", None)
        if init is not None and not callable(init):
            raise TypeError(f"`init` in {plugin_file} must be a function")
        self._transform: Callable[[Record], Any] = transform
        self._init: Optional[Callable[[Config], Any]] = init

    def init(self, pairs: list[tuple[str, str]]) -> Optional[str]:
        """Runs ``init`` on the config: ``None``, or the message that rejects it."""
        if self._init is None:
            return None
        try:
            self._init(Config(pairs))
        # Anything the plugin raises rejects its config, `sys.exit` included: nothing
        # may escape into the component, where it would trap.
        except BaseException as e:
            return error_text(e, self.file)
        return None

    def transform(self, record: Record, convert: Callable[[Record], Any] = lambda r: r):
        """One record through ``transform``: its outputs (each through ``convert``), or
        its error's text."""
        try:
            result = self._transform(record)
        except BaseException as e:  # the record's error, whatever the plugin raised
            return error_text(e, self.file)
        try:
            return [convert(r) for r in outputs(result)]
        except BaseException as e:  # a wrong answer, or an output field of a wrong type
            return error_text(e, None)
