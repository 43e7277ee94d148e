// word_parse in JavaScript: turns word events `#<uid>*<word>@<timestamp>` (UTF-8 values)
// into `{"uid":42,"word":"hello","produced_at":1700000000123}`; the twin of the Rust
// plugin plugins/word_parse, giving the same output for the same input.
//
// Config: `separator` (default `*`), the text between the uid and the word. A malformed
// event is the record's error; a tombstone is dropped.

const U64_MAX = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;
const strict = new TextDecoder("utf-8", { fatal: true });

let separator = "*";

export function init(config) {
  config.denyUnknown(["separator"]);
  const value = config.get("separator", "*");
  if (value === "" || value.includes("#") || value.includes("@")) {
    throw new Error(
      `config \`separator\` must be non-empty and contain neither '#' nor '@', got ${JSON.stringify(value)}`,
    );
  }
  separator = value;
}

/** What Rust's integer parsing takes: an optional sign (`-` only when signed) and ASCII
 * digits, nothing else, within `low..=high`; else `null`. */
function integer(text, signed, low, high) {
  if (!/^[+-]?[0-9]+$/.test(text)) return null;
  if (text[0] === "-" && !signed) return null;
  const value = BigInt(text);
  return value >= low && value <= high ? value : null;
}

function malformed(what) {
  return new Error(`malformed word event (expected #<uid>${separator}<word>@<timestamp>): ${what}`);
}

function jsonString(text) {
  let out = '"';
  for (const c of text) {
    const code = c.codePointAt(0);
    if (c === '"') out += '\\"';
    else if (c === "\\") out += "\\\\";
    else if (c === "\n") out += "\\n";
    else if (c === "\r") out += "\\r";
    else if (c === "\t") out += "\\t";
    else if (code < 0x20) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += c;
  }
  return out + '"';
}

/** The JSON text of one word event. */
export function parse(value) {
  let text;
  try {
    text = strict.decode(value);
  } catch (e) {
    throw malformed(`not UTF-8: ${e.message}`);
  }
  text = text.replace(/[\r\n]+$/, "");
  if (!text.startsWith("#")) throw malformed("does not start with '#'");
  const rest = text.slice(1);
  const at = rest.indexOf(separator);
  if (at < 0) throw malformed(`no separator ${JSON.stringify(separator)} after the uid`);
  const uid = rest.slice(0, at);
  const uidValue = integer(uid, false, 0n, U64_MAX);
  if (uidValue === null) throw malformed(`uid ${JSON.stringify(uid)} is not an unsigned integer`);
  const tail = rest.slice(at + separator.length);
  const lastAt = tail.lastIndexOf("@");
  if (lastAt < 0) throw malformed("no '@' before the timestamp");
  const word = tail.slice(0, lastAt);
  if (word === "") throw malformed("the word is empty");
  const ts = tail.slice(lastAt + 1);
  const tsValue = integer(ts, true, I64_MIN, I64_MAX);
  if (tsValue === null) throw malformed(`timestamp ${JSON.stringify(ts)} is not an integer`);
  return `{"uid":${uidValue},"word":${jsonString(word)},"produced_at":${tsValue}}`;
}

export function transform(record) {
  if (record.value === null) return null;
  return record.withValue(parse(record.value));
}
