"""word_parse in Python: turns word events ``#<uid>*<word>@<timestamp>`` (UTF-8 values)
into ``{"uid":42,"word":"hello","produced_at":1700000000123}``; the twin of the Rust
plugin ``plugins/word_parse``, giving the same output for the same input.

Config: ``separator`` (default ``*``), the text between the uid and the word. A malformed
event is the record's error; a tombstone is dropped.
"""

from sluice_plugin import Config, Record

U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1

separator = "*"


def init(config: Config) -> None:
    global separator
    config.deny_unknown(["separator"])
    value = config.get("separator", "*")
    if not value or "#" in value or "@" in value:
        raise ValueError(
            f"config `separator` must be non-empty and contain neither '#' nor '@', got {value!r}"
        )
    separator = value


def _integer(text: str, signed: bool, low: int, high: int):
    """What Rust's integer parsing takes: an optional sign (``-`` only when signed) and
    ASCII digits, nothing else (no spaces, no ``_``), within ``low..=high``; else
    ``None``. Leading zeros are dropped first: Python's ``int`` refuses more than 4300
    digits, Rust reads any number of them."""
    negative = signed and text[:1] == "-"
    body = text[1:] if text[:1] == "+" or negative else text
    if body == "" or not body.isascii() or not body.isdigit():
        return None
    body = body.lstrip("0") or "0"
    if len(body) > 20:
        return None
    value = -int(body) if negative else int(body)
    return value if low <= value <= high else None


def _malformed(what: str) -> ValueError:
    return ValueError(
        f"malformed word event (expected #<uid>{separator}<word>@<timestamp>): {what}"
    )


def _json_string(text: str) -> str:
    out = ['"']
    for c in text:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def parse(value: bytes) -> str:
    """The JSON text of one word event."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _malformed(f"not UTF-8: {e}") from None
    text = text.rstrip("\r\n")
    if not text.startswith("#"):
        raise _malformed("does not start with '#'")
    uid, found, rest = text[1:].partition(separator)
    if not found:
        raise _malformed(f"no separator {separator!r} after the uid")
    uid_value = _integer(uid, False, 0, U64_MAX)
    if uid_value is None:
        raise _malformed(f"uid {uid!r} is not an unsigned integer")
    word, found, ts = rest.rpartition("@")
    if not found:
        raise _malformed("no '@' before the timestamp")
    if not word:
        raise _malformed("the word is empty")
    ts_value = _integer(ts, True, I64_MIN, I64_MAX)
    if ts_value is None:
        raise _malformed(f"timestamp {ts!r} is not an integer")
    return f'{{"uid":{uid_value},"word":{_json_string(word)},"produced_at":{ts_value}}}'


def transform(record: Record):
    if record.value is None:
        return None
    return record.with_value(parse(record.value))
