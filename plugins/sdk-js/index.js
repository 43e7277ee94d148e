// Write a sluice transform plugin in JavaScript: one function per record.
//
// A plugin is a directory with a `package.json` and a module `plugin.js` that exports:
//
//     import { Record, log } from "sluice-plugin";
//
//     export function init(config) { ... }      // optional; throw to reject the config
//     export function transform(record) { ... } // throw to fail this record
//
// `sluice plugin build DIR` turns it into a WebAssembly component (componentize-js) that
// the host runs in its sandbox, exactly like a Rust plugin. What `transform` returns
// decides what becomes of the record:
//
// - a `Record`: it is mapped to that record;
// - an array of records: it becomes those records (flat-map; an empty array filters it);
// - `null` or `undefined`: it is filtered out;
// - a throw: this record alone fails, with the error's name, message and line, and the
//   connector's error policy (`fail`, `skip`, `dlq`) decides.
//
// A throw from `init` rejects the configuration: the connector does not start and
// `sluice validate` shows the message. The module holds no state the host relies on: the
// host may re-instantiate the plugin (calling `init` again) after a batch that broke its
// limits.
//
// Inside the component this module is the SDK the build carries; outside it (a plugin's
// own `node --test`), the same module runs in Node, and `log` writes to stderr.

/** The host cuts a record's error to 4 KiB; cutting here keeps a huge message from
 * crossing the boundary at all. */
export const MAX_ERROR_BYTES = 4096;

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/** A byte field from what a plugin gives: a `Uint8Array` as it is, other typed arrays and
 * `ArrayBuffer`s as their bytes, a string as UTF-8, `null`/`undefined` as null, anything
 * else as JSON. */
function asBytes(value, what) {
  if (value === null || value === undefined) return null;
  if (isUint8Array(value)) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) {
    return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  if (typeof value === "string") return encoder.encode(value);
  let json;
  try {
    json = JSON.stringify(value);
  } catch (e) {
    throw new TypeError(`record ${what} must be bytes, a string, null or a JSON value: ${e.message}`);
  }
  if (json === undefined) {
    throw new TypeError(`record ${what} must be bytes, a string, null or a JSON value, got ${typeof value}`);
  }
  return encoder.encode(json);
}

function text(bytes, what) {
  if (bytes === null) return null;
  try {
    return strictDecoder.decode(bytes);
  } catch (e) {
    throw new TypeError(`record ${what} is not UTF-8 text`);
  }
}

function parsed(bytes, what) {
  const t = text(bytes, what);
  if (t === null) return null;
  try {
    return JSON.parse(t);
  } catch (e) {
    throw new SyntaxError(`record ${what} is not JSON: ${e.message}`);
  }
}

/** A timestamp as milliseconds in a BigInt, from a BigInt or an integer Number. */
function asTimestamp(value) {
  if (value === null || value === undefined) return null;
  if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
  if (typeof value === "bigint" && value >= -(2n ** 63n) && value < 2n ** 63n) return value;
  throw new TypeError(`record timestamp ${String(value)} is not milliseconds as a 64-bit integer`);
}

/**
 * One Kafka record: the type of both inputs and outputs.
 *
 * `key` and `value` are `Uint8Array`s or `null` (a null value is a tombstone); `headers`
 * an array of `[name, Uint8Array | null]` in wire order (names may repeat); `timestamp`
 * milliseconds since the epoch as a `BigInt`, or `null`; `topic`, `partition` and
 * `offset` (a `BigInt`) say where the input came from. The host sets every output's
 * topic, partition and offset to its input's, whatever the plugin writes there.
 */
export class Record {
  /**
   * @param {{value?: any, key?: any, headers?: Array<[string, any]> | Object<string, any>,
   *          timestamp?: bigint | number | null, topic?: string, partition?: number,
   *          offset?: bigint | number}} [fields]
   */
  constructor(fields = {}) {
    this.value = asBytes(fields.value, "value");
    this.key = asBytes(fields.key, "key");
    const pairs = Array.isArray(fields.headers)
      ? fields.headers
      : Object.entries(fields.headers ?? {});
    this.headers = pairs.map(([name, v]) => [String(name), asBytes(v, `header ${JSON.stringify(String(name))}`)]);
    this.timestamp = asTimestamp(fields.timestamp);
    this.topic = fields.topic ?? "test";
    this.partition = fields.partition ?? 0;
    this.offset = BigInt(fields.offset ?? 0);
  }

  // Reading.

  /** The value as text (`null` for a tombstone); a `TypeError` if it is not UTF-8. */
  get text() {
    return text(this.value, "value");
  }

  /** The value parsed as JSON (`null` for a tombstone); throws if it is not UTF-8 JSON. */
  json() {
    return parsed(this.value, "value");
  }

  /** The key as text (`null` for a null key); a `TypeError` if it is not UTF-8. */
  get keyText() {
    return text(this.key, "key");
  }

  /** The key parsed as JSON (`null` for a null key). */
  keyJson() {
    return parsed(this.key, "key");
  }

