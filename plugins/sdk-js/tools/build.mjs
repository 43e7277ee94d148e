// Written by `sluice plugin build` into a JavaScript plugin's target/sluice-build/ and run
// there with Node: builds the component with componentize-js's API (jco's `componentize`
// command wraps the same call, but its own WASI shim cannot read files on every Node).
//
//     node build.mjs TOOLS_DIR ENTRY WIT OUT
//
// TOOLS_DIR holds node_modules/@bytecodealliance/componentize-js (scripts/setup.sh
// --plugins installs it, pinned by package-lock.json beside this file).
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [tools, entry, wit, out] = process.argv.slice(2);
const api = join(tools, "node_modules/@bytecodealliance/componentize-js/src/componentize.js");
const { componentize } = await import(pathToFileURL(api).href);
try {
  const { component } = await componentize({
    sourcePath: entry,
    witPath: wit,
    worldName: "transform",
    // The host links WASI's base interfaces only: no wasi:http.
    disableFeatures: ["http", "fetch-event"],
  });
  await writeFile(out, component);
} catch (e) {
  console.error(String(e && e.message ? e.message : e));
  process.exit(1);
}
