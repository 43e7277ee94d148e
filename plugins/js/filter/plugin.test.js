import { test } from "node:test";
import assert from "node:assert/strict";
import { Config, Record } from "sluice-plugin";
import { init, transform } from "./plugin.js";

const v = '{"word":"hello","n":5,"user":{"country":"NL"},"tags":["a","b"]}';
function keeps(config) {
  init(new Config(config));
  return transform(new Record({ value: v })) !== null;
}

test("equality and ordering", () => {
  assert.ok(keeps({ field: "word", value: "hello" }));
  assert.ok(keeps({ field: "word", value: '"hello"' }));
  assert.ok(!keeps({ field: "word", value: "bye" }));
  assert.ok(keeps({ field: "n", value: "5.0" }));
  assert.ok(keeps({ field: "n", op: "gt", value: "4" }));
  assert.ok(!keeps({ field: "n", op: "lt", value: "5" }));
  assert.ok(keeps({ field: "/user/country", op: "ne", value: "DE" }));
  assert.ok(keeps({ field: "tags", op: "contains", value: "b" }));
  assert.ok(keeps({ field: "word", op: "prefix", value: "he" }));
  assert.ok(keeps({ field: "nope", op: "missing" }));
  assert.ok(!keeps({ field: "nope", value: "1" }));
});

test("config and record errors", () => {
  assert.throws(() => init(new Config({})), /`field` is required/);
  assert.throws(() => init(new Config({ field: "a", op: "like" })), /unknown operator/);
  init(new Config({ field: "a", value: "1" }));
  assert.throws(() => transform(new Record({ value: "not json" })), /is not JSON/);
  assert.notEqual(transform(new Record({ value: null })), null, "a tombstone is kept");
});
