//! JavaScript plugins: a directory with `package.json` and `plugin.js`, built into a
//! component by componentize-js against the `sluice:transform` world, with the
//! JavaScript SDK (`plugins/sdk-js`) that this binary carries.
//!
//! The build copies the plugin's modules (its `.js`, `.mjs` and `.json` files but its
//! tests, outside `target/` and `node_modules/`) into `DIR/target/sluice-build/`, writes
//! beside them the world's WIT, the SDK (as the module `sluice-plugin`, the name
//! `plugin.js` imports it by), the entry module that exports the world around
//! `plugin.js` and the Node script that calls componentize-js, and puts the component at
//! `DIR/target/<name>.wasm`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::TransformError;
use crate::tools::io;

/// The componentize-js version sluice builds with: its components import WASI 0.2.10,
/// which the host's wasmtime (WASI 0.2.12) satisfies, and no `wasi:http` when built
/// without its `http` feature.
pub const COMPONENTIZE_JS_VERSION: &str = "0.22.0";

/// What to run to install the JavaScript toolchain.
pub const INSTALL_HINT: &str = "componentize-js is not installed: run `scripts/setup.sh --plugins` in the sluice checkout (it installs componentize-js 0.22.0 with npm into target/plugin-tools/js), or `npm install @bytecodealliance/componentize-js@0.22.0` in a directory and point SLUICE_COMPONENTIZE_JS at that directory";

/// The world's WIT, the SDK, and the build script, as this binary was built with them.
const WIT: &str = include_str!("../../plugins/wit/transform.wit");
const SDK: &str = include_str!("../../plugins/sdk-js/index.js");
const DRIVER: &str = include_str!("../../plugins/sdk-js/tools/build.mjs");

/// The module componentize-js builds: the world around the plugin's `plugin.js`.
const ENTRY: &str = "\
// Written by `sluice plugin build`: exports the sluice:transform world around plugin.js.
import { log } from 'sluice:transform/host@0.1.0';
import { world } from 'sluice-plugin';
import * as plugin from './plugin.js';

const exported = world(plugin, log);
export function init(config) {
  return exported.init(config);
}
export function process(batch) {
  return exported.process(batch);
}
";

/// Where `scripts/setup.sh --plugins` installs componentize-js, in this checkout.
fn installed_tools() -> PathBuf {
    Path::new(env!("SLUICE_PLUGINS_SRC")).join("../target/plugin-tools/js")
}

/// The componentize-js installed in `tools`, by its version; `None` when there is none.
fn version_in(tools: &Path) -> Option<String> {
    let manifest = tools.join("node_modules/@bytecodealliance/componentize-js/package.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["version"].as_str().map(str::to_owned)
}

/// The directory whose `node_modules` holds componentize-js: `SLUICE_COMPONENTIZE_JS`,
/// else the one `scripts/setup.sh` installed in this checkout; and Node on `PATH`. An
/// error naming the command that installs what is missing.
pub fn componentize_js() -> Result<PathBuf, TransformError> {
    let candidates = std::env::var_os("SLUICE_COMPONENTIZE_JS")
        .map(PathBuf::from)
        .into_iter()
        .chain([installed_tools()]);
    let tools = first_installed(candidates)?;
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|out| out.status.success()) {
        return Err(TransformError::Build(
            "node is not on PATH: JavaScript plugins are built with Node.js (20 or later); install it (Debian: `apt-get install nodejs npm`)".into(),
        ));
    }
    Ok(tools)
}

/// The first of `candidates` with componentize-js installed.
fn first_installed(
    candidates: impl IntoIterator<Item = PathBuf>,
) -> Result<PathBuf, TransformError> {
    for tools in candidates {
        let Some(version) = version_in(&tools) else {
            continue;
        };
        if version != COMPONENTIZE_JS_VERSION {
            eprintln!(
                "warning: {} has componentize-js {version}; sluice is tested with {COMPONENTIZE_JS_VERSION}",
                tools.display()
            );
        }
        return Ok(tools);
    }
    Err(TransformError::Build(INSTALL_HINT.to_string()))
}

