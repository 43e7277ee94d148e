// filter in JavaScript: keeps the records whose JSON field matches a condition, drops the
// others; the Rust plugin plugins/filter, written for a JavaScript reader.
//
// Config:
//
// | key     | meaning                                                                 |
// |---------|-------------------------------------------------------------------------|
// | `field` | required; a top-level name (`word`) or a JSON Pointer (`/user/country`) |
// | `op`    | `eq` (default), `ne`, `gt`, `ge`, `lt`, `le`, `contains`, `prefix`, `exists`, `missing` |
// | `value` | the operand (required except for `exists`/`missing`); parsed as JSON when it is valid JSON (`42`, `true`, `"x"`), else taken as a string |
//
// `eq`/`ne` compare JSON values (numbers numerically); `gt`/`ge`/`lt`/`le` compare two
// numbers or two strings (by code point, as Rust does), anything else does not match;
// `contains`/`prefix` apply to strings (and `contains` to arrays, by element). A value
// that is not JSON is the record's error; tombstones are kept (they carry deletes).

const OPS = ["eq", "ne", "gt", "ge", "lt", "le", "contains", "prefix", "exists", "missing"];

let path = [];
let op = "eq";
let operand = null;

export function init(config) {
  config.denyUnknown(["field", "op", "value"]);
  const field = config.require("field");
  path = field.startsWith("/")
    ? field.slice(1).split("/").map((p) => p.replaceAll("~1", "/").replaceAll("~0", "~"))
    : [field];
  op = config.get("op", "eq");
  if (!OPS.includes(op)) {
    throw new Error(`config \`op\`: unknown operator ${JSON.stringify(op)} (one of ${OPS.join(", ")})`);
  }
  if (op === "exists" || op === "missing") {
    operand = null;
  } else if (!config.has("value")) {
    throw new Error(`config \`value\` is required for op ${JSON.stringify(op)}`);
  } else {
    const raw = config.get("value");
    try {
      operand = JSON.parse(raw);
    } catch {
      operand = raw;
    }
  }
}

/** The value at `path` in `doc`, or `undefined` (RFC 6901: array indexes are digits
 * without leading zeros). */
function lookup(doc, path) {
  let here = doc;
  for (const part of path) {
    if (Array.isArray(here)) {
      if (!/^(0|[1-9][0-9]*)$/.test(part) || Number(part) >= here.length) return undefined;
      here = here[Number(part)];
    } else if (here !== null && typeof here === "object" && Object.hasOwn(here, part)) {
      here = here[part];
    } else {
      return undefined;
    }
  }
  return here;
}

function jsonEqual(a, b) {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(a) && !Array.isArray(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return false;
}

/** -1, 0 or 1 for two numbers or two strings (strings by code point); else `null`. */
function compare(a, b) {
  if (typeof a === "number" && typeof b === "number") return a < b ? -1 : a > b ? 1 : 0;
  if (typeof a === "string" && typeof b === "string") {
    const x = [...a];
    const y = [...b];
    for (let i = 0; i < Math.min(x.length, y.length); i++) {
      const d = x[i].codePointAt(0) - y[i].codePointAt(0);
      if (d !== 0) return d < 0 ? -1 : 1;
    }
    return x.length === y.length ? 0 : x.length < y.length ? -1 : 1;
  }
  return null;
}

function matches(field) {
  if (field === undefined) return op === "missing" || op === "ne";
  switch (op) {
    case "exists":
      return true;
    case "missing":
      return false;
    case "eq":
      return jsonEqual(field, operand);
    case "ne":
      return !jsonEqual(field, operand);
    case "gt":
      return compare(field, operand) === 1;
    case "ge":
      return [0, 1].includes(compare(field, operand));
    case "lt":
      return compare(field, operand) === -1;
    case "le":
      return [0, -1].includes(compare(field, operand));
    case "contains":
      if (typeof field === "string" && typeof operand === "string") return field.includes(operand);
      return Array.isArray(field) && field.some((item) => jsonEqual(item, operand));
    case "prefix":
      return typeof field === "string" && typeof operand === "string" && field.startsWith(operand);
  }
  return false;
}

export function transform(record) {
  const doc = record.json();
  if (doc === null && record.value === null) return record;
  return matches(lookup(doc, path)) ? record : null;
}
