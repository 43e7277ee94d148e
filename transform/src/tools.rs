//! Plugin-author tooling behind `sluice plugin new|build|test`.

use std::io::BufRead;
use std::path::{Component as PathPart, Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::toolchain;
use crate::{Outcome, PluginSpec, Record, TransformChain, TransformEngine, TransformError};

/// The sample records of a new plugin, in any language: input for `sluice plugin test`.
pub(crate) const SAMPLE_JSONL: &str = r#"{"key": "k1", "value": "hello"}
{"value": {"json": "values are serialized"}, "headers": {"source": "sample"}}
{"key": "tombstone", "value": null}
"#;

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> TransformError {
    let context = context.into();
    move |source| TransformError::Io { context, source }
}

/// Creates a new plugin crate `dir/<name>/` that builds as-is for `wasm32-wasip2`, and
/// returns its directory.
///
/// The crate depends on this repository's SDK by path (relative when `dir` is inside the
/// repository, absolute otherwise) and is its own cargo workspace, so it builds wherever
/// it is created. It contains `src/lib.rs` (a pass-through-with-uppercase example with a
/// unit test) and `sample.jsonl` (input for `sluice plugin test`).
pub fn scaffold_plugin(
    name: &str,
    dir: &Path,
    language: PluginLanguage,
) -> Result<PathBuf, TransformError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !valid {
        return Err(TransformError::Usage(format!(
            "invalid plugin name {name:?}: use 1-64 characters of a-z, 0-9, '_' or '-', starting with a letter"
        )));
    }
    let crate_dir = dir.join(name);
    if crate_dir.exists()
        && std::fs::read_dir(&crate_dir)
            .map_err(io(format!("cannot read {}", crate_dir.display())))?
            .next()
            .is_some()
    {
        return Err(TransformError::Usage(format!(
            "{} already exists and is not empty; pick another name or directory",
            crate_dir.display()
        )));
    }
    if language == PluginLanguage::Python {
        std::fs::create_dir_all(&crate_dir)
            .map_err(io(format!("cannot create {}", crate_dir.display())))?;
        for (file, content) in crate::python::scaffold_files(name) {
            let path = crate_dir.join(file);
            std::fs::write(&path, content)
                .map_err(io(format!("cannot write {}", path.display())))?;
        }
        return Ok(crate_dir);
    }
    if language == PluginLanguage::Js {
        std::fs::create_dir_all(&crate_dir)
            .map_err(io(format!("cannot create {}", crate_dir.display())))?;
        let sdk = sdk_dependency(
            &crate_dir,
            &Path::new(env!("SLUICE_PLUGINS_SRC")).join("sdk-js"),
        )?;
        for (file, content) in crate::js::scaffold_files(name, &sdk) {
            let path = crate_dir.join(file);
            std::fs::write(&path, content)
                .map_err(io(format!("cannot write {}", path.display())))?;
        }
        return Ok(crate_dir);
    }
    std::fs::create_dir_all(crate_dir.join("src"))
        .map_err(io(format!("cannot create {}", crate_dir.display())))?;
    let sdk_dep = sdk_dependency(&crate_dir, &crate::sdk_path())?;

    let files: [(&str, String); 4] = [
        (".gitignore", "/target\n".to_owned()),
        (
            "Cargo.toml",
            format!(
                r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# A WebAssembly component for sluice, built with `sluice plugin build .`
# (or `cargo build --release --target wasm32-wasip2`).
crate-type = ["cdylib"]

[dependencies]
sluice-plugin-sdk = {{ path = "{sdk_dep}" }}

[profile.release]
opt-level = 3
strip = "debuginfo"
panic = "abort"

# Its own workspace, so that it builds wherever it was created.
[workspace]
"#
            ),
        ),
        (
            "src/lib.rs",
            r#"//! A sluice transform plugin. See the `sluice_plugin_sdk` docs for the full guide.

use sluice_plugin_sdk::{Config, Error, Outcome, Record, Transform};

/// Upper-cases UTF-8 values; drops tombstones; fails records that are not UTF-8.
pub struct Plugin {
    prefix: String,
}

impl Transform for Plugin {
    fn init(config: &Config) -> Result<Self, Error> {
        config.deny_unknown(&["prefix"])?;
        Ok(Plugin { prefix: config.get_or("prefix", "").to_owned() })
    }

    fn transform(&mut self, record: Record) -> Result<Outcome, Error> {
        let Some(text) = record.value_str()? else {
            return Ok(Outcome::Discard);
        };
        let out = format!("{}{}", self.prefix, text.to_uppercase());
        Ok(Outcome::Emit(record.with_value(out)))
    }
}

sluice_plugin_sdk::export_transform!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_cases() {
        let mut p = Plugin::init(&Config::from_pairs([("prefix", ">")])).unwrap();
        let out = p.transform(Record::from_value("hi")).unwrap();
        assert_eq!(out.records()[0].value_str().unwrap(), Some(">HI"));
    }
}
"#
            .to_owned(),
        ),
        ("sample.jsonl", SAMPLE_JSONL.to_owned()),
    ];
    for (file, content) in &files {
        let path = crate_dir.join(file);
        std::fs::write(&path, content).map_err(io(format!("cannot write {}", path.display())))?;
    }
    Ok(crate_dir)
}