  /** The value of the first header called `name` (a `Uint8Array`), or `null`. */
  header(name) {
    for (const [n, v] of this.headers) if (n === name) return v;
    return null;
  }

  /** The first header called `name` as text, or `null`. */
  headerText(name) {
    return text(this.header(name), `header ${JSON.stringify(name)}`);
  }

  // Making outputs: copies with one part changed, the rest (metadata) kept.

  /** A copy with this value: bytes, a string (as UTF-8), `null` (a tombstone) or any
   * other JSON value (as compact JSON). */
  withValue(value) {
    const out = copyOf(this);
    out.value = asBytes(value, "value");
    return out;
  }

  /** A copy with this key (the forms of `withValue`). */
  withKey(key) {
    const out = copyOf(this);
    out.key = asBytes(key, "key");
    return out;
  }

  /** A copy with one more header (the forms of `withValue`). */
  withHeader(name, value) {
    const out = copyOf(this);
    out.headers.push([String(name), asBytes(value, `header ${JSON.stringify(String(name))}`)]);
    return out;
  }

  /** A copy with this timestamp (milliseconds since the epoch, a BigInt or an integer
   * Number, or `null`). */
  withTimestamp(timestamp) {
    const out = copyOf(this);
    out.timestamp = asTimestamp(timestamp);
    return out;
  }
}

/** A copy of a record, its headers' array its own. */
function copyOf(r) {
  const out = Object.create(Record.prototype);
  out.value = r.value;
  out.key = r.key;
  out.headers = r.headers.slice();
  out.timestamp = r.timestamp;
  out.topic = r.topic;
  out.partition = r.partition;
  out.offset = r.offset;
  return out;
}

/** The connector's `config` map for this plugin, as `init` receives it. */
export class Config {
  /** @param {Array<[string, string]> | Object<string, string>} pairs */
  constructor(pairs = []) {
    this.map = new Map(Array.isArray(pairs) ? pairs : Object.entries(pairs));
  }

  /** Whether `key` is set. */
  has(key) {
    return this.map.has(key);
  }

  /** The value of `key`, or `fallback` (default `undefined`) when it is not set. */
  get(key, fallback = undefined) {
    return this.map.has(key) ? this.map.get(key) : fallback;
  }

  /** The value of `key`; an `Error` naming it when it is missing. */
  require(key) {
    if (!this.map.has(key)) throw new Error(`config \`${key}\` is required`);
    return this.map.get(key);
  }

  /** Throws an `Error` naming the keys that are not in `known`. */
  denyUnknown(known) {
    const allowed = new Set(known);
    const unknown = [...this.map.keys()].filter((k) => !allowed.has(k)).sort();
    if (unknown.length > 0) {
      throw new Error(
        `unknown config key(s) ${unknown.join(", ")}; this plugin takes: ${[...allowed].sort().join(", ") || "none"}`,
      );
    }
  }

  /** The `[key, value]` pairs. */
  entries() {
    return this.map.entries();
  }
}

// The host's log. Before the host's first `init` (the module's top level runs when the
// component is built, with no host), lines wait and go out at that `init`.
const LEVELS = ["trace", "debug", "info", "warn", "error"];
let hostLog = null;
let live = false;
const early = [];

function emit(level, parts) {
  const message = parts.map((p) => (typeof p === "string" ? p : show(p))).join(" ");
  if (hostLog === null) {
    console.error(`[${level}] ${message}`);
  } else if (live) {
    hostLog(level, message);
  } else if (early.length < 100) {
    early.push([level, message]);
  }
}

function show(value) {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  try {
    const json = JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v));
    return json === undefined ? String(value) : json;
  } catch {
    return String(value);
  }
}

/** The host's log: lines go to sluice's log with the connector and plugin names (the
 * host limits their length and rate). Outside the sandbox they go to stderr. */
export const log = Object.freeze(
  Object.fromEntries(LEVELS.map((level) => [level, (...parts) => emit(level, parts)])),
);

/** `Name: message (plugin.js, line N)`: the thrown value, and the line of the plugin's
 * own code it was thrown from (the first frame in `pluginFile`, else the first frame),
 * cut to the host's limit. With `pluginFile` null, no line: the error is not the
 * plugin's code but its answer. */
export function errorText(error, pluginFile = "plugin.js") {
  let message;
  try {
    message =
      error instanceof Error
        ? error.message
          ? `${error.name}: ${error.message}`
          : error.name
        : `thrown: ${typeof error === "string" ? error : show(error)}`;
  } catch {
    message = "<the message could not be read>";
  }
  let where = "";
  const stack = error instanceof Error && typeof error.stack === "string" ? error.stack : "";
  const frames = [...stack.matchAll(/([^\s@()]+\.m?js):(\d+)(?::\d+)?/g)];
  const own = frames.filter((f) => f[1].split("/").pop() === pluginFile);
  const frame = own[0] ?? frames[0];
  if (frame && pluginFile !== null) where = ` (${frame[1].split("/").pop()}, line ${frame[2]})`;
  const room = MAX_ERROR_BYTES - encoder.encode(where).length;
  let bytes = encoder.encode(message);
  if (bytes.length > room) {
    bytes = bytes.subarray(0, room - 3);
    // Drop a character cut in two.
    let end = bytes.length;
    while (end > 0 && (bytes[end - 1] & 0xc0) === 0x80) end--;
    if (end > 0 && bytes[end - 1] >= 0xc0) end--;
    message = new TextDecoder().decode(bytes.subarray(0, end === 0 ? bytes.length : end)) + "...";
  }
  return message + where;
}