/// The plugin's own modules, relative to `dir`: its `.js`, `.mjs` and `.json` files but
/// its tests (`*.test.js`, which `node --test` runs), outside `target/`, `node_modules/`
/// and hidden directories.
fn plugin_modules(dir: &Path) -> Result<Vec<PathBuf>, TransformError> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = dir.join(&rel);
        let entries =
            std::fs::read_dir(&here).map_err(io(format!("cannot read {}", here.display())))?;
        for entry in entries {
            let entry = entry.map_err(io(format!("cannot read {}", here.display())))?;
            let name = entry.file_name();
            let name_text = name.to_string_lossy();
            let path = rel.join(&name);
            let kind = entry
                .file_type()
                .map_err(io(format!("cannot read {}", entry.path().display())))?;
            if kind.is_dir() {
                let skipped = name_text.starts_with('.')
                    || (rel.as_os_str().is_empty() && name_text == "target")
                    || name_text == "node_modules";
                if !skipped {
                    pending.push(path);
                }
            } else if [".js", ".mjs", ".json"]
                .iter()
                .any(|ext| name_text.ends_with(ext))
                && ![".test.js", ".test.mjs"]
                    .iter()
                    .any(|ext| name_text.ends_with(ext))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Builds the JavaScript plugin in `dir` and returns the component's path.
/// componentize-js's output goes to stderr.
pub fn build(dir: &Path) -> Result<PathBuf, TransformError> {
    let module = dir.join("plugin.js");
    if !module.is_file() {
        return Err(TransformError::Usage(format!(
            "{} has a package.json but no plugin.js: a JavaScript plugin's `transform` function is in plugin.js (create one with `sluice plugin new NAME --lang js`)",
            dir.display()
        )));
    }
    let tools = componentize_js()?;
    let tools = std::fs::canonicalize(&tools).unwrap_or(tools);
    let target = dir.join("target");
    let work = target.join("sluice-build");
    // A module deleted from the plugin must not live on in the build.
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(io(format!("cannot clear {}", work.display())))?;
    }
    std::fs::create_dir_all(&work).map_err(io(format!("cannot create {}", work.display())))?;
    for rel in plugin_modules(dir)? {
        let to = work.join(&rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("cannot create {}", parent.display())))?;
        }
        std::fs::copy(dir.join(&rel), &to)
            .map_err(io(format!("cannot copy {} into the build", rel.display())))?;
    }
    // The build's own files last: a `sluice-plugin` beside plugin.js does not replace the
    // SDK this binary carries. componentize-js resolves a bare module name as a path from
    // the build directory, so the SDK is the file `sluice-plugin`.
    for (name, text) in [
        ("transform.wit", WIT),
        ("sluice-plugin", SDK),
        ("sluice-entry.js", ENTRY),
        ("sluice-build.mjs", DRIVER),
    ] {
        let path = work.join(name);
        std::fs::write(&path, text).map_err(io(format!("cannot write {}", path.display())))?;
    }
    let wasm = target.join(format!("{}.wasm", crate::python::component_name(dir)));
    let wasm_abs = std::fs::canonicalize(&target)
        .map(|t| t.join(wasm.file_name().unwrap_or_default()))
        .unwrap_or_else(|_| wasm.clone());
    let status = Command::new("node")
        .arg("sluice-build.mjs")
        .arg(&tools)
        .args(["sluice-entry.js", "transform.wit"])
        .arg(&wasm_abs)
        // componentize-js maps the directory it runs in as the component's `/` while it
        // evaluates the modules: the build directory, so that only the plugin's own
        // modules and the SDK are there.
        .current_dir(&work)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| TransformError::Build(format!("cannot run node: {e}")))?;
    if !status.success() {
        return Err(TransformError::Build(format!(
            "componentize-js failed for {} ({status}); see its output above",
            module.display()
        )));
    }
    Ok(wasm)
}