/// How a new plugin in `plugin_dir` names the SDK at `sdk`: by a relative path when both
/// are in one tree, else by its absolute path.
fn sdk_dependency(plugin_dir: &Path, sdk: &Path) -> Result<String, TransformError> {
    let plugin_abs = std::fs::canonicalize(plugin_dir)
        .map_err(io(format!("cannot resolve {}", plugin_dir.display())))?;
    let sdk = std::fs::canonicalize(sdk).map_err(io(format!(
        "cannot find the plugin SDK at {} (scaffolding needs a sluice source checkout)",
        sdk.display()
    )))?;
    let dep = relative_path(&plugin_abs, &sdk).unwrap_or(sdk);
    Ok(dep.to_string_lossy().replace('\\', "/"))
}

/// `to` relative to `from` (both absolute), e.g. `../../plugins/sdk`.
fn relative_path(from: &Path, to: &Path) -> Option<PathBuf> {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    // Only when they share more than the root: otherwise absolute is clearer.
    if common < 2
        || from
            .iter()
            .chain(&to)
            .any(|c| matches!(c, PathPart::ParentDir))
    {
        return None;
    }
    let mut rel = PathBuf::new();
    for _ in common..from.len() {
        rel.push("..");
    }
    for part in &to[common..] {
        rel.push(part.as_os_str());
    }
    Some(rel)
}

/// The language a plugin is written in. A plugin directory says which by its manifest:
/// `Cargo.toml` (Rust), `pyproject.toml` (Python) or `package.json` (JavaScript).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginLanguage {
    /// A crate built for `wasm32-wasip2` with the Rust SDK (`plugins/sdk`).
    Rust,
    /// `plugin.py`, built by componentize-py with the Python SDK (`plugins/sdk-python`).
    Python,
    /// `plugin.js`, built by componentize-js with the JavaScript SDK (`plugins/sdk-js`).
    Js,
}

impl PluginLanguage {
    /// The language of the plugin in `dir`, from its manifest.
    pub fn of_dir(dir: &Path) -> Result<PluginLanguage, TransformError> {
        if dir.join("Cargo.toml").is_file() {
            Ok(PluginLanguage::Rust)
        } else if dir.join("pyproject.toml").is_file() {
            Ok(PluginLanguage::Python)
        } else if dir.join("package.json").is_file() {
            Ok(PluginLanguage::Js)
        } else {
            Err(TransformError::Usage(format!(
                "{} has no Cargo.toml (Rust), pyproject.toml (Python) or package.json (JavaScript); create a plugin with `sluice plugin new NAME --lang rust|python|js`",
                dir.display()
            )))
        }
    }
}

