// `npm install && npm test`: the parser in Node, with the SDK it is built with.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Config, Record } from "sluice-plugin";
import { init, transform } from "./plugin.js";

test("maps an event to JSON, drops a tombstone, refuses a malformed one", () => {
  init(new Config({ separator: "|" }));
  const out = transform(new Record({ value: "#42|hello@1700000000123" }));
  assert.equal(out.text, '{"uid":42,"word":"hello","produced_at":1700000000123}');
  assert.equal(transform(new Record({ value: null })), null);
  assert.throws(() => transform(new Record({ value: "#x|a@1" })), /uid "x" is not an unsigned integer/);
  assert.throws(() => init(new Config({ separator: "@" })), /neither '#' nor '@'/);
});
