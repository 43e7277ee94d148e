// hostile in JavaScript: misbehaves on purpose, as a JavaScript author can, for the host's
// sandbox tests (transform/tests/js.rs). `init` picks the behaviour from config key `mode`:
//
// | mode          | `transform` does                                                  |
// |---------------|-------------------------------------------------------------------|
// | `echo`        | returns the record (the well-behaved control)                     |
// | `loop`        | `for (;;) {}` (the CPU deadline); with `on`, only on the records whose value is `on` |
// | `memory`      | keeps 1 MiB arrays without end (the memory cap)                   |
// | `recursion`   | a function that calls itself without end                          |
// | `big`         | answers one record with a `size`-byte value (the output bound)    |
// | `raise-every` | throws on the records whose offset is a multiple of `every` (default 1000) |
// | `fetch`       | `fetch(addr)`: there is no network                                 |
// | `require`     | `require("fs")`: there is no Node API, no file                    |
// | `print`       | `console.log` and `console.error` (the host's log gets them), then echoes |
// | `wrong`       | answers a string instead of a record                              |

import { log } from "sluice-plugin";

// Logged when the module is evaluated, at build time with no host: it waits for the
// host's first `init`.
log.info("hostile plugin loaded");

const MODES = ["echo", "loop", "memory", "recursion", "big", "raise-every", "fetch", "require", "print", "wrong"];

let settings = new Map();
const hoard = [];

export function init(config) {
  const mode = config.get("mode", "echo");
  if (!MODES.includes(mode)) {
    throw new Error(`unknown mode '${mode}'; one of ${MODES.join(", ")}`);
  }
  settings = new Map(config.entries());
}

function recurse(n) {
  return recurse(n + 1) + 1;
}

export function transform(record) {
  const mode = settings.get("mode") ?? "echo";
  if (mode === "loop" && (!settings.has("on") || settings.get("on") === record.text)) {
    for (;;) {}
  }
  switch (mode) {
    case "memory":
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    case "recursion":
      return record.withValue(String(recurse(0)));
    case "big":
      return record.withValue(new Uint8Array(Number(settings.get("size") ?? 8 << 20)).fill(120));
    case "raise-every":
      if (record.offset % BigInt(settings.get("every") ?? "1000") === 0n) {
        throw new RangeError(`record ${record.offset} fails on purpose`);
      }
      return record;
    case "fetch":
      // No `await` here: a transform is synchronous. Calling it is enough to be refused.
      fetch(`http://${settings.get("addr") ?? "127.0.0.1:5432"}/`);
      return record.withValue("fetched");
    case "require":
      return record.withValue(String(require("fs").readFileSync("/etc/passwd")));
    case "print":
      console.log("to stdout", record.offset);
      console.error("to stderr");
      return record;
    case "wrong":
      return "not a record";
  }
  return record;
}