/// Builds the plugin in `dir` and returns the path of its `.wasm` component: a Rust crate
/// with cargo for `wasm32-wasip2` (release), a Python plugin with componentize-py, a
/// JavaScript plugin with componentize-js. The
/// tool's progress and diagnostics go to stderr.
///
/// Fails with "run `rustup target add wasm32-wasip2`" when the target is missing, and
/// names the command that installs componentize-py or componentize-js when it is.
pub fn build_plugin(dir: &Path) -> Result<PathBuf, TransformError> {
    match PluginLanguage::of_dir(dir)? {
        PluginLanguage::Python => return crate::python::build(dir),
        PluginLanguage::Js => return crate::js::build(dir),
        PluginLanguage::Rust => {}
    }
    let manifest = dir.join("Cargo.toml");
    toolchain::check_wasm_target().map_err(TransformError::Build)?;
    let output = toolchain::nested_cargo()
        .args(["build", "--release", "--target", toolchain::WASM_TARGET])
        .args([
            "--message-format",
            "json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(&manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| TransformError::Build(format!("cannot run cargo: {e}")))?;
    if !output.status.success() {
        return Err(TransformError::Build(format!(
            "cargo build for {} failed ({}); see the diagnostics above",
            manifest.display(),
            output.status
        )));
    }
    let manifest_abs = std::fs::canonicalize(&manifest).unwrap_or(manifest.clone());
    let mut wasm = None;
    for line in output.stdout.split(|b| *b == b'\n') {
        let Ok(msg) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_ours = msg["manifest_path"]
            .as_str()
            .is_some_and(|p| Path::new(p) == manifest_abs);
        if !is_ours {
            continue;
        }
        for f in msg["filenames"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_str().filter(|f| f.ends_with(".wasm")) {
                wasm = Some(PathBuf::from(f));
            }
        }
    }
    wasm.ok_or_else(|| {
        TransformError::Build(format!(
            "cargo built {} but produced no .wasm; is `crate-type = [\"cdylib\"]` set in [lib]?",
            manifest.display()
        ))
    })
}

/// The result of one input line of [`test_plugin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginTestCase {
    /// 1-based line number in the input file.
    pub line: usize,
    /// The input record.
    pub input: Record,
    /// What the plugin made of it. A batch failure (trap, timeout...) is shown as
    /// `Outcome::Failed` with the error text; the plugin is re-instantiated for the next
    /// line.
    pub outcome: Outcome,
    /// Wall time of the guest call.
    pub elapsed: Duration,
}

/// Runs a plugin on each record of a JSON-lines file, one call per record.
///
/// Each non-empty line is an object with optional fields `key`, `value` (a JSON string
/// is used as its UTF-8 bytes, `null` or absent is null, any other JSON value is its
/// serialization), `headers` (an object: name to string/null/JSON), `topic` (default
/// `test`), `partition` (default 0), `offset` (default: line number - 1) and `timestamp`
/// (ms; default none).
pub fn test_plugin(
    engine: &TransformEngine,
    spec: &PluginSpec,
    input_jsonl: &Path,
) -> Result<Vec<PluginTestCase>, TransformError> {
    let file = std::fs::File::open(input_jsonl).map_err(io(format!(
        "cannot open test input {}",
        input_jsonl.display()
    )))?;
    let mut records = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io(format!("cannot read {}", input_jsonl.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        let record = parse_test_line(&line, i as i64).map_err(|e| {
            TransformError::Usage(format!("{}:{}: {e}", input_jsonl.display(), i + 1))
        })?;
        records.push((i + 1, record));
    }
    let mut chain = TransformChain::new(engine, "plugin-test", std::slice::from_ref(spec))?;
    let mut cases = Vec::with_capacity(records.len());
    for (line, record) in records {
        let input = record.clone();
        let started = Instant::now();
        let result = chain.process(vec![record]);
        let elapsed = started.elapsed();
        let outcome = match result {
            Ok(mut outcomes) => outcomes.pop().unwrap_or(Outcome::Records(Vec::new())),
            Err(e) => Outcome::Failed {
                plugin: spec.name.clone(),
                message: e.to_string(),
            },
        };
        cases.push(PluginTestCase {
            line,
            input,
            outcome,
            elapsed,
        });
    }
    Ok(cases)
}

/// One line per case for `sluice plugin test`, e.g.
/// `line 1: key="k" value="#1*a@2" -> 1 record: value="{...}" (0.21 ms)` or
/// `line 2: key=null value="x" -> FAILED in parse: malformed word event ... (0.05 ms)`.
impl std::fmt::Display for PluginTestCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {} -> ", self.line, summarize(&self.input))?;
        match &self.outcome {
            Outcome::Records(rs) if rs.is_empty() => f.write_str("filtered out")?,
            Outcome::Records(rs) => {
                write!(
                    f,
                    "{} record{}:",
                    rs.len(),
                    if rs.len() == 1 { "" } else { "s" }
                )?;
                for r in rs {
                    write!(f, " [{}]", summarize(r))?;
                }
            }
            Outcome::Failed { plugin, message } => write!(f, "FAILED in {plugin}: {message}")?,
            Outcome::NotIsolated { plugin, reason } => {
                write!(f, "NOT ISOLATED in {plugin}: {reason}")?
            }
        }
        write!(f, " ({:.2} ms)", self.elapsed.as_secs_f64() * 1000.0)
    }
}