/** The records `transform` answered: a `Record`, an array of them, or `null`/`undefined`
 * for none. Anything else is the record's error. */
export function outputs(result) {
  if (result === null || result === undefined) return [];
  if (result instanceof Record) return [result];
  if (Array.isArray(result)) {
    result.forEach((r, i) => {
      if (!(r instanceof Record)) {
        throw new TypeError(
          `transform returned an array whose item ${i} is ${describe(r)}; return a Record, an array of Records, or null`,
        );
      }
    });
    return result;
  }
  throw new TypeError(`transform returned ${describe(result)}; return a Record, an array of Records, or null`);
}

function describe(value) {
  if (value === null) return "null";
  if (typeof value === "object") return `a ${value.constructor?.name ?? "object"}`;
  return `a ${typeof value}`;
}

/** Whether `v` is a `Uint8Array`, of this global or another: the host's byte lists
 * arrive as `Uint8Array`s that `instanceof` does not know. */
function isUint8Array(v) {
  return v instanceof Uint8Array || Object.prototype.toString.call(v) === "[object Uint8Array]";
}

/** An output as the world's record, its fields checked: a wrong type is the record's
 * error here, not a trap at the boundary. */
function toWorld(r) {
  const bytes = (v, what) => {
    if (v === null || v === undefined) return undefined;
    if (isUint8Array(v)) return v;
    throw new TypeError(`output ${what} is ${describe(v)}; set a Uint8Array or null, or use withValue()`);
  };
  const timestamp = asTimestamp(r.timestamp);
  return {
    topic: String(r.topic),
    partition: r.partition | 0,
    offset: typeof r.offset === "bigint" ? r.offset : 0n,
    timestamp: timestamp === null ? undefined : timestamp,
    key: bytes(r.key, "key"),
    value: bytes(r.value, "value"),
    headers: r.headers.map(([n, v]) => [String(n), bytes(v, `header ${JSON.stringify(String(n))}`)]),
  };
}

function fromWorld(r) {
  const out = Object.create(Record.prototype);
  out.topic = r.topic;
  out.partition = r.partition;
  out.offset = r.offset;
  out.timestamp = r.timestamp ?? null;
  out.key = r.key ?? null;
  out.value = r.value ?? null;
  out.headers = r.headers.map(([n, v]) => [n, v ?? null]);
  return out;
}

/**
 * The plugin module's `init` and `transform` as the world's exports, `init` and
 * `process`, logging through `hostLogFn`. Used by the entry module that
 * `sluice plugin build` writes; a plugin does not call it.
 */
export function world(plugin, hostLogFn, pluginFile = "plugin.js") {
  if (typeof plugin.transform !== "function") {
    throw new TypeError(`${pluginFile} must export \`function transform(record)\`; it exports no function \`transform\``);
  }
  if (plugin.init !== undefined && typeof plugin.init !== "function") {
    throw new TypeError(`\`init\` in ${pluginFile} must be a function`);
  }
  hostLog = hostLogFn;
  // `console` is the host's log too: the host grants no stdio.
  for (const [method, level] of [["log", "info"], ["info", "info"], ["debug", "debug"], ["warn", "warn"], ["error", "error"], ["trace", "trace"]]) {
    globalThis.console[method] = (...parts) => emit(level, parts);
  }
  // The engine's `fetch` would trap (the host links no wasi:http): refuse it as the
  // record's error instead.
  globalThis.fetch = function fetch() {
    throw new TypeError("fetch is not available: a sluice plugin has no network");
  };
  return {
    init(pairs) {
      live = true;
      for (const [level, message] of early.splice(0)) hostLog(level, message);
      if (plugin.init === undefined) return;
      try {
        plugin.init(new Config(pairs));
      } catch (e) {
        // The world's `result<_, string>`: what is thrown is the error.
        throw errorText(e, pluginFile);
      }
    },
    process(batch) {
      const answers = new Array(batch.length);
      for (let i = 0; i < batch.length; i++) {
        let result;
        try {
          result = plugin.transform(fromWorld(batch[i]));
        } catch (e) {
          answers[i] = { tag: "error", val: errorText(e, pluginFile) };
          continue;
        }
        try {
          answers[i] = { tag: "records", val: outputs(result).map(toWorld) };
        } catch (e) {
          answers[i] = { tag: "error", val: errorText(e, null) };
        }
      }
      return answers;
    },
  };
}
