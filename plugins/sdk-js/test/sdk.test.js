// The SDK in Node (`npm test` in plugins/sdk-js): what a plugin's functions meet, and how
// the world's exports answer the host, without a component.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Config, MAX_ERROR_BYTES, Record, errorText, outputs, world } from "../index.js";

const bytes = (text) => new TextEncoder().encode(text);

test("a record reads its value, key and headers as bytes, text and JSON", () => {
  const r = new Record({ value: { a: 1 }, key: "k", headers: [["h", "v"], ["n", null]], timestamp: 5 });
  assert.equal(r.text, '{"a":1}');
  assert.deepEqual(r.json(), { a: 1 });
  assert.equal(r.keyText, "k");
  assert.equal(r.headerText("h"), "v");
  assert.equal(r.header("n"), null);
  assert.equal(r.header("absent"), null);
  assert.equal(r.timestamp, 5n);
  assert.equal(r.offset, 0n);
  assert.throws(() => new Record({ value: new Uint8Array([0xff]) }).text, /not UTF-8/);
  assert.throws(() => new Record({ value: "x" }).json(), /record value is not JSON/);
  assert.equal(new Record({ value: null }).json(), null);
});

test("outputs are copies with one part changed", () => {
  const r = new Record({ value: "a", headers: { h: "1" } });
  const out = r.withValue("b").withHeader("h2", "2").withKey(bytes("k")).withTimestamp(7n);
  assert.equal(r.text, "a");
  assert.equal(r.headers.length, 1);
  assert.equal(out.text, "b");
  assert.deepEqual(out.headers.map(([n]) => n), ["h", "h2"]);
  assert.equal(out.timestamp, 7n);
  assert.throws(() => r.withTimestamp(1.5), /64-bit integer/);
  assert.throws(() => r.withTimestamp(2n ** 63n), /64-bit integer/);
  assert.throws(() => r.withValue(() => 1), /must be bytes/);
});

test("config helpers name the key", () => {
  const c = new Config([["a", "1"]]);
  assert.equal(c.get("a"), "1");
  assert.equal(c.get("b", "x"), "x");
  assert.throws(() => c.require("b"), /config `b` is required/);
  assert.throws(() => c.denyUnknown(["b"]), /unknown config key\(s\) a; this plugin takes: b/);
  c.denyUnknown(["a"]);
});

test("an error names its type, message and the plugin's line, cut to the host's limit", () => {
  function fails() {
    throw new TypeError("nope");
  }
  let caught;
  try {
    fails();
  } catch (e) {
    caught = e;
  }
  const text = errorText(caught, "sdk.test.js");
  assert.match(text, /^TypeError: nope \(sdk\.test\.js, line \d+\)$/);
  assert.equal(errorText("plain"), "thrown: plain");
  assert.equal(errorText(new Error("x"), null), "Error: x");
  const huge = errorText(new Error("é".repeat(10000)), null);
  assert.ok(bytes(huge).length <= MAX_ERROR_BYTES, `${bytes(huge).length}`);
  assert.ok(huge.endsWith("..."));
  assert.ok(!huge.includes("\ufffd"), "no character cut in two");
});

test("transform's answer is a record, an array of them, or null", () => {
  const r = new Record({ value: "a" });
  assert.deepEqual(outputs(null), []);
  assert.deepEqual(outputs(undefined), []);
  assert.deepEqual(outputs(r), [r]);
  assert.deepEqual(outputs([r, r]), [r, r]);
  assert.throws(() => outputs("a"), /transform returned a string/);
  assert.throws(() => outputs([r, 1]), /item 1 is a number/);
});

test("the world answers one outcome per record, and an init throw is its error", () => {
  assert.equal(typeof globalThis.fetch, "function");
  const logged = [];
  const plugin = {
    init(config) {
      config.denyUnknown(["mode"]);
    },
    transform(record) {
      if (record.text === "fail") throw new Error("failed on purpose");
      if (record.text === "drop") return null;
      if (record.text === "wrong") {
        const out = record.withValue("x");
        out.value = "not bytes";
        return out;
      }
      return [record, record.withValue(record.text.toUpperCase())];
    },
  };
  const exported = world(plugin, (level, message) => logged.push([level, message]));
  const input = (offset, value) => ({
    topic: "t", partition: 0, offset: BigInt(offset), timestamp: undefined,
    key: undefined, value: value === null ? undefined : bytes(value), headers: [["h", undefined]],
  });
  const answers = exported.process([input(0, "a"), input(1, "fail"), input(2, "drop"), input(3, "wrong"), input(4, null)]);
  assert.equal(answers.length, 5);
  assert.equal(answers[0].tag, "records");
  assert.deepEqual(answers[0].val.map((r) => new TextDecoder().decode(r.value)), ["a", "A"]);
  assert.equal(answers[0].val[0].offset, 0n);
  assert.deepEqual(answers[0].val[0].headers, [["h", undefined]]);
  assert.equal(answers[1].tag, "error");
  assert.match(answers[1].val, /^Error: failed on purpose/);
  assert.deepEqual(answers[2], { tag: "records", val: [] });
  assert.deepEqual(answers[3], { tag: "error", val: "TypeError: output value is a string; set a Uint8Array or null, or use withValue()" });
  assert.equal(answers[4].tag, "error", "a tombstone's text is null: calling toUpperCase fails");
  assert.throws(() => exported.init([["colour", "red"]]), (e) => typeof e === "string" && e.startsWith("Error: unknown config key(s) colour"));
  console.log("after init");
  assert.deepEqual(logged.at(-1), ["info", "after init"], "console is the host's log");
});

test("fetch is refused as an error, not left to trap", () => {
  world({ transform: (r) => r }, () => {});
  assert.throws(() => fetch("http://127.0.0.1:1/"), /fetch is not available: a sluice plugin has no network/);
});