/// The bytes a JSON value stands for in a test line: a string's UTF-8, `{"base64": "…"}`'s
/// decoded bytes, any other JSON its serialization; `null` is none.
fn json_bytes(v: &Value) -> Result<Option<Vec<u8>>, String> {
    use base64::Engine;
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone().into_bytes())),
        Value::Object(o) if o.len() == 1 && o.contains_key("base64") => match &o["base64"] {
            Value::String(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map(Some)
                .map_err(|e| format!("{{\"base64\": …}} is not base64: {e}")),
            _ => Err("{\"base64\": …} needs a string".into()),
        },
        other => Ok(Some(other.to_string().into_bytes())),
    }
}

/// A byte field in the JSON shape of a record: a string when it is UTF-8,
/// `{"base64": "…"}` otherwise; `null` when absent.
fn bytes_json(bytes: Option<&[u8]>) -> Value {
    use base64::Engine;
    match bytes {
        None => Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(text) => Value::String(text.to_string()),
            Err(_) => serde_json::json!({
                "base64": base64::engine::general_purpose::STANDARD.encode(b)
            }),
        },
    }
}

/// A record in the JSON shape that `sluice inspect` prints and `sluice plugin test --input`
/// reads: `{"topic", "partition", "offset", "timestamp", "key", "value", "headers"}`, keys,
/// values and header values as strings when UTF-8, `{"base64": "…"}` otherwise. Headers
/// are an object: of two headers with one name, the last is kept.
pub fn record_to_json(record: &Record) -> Value {
    let headers: serde_json::Map<String, Value> = record
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), bytes_json(value.as_deref())))
        .collect();
    serde_json::json!({
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": bytes_json(record.key.as_deref()),
        "value": bytes_json(record.value.as_deref()),
        "headers": headers,
    })
}

