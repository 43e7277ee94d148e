//! Python plugins: a directory with `pyproject.toml` and `plugin.py`, built into a
//! component by componentize-py against the `sluice:transform` world, with the Python SDK
//! (`plugins/sdk-python`) that this binary carries.
//!
//! The build writes what it needs into `DIR/target/sluice-build/` (the world's WIT, the
//! SDK, and the entry module that exports the world around `plugin.py`) and puts the
//! component at `DIR/target/<name>.wasm`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::TransformError;
use crate::tools::io;

/// The componentize-py version sluice builds with: its components import WASI 0.2.9,
/// which the host's wasmtime (WASI 0.2.12) satisfies.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// Where `scripts/setup.sh --plugins` installs componentize-py, in this checkout.
fn installed_componentize_py() -> PathBuf {
    Path::new(env!("SLUICE_PLUGINS_SRC")).join("../target/plugin-tools/python/bin/componentize-py")
}

/// What to run to install the Python toolchain.
pub const INSTALL_HINT: &str = "componentize-py is not installed: run `scripts/setup.sh --plugins` in the sluice checkout (it installs componentize-py 0.25.1 into target/plugin-tools/python), or `pip install componentize-py==0.25.1` and put it on PATH, or point SLUICE_COMPONENTIZE_PY at it";

/// The world's WIT, and the SDK's modules, as this binary was built with them.
const WIT: &str = include_str!("../../plugins/wit/transform.wit");
const SDK: [(&str, &str); 3] = [
    (
        "__init__.py",
        include_str!("../../plugins/sdk-python/sluice_plugin/__init__.py"),
    ),
    (
        "_core.py",
        include_str!("../../plugins/sdk-python/sluice_plugin/_core.py"),
    ),
    (
        "_world.py",
        include_str!("../../plugins/sdk-python/sluice_plugin/_world.py"),
    ),
];

/// The module componentize-py exports: the world around the plugin's `plugin.py`.
const ENTRY: &str = "\
# Written by `sluice plugin build`: exports the sluice:transform world around plugin.py.
import plugin
from sluice_plugin._world import world_for

WitWorld = world_for(plugin)
";

/// The componentize-py to run: `SLUICE_COMPONENTIZE_PY`, the one `scripts/setup.sh`
/// installed in this checkout, or `componentize-py` on `PATH`; an error naming the
/// command that installs it when none runs.
pub fn componentize_py() -> Result<PathBuf, TransformError> {
    let candidates = std::env::var_os("SLUICE_COMPONENTIZE_PY")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            installed_componentize_py(),
            PathBuf::from("componentize-py"),
        ]);
    first_that_runs(candidates)
}

/// The first of `candidates` that answers `--version`.
fn first_that_runs(
    candidates: impl IntoIterator<Item = PathBuf>,
) -> Result<PathBuf, TransformError> {
    for candidate in candidates {
        let Ok(out) = Command::new(&candidate).arg("--version").output() else {
            continue;
        };
        if !out.status.success() {
            continue;
        }
        let version = String::from_utf8_lossy(&out.stdout);
        let version = version.trim().trim_start_matches("componentize-py ").trim();
        if version != COMPONENTIZE_PY_VERSION {
            eprintln!(
                "warning: {} is componentize-py {version}; sluice is tested with {COMPONENTIZE_PY_VERSION}",
                candidate.display()
            );
        }
        return Ok(candidate);
    }
    Err(TransformError::Build(INSTALL_HINT.to_string()))
}

/// The name of a plugin's component: its directory's name, as a file name.
pub(crate) fn component_name(dir: &Path) -> String {
    let name = std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "plugin".into());
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.is_empty() {
        "plugin".into()
    } else {
        name
    }
}

/// Builds the Python plugin in `dir` and returns the component's path. componentize-py's
/// output goes to stderr.
pub fn build(dir: &Path) -> Result<PathBuf, TransformError> {
    let module = dir.join("plugin.py");
    if !module.is_file() {
        return Err(TransformError::Usage(format!(
            "{} has a pyproject.toml but no plugin.py: a Python plugin's `transform` function is in plugin.py (create one with `sluice plugin new NAME --lang python`)",
            dir.display()
        )));
    }
    let tool = componentize_py()?;
    let target = dir.join("target");
    let work = target.join("sluice-build");
    let sdk = work.join("sluice_plugin");
    std::fs::create_dir_all(&sdk).map_err(io(format!("cannot create {}", sdk.display())))?;
    let mut files: Vec<(PathBuf, &str)> = vec![
        (work.join("transform.wit"), WIT),
        (work.join("sluice_component.py"), ENTRY),
    ];
    files.extend(SDK.iter().map(|(name, text)| (sdk.join(name), *text)));
    for (path, text) in files {
        std::fs::write(&path, text).map_err(io(format!("cannot write {}", path.display())))?;
    }
    let wasm = target.join(format!("{}.wasm", component_name(dir)));
    let status = Command::new(&tool)
        .arg("-d")
        .arg(work.join("transform.wit"))
        // The build's own files first: a `sluice_plugin/` beside plugin.py does not
        // replace the SDK this binary carries.
        .args(["-w", "transform", "componentize", "-p"])
        .arg(&work)
        .arg("-p")
        .arg(dir)
        .arg("sluice_component")
        .arg("-o")
        .arg(&wasm)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| TransformError::Build(format!("cannot run {}: {e}", tool.display())))?;
    if !status.success() {
        return Err(TransformError::Build(format!(
            "componentize-py failed for {} ({status}); see its output above",
            module.display()
        )));
    }
    Ok(wasm)
}