/// The component of this repository's JavaScript example `plugins/js/NAME`, built when
/// its sources (the plugin, the SDK, the WIT, this build) changed since it was last built,
/// under a lock in its `target/`, since test processes run side by side.
pub fn example_js_plugin(name: &str) -> Result<PathBuf, TransformError> {
    let plugins = Path::new(env!("SLUICE_PLUGINS_SRC"));
    let dir = plugins.join("js").join(name);
    let mut sources: Vec<PathBuf> = plugin_modules(&dir)?
        .into_iter()
        .map(|rel| dir.join(rel))
        .collect();
    sources.extend([
        plugins.join("wit/transform.wit"),
        plugins.join("sdk-js/index.js"),
        plugins.join("sdk-js/tools/build.mjs"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/js.rs"),
    ]);
    crate::python::build_when_changed(&dir, &sources, build)
}

/// The files of a new JavaScript plugin called `name` (`sluice plugin new NAME --lang
/// js`): it builds as it is, `sample.jsonl` is its input for `sluice plugin test`, and
/// `npm install && npm test` runs its unit test in Node against the SDK in `sdk`.
pub fn scaffold_files(name: &str, sdk: &str) -> Vec<(&'static str, String)> {
    vec![
        (".gitignore", "/target\nnode_modules/\n".to_owned()),
        (
            "package.json",
            format!(
                r#"{{
  "name": "{name}",
  "version": "0.1.0",
  "description": "A sluice transform plugin: build it with `sluice plugin build .`, try it with `sluice plugin test target/{component}.wasm --input sample.jsonl`",
  "private": true,
  "type": "module",
  "scripts": {{
    "test": "node --test"
  }},
  "devDependencies": {{
    "sluice-plugin": "file:{sdk}"
  }}
}}
"#,
                component = name.replace('-', "_"),
            ),
        ),
        (
            "plugin.js",
            r#"// A sluice transform plugin: upper-cases text values, drops tombstones, and fails
// records that are not UTF-8 (the record's error names the line).

import { Record, log } from "sluice-plugin";

let prefix = "";

/** Called once with the connector's `config:` map; throw to reject it. */
export function init(config) {
  config.denyUnknown(["prefix"]);
  prefix = config.get("prefix", "");
  log.info(`upper-casing with prefix ${JSON.stringify(prefix)}`);
}

/** One record in; a Record, an array of Records, or null (filtered) out. */
export function transform(record) {
  if (record.value === null) return null;
  return record.withValue(prefix + record.text.toUpperCase());
}
"#
            .to_owned(),
        ),
        (
            "plugin.test.js",
            r#"// `npm install && npm test`: the plugin in Node, with the SDK it is built with.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Config, Record } from "sluice-plugin";
import { init, transform } from "./plugin.js";

test("upper-cases with the prefix", () => {
  init(new Config({ prefix: "> " }));
  assert.equal(transform(new Record({ value: "hi" })).text, "> HI");
  assert.equal(transform(new Record({ value: null })), null);
});
"#
            .to_owned(),
        ),
        ("sample.jsonl", crate::tools::SAMPLE_JSONL.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_plugin_js_is_told_what_is_missing() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("package.json"), "{}\n").expect("write");
        let err = build(dir.path()).expect_err("no plugin.js");
        assert!(err.to_string().contains("no plugin.js"), "{err}");
    }

    #[test]
    fn a_missing_componentize_js_names_the_command_that_installs_it() {
        let dir = tempfile::tempdir().expect("dir");
        let err = first_installed([dir.path().join("absent"), dir.path().to_path_buf()])
            .expect_err("none installed");
        let text = err.to_string();
        assert!(text.contains("scripts/setup.sh --plugins"), "{text}");
        assert!(text.contains("componentize-js@0.22.0"), "{text}");
    }

    #[test]
    fn the_build_takes_the_plugins_modules_and_not_its_outputs() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        for file in [
            "plugin.js",
            "plugin.test.js",
            "package.json",
            "lib/words.mjs",
            "target/old.js",
            "node_modules/x/index.js",
            ".git/hook.js",
            "README.md",
        ] {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, "").expect("write");
        }
        let found = plugin_modules(root).expect("walk");
        assert_eq!(
            found,
            ["lib/words.mjs", "package.json", "plugin.js"]
                .map(PathBuf::from)
                .to_vec()
        );
    }
}