fn parse_test_line(line: &str, index: i64) -> Result<Record, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(obj) = v else {
        return Err(
            "expected a JSON object like {\"key\": ..., \"value\": ..., \"headers\": {...}}".into(),
        );
    };
    let known = [
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        "timestamp",
    ];
    if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown field `{k}` (known: {})", known.join(", ")));
    }
    let int = |k: &str| -> Result<Option<i64>, String> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| format!("`{k}` must be an integer")),
        }
    };
    let headers = match obj.get("headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(h)) => h
            .iter()
            .map(|(k, v)| {
                json_bytes(v)
                    .map(|b| (k.clone(), b))
                    .map_err(|e| format!("header `{k}`: {e}"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`headers` must be an object of name: value".into()),
    };
    Ok(Record {
        topic: obj
            .get("topic")
            .and_then(Value::as_str)
            .unwrap_or("test")
            .to_owned(),
        partition: int("partition")?
            .map(i32::try_from)
            .transpose()
            .map_err(|_| "`partition` out of range".to_string())?
            .unwrap_or(0),
        offset: int("offset")?.unwrap_or(index),
        timestamp: int("timestamp")?,
        key: match obj.get("key") {
            Some(v) => json_bytes(v).map_err(|e| format!("`key`: {e}"))?,
            None => None,
        },
        value: match obj.get("value") {
            Some(v) => json_bytes(v).map_err(|e| format!("`value`: {e}"))?,
            None => None,
        },
        headers,
    })
}

/// `key="k1" value="hello"`, whole (a plugin's output is what is being tested: nothing of
/// it is cut), with the headers when there are any.
fn summarize(r: &Record) -> String {
    let show = |v: &Option<Vec<u8>>| match v {
        None => "null".to_owned(),
        Some(b) => format!("{:?}", String::from_utf8_lossy(b)),
    };
    let mut line = format!("key={} value={}", show(&r.key), show(&r.value));
    for (name, value) in &r.headers {
        line.push_str(&format!(" header {name:?}={}", show(value)));
    }
    line
}

impl PluginTestCase {
    /// The case as one JSON object (`sluice plugin test --format json`): `line`, `input`,
    /// `outcome` (`records`, `filtered`, `failed`, `not_isolated`), `records` (every
    /// output), `plugin` and `error` of a failure, `elapsed_ms`.
    pub fn to_json(&self) -> Value {
        let mut case = serde_json::json!({
            "line": self.line,
            "input": record_to_json(&self.input),
            "elapsed_ms": self.elapsed.as_secs_f64() * 1000.0,
        });
        let fields = match &self.outcome {
            Outcome::Records(rs) if rs.is_empty() => {
                serde_json::json!({"outcome": "filtered", "records": []})
            }
            Outcome::Records(rs) => serde_json::json!({
                "outcome": "records",
                "records": rs.iter().map(record_to_json).collect::<Vec<_>>(),
            }),
            Outcome::Failed { plugin, message } => {
                serde_json::json!({"outcome": "failed", "plugin": plugin, "error": message})
            }
            Outcome::NotIsolated { plugin, reason } => {
                serde_json::json!({"outcome": "not_isolated", "plugin": plugin, "error": reason})
            }
        };
        if let (Value::Object(case), Value::Object(fields)) = (&mut case, fields) {
            case.extend(fields);
        }
        case
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_test_lines() {
        let r = parse_test_line(
            r#"{"key":"k","value":{"a":1},"headers":{"h":"v","n":null},"offset":7}"#,
            0,
        )
        .unwrap();
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.value.as_deref(), Some(&br#"{"a":1}"#[..]));
        assert_eq!(
            r.headers,
            vec![("h".into(), Some(b"v".to_vec())), ("n".into(), None)]
        );
        assert_eq!(r.offset, 7);
        assert_eq!(parse_test_line("{}", 3).unwrap().offset, 3);
        assert!(parse_test_line("[1]", 0).is_err());
        assert!(
            parse_test_line(r#"{"valeu":1}"#, 0)
                .unwrap_err()
                .contains("valeu")
        );
    }

    /// What `sluice inspect` prints, `plugin test` reads back, bytes that are not UTF-8
    /// included.
    #[test]
    fn the_json_shape_of_a_record_round_trips() {
        let record = Record {
            topic: "t".into(),
            partition: 2,
            offset: 41,
            timestamp: Some(1_700_000_000_000),
            key: Some(vec![0xff, 0x00, 0x41]),
            value: Some(b"#1*a@2".to_vec()),
            headers: vec![
                ("text".into(), Some(b"v".to_vec())),
                ("raw".into(), Some(vec![0xc3, 0x28])),
                ("null".into(), None),
            ],
        };
        let json = record_to_json(&record);
        assert_eq!(json["key"], serde_json::json!({"base64": "/wBB"}));
        assert_eq!(json["value"], "#1*a@2");
        let back = parse_test_line(&json.to_string(), 0).unwrap();
        assert_eq!(back, record);
        let bad = parse_test_line(r#"{"value": {"base64": "%%%"}}"#, 0).unwrap_err();
        assert!(
            bad.contains("`value`") && bad.contains("not base64"),
            "{bad}"
        );
    }

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_path(Path::new("/r/a/b"), Path::new("/r/plugins/sdk")),
            Some(PathBuf::from("../../plugins/sdk"))
        );
        assert_eq!(
            relative_path(Path::new("/tmp/x"), Path::new("/r/sdk")),
            None
        );
    }
}