/// The component of this repository's Python example `plugins/python/NAME`, built when
/// its sources (the plugin, the SDK, the WIT, this build) changed since it was last built,
/// under a lock in its `target/`, since test processes run side by side. For the tests
/// and the benchmark, as [`crate::example_plugin_path`] is for the Rust examples.
pub fn example_python_plugin(name: &str) -> Result<PathBuf, TransformError> {
    let plugins = Path::new(env!("SLUICE_PLUGINS_SRC"));
    let dir = plugins.join("python").join(name);
    let mut sources = vec![
        dir.join("plugin.py"),
        dir.join("pyproject.toml"),
        plugins.join("wit/transform.wit"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/python.rs"),
    ];
    let sdk = plugins.join("sdk-python/sluice_plugin");
    if let Ok(entries) = std::fs::read_dir(&sdk) {
        sources.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "py")),
        );
    }
    build_when_changed(&dir, &sources, build)
}

/// The component of the example plugin in `dir`, built by `build` when one of `sources`
/// is newer than it, under a lock in `dir/target/` (test processes run side by side).
pub(crate) fn build_when_changed(
    dir: &Path,
    sources: &[PathBuf],
    build: fn(&Path) -> Result<PathBuf, TransformError>,
) -> Result<PathBuf, TransformError> {
    let target = dir.join("target");
    std::fs::create_dir_all(&target).map_err(io(format!("cannot create {}", target.display())))?;
    let lock_path = target.join(".build-lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(io(format!("cannot create {}", lock_path.display())))?;
    lock.lock()
        .map_err(io(format!("cannot lock {}", lock_path.display())))?;
    let wasm = target.join(format!("{}.wasm", component_name(dir)));
    let changed = sources
        .iter()
        .filter_map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .max();
    let built = std::fs::metadata(&wasm).and_then(|m| m.modified()).ok();
    match (built, changed) {
        (Some(built), Some(changed)) if built >= changed => Ok(wasm),
        _ => build(dir),
    }
}

/// The files of a new Python plugin called `name` (`sluice plugin new NAME --lang
/// python`): it builds as it is, and `sample.jsonl` is its input for `sluice plugin test`.
pub fn scaffold_files(name: &str) -> Vec<(&'static str, String)> {
    vec![
        (".gitignore", "/target\n__pycache__/\n".to_owned()),
        (
            "pyproject.toml",
            format!(
                r#"# A sluice transform plugin in Python. Its code is plugin.py; build it into a
# WebAssembly component with `sluice plugin build .`, try it with
# `sluice plugin test target/{component}.wasm --input sample.jsonl`.
[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []
"#,
                component = name.replace('-', "_"),
            ),
        ),
        (
            "plugin.py",
            r#""""A sluice transform plugin: upper-cases text values, drops tombstones, and fails
records that are not UTF-8 (the record's error names the line)."""

from sluice_plugin import Config, Record, log

prefix = ""


def init(config: Config) -> None:
    """Called once with the connector's `config:` map; raise to reject it."""
    global prefix
    config.deny_unknown(["prefix"])
    prefix = config.get("prefix", "")
    log.info(f"upper-casing with prefix {prefix!r}")


def transform(record: Record):
    """One record in; a Record, a list of Records, or None (filtered) out."""
    if record.value is None:
        return None
    return record.with_value(prefix + record.text.upper())
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
    fn a_component_is_named_after_its_directory() {
        let dir = tempfile::tempdir().expect("dir");
        let plugin = dir.path().join("my-mask.v2");
        std::fs::create_dir(&plugin).expect("mkdir");
        assert_eq!(component_name(&plugin), "my_mask_v2");
    }

    #[test]
    fn a_directory_without_plugin_py_is_told_what_is_missing() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("pyproject.toml"), "[project]\n").expect("write");
        let err = build(dir.path()).expect_err("no plugin.py");
        assert!(err.to_string().contains("no plugin.py"), "{err}");
    }

    #[test]
    fn a_missing_componentize_py_names_the_command_that_installs_it() {
        let dir = tempfile::tempdir().expect("dir");
        // One that is not there, and one that runs but fails.
        let failing = dir.path().join("componentize-py");
        std::fs::write(&failing, "#!/bin/sh\nexit 3\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = first_that_runs([dir.path().join("absent"), failing]).expect_err("none runs");
        let text = err.to_string();
        assert!(text.contains("scripts/setup.sh --plugins"), "{text}");
        assert!(text.contains("componentize-py==0.25.1"), "{text}");
    }
}
