//! The validate stage: what a record must satisfy before it is written, checked for each
//! record alone so that a bad one fails by itself.
//!
//! - On arrival: its size against the connector's `max_record_bytes`, and its header names
//!   (Kafka header names are strings; one that is not UTF-8 is refused here rather than
//!   crashing a client library that assumes UTF-8).
//! - After the transforms: the connector's optional JSON Schema (`schema:`), checked with
//!   the `jsonschema` crate; the error names the failing keyword and instance path. The
//!   schema may `$ref` other files, relative to its own (`"$ref": "common.json#/$defs/id"`);
//!   nothing is fetched over the network.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::record::Record;

/// Why a connector's `schema:` file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not JSON: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{} is not a valid JSON Schema: {message}", path.display())]
    Compile { path: PathBuf, message: String },
}

/// A connector's compiled JSON Schema for transformed values.
pub struct RecordSchema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for RecordSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordSchema")
    }
}

impl RecordSchema {
    /// Reads and compiles a schema file. A relative `$ref` is read from the file's
    /// directory.
    pub fn load(path: &Path) -> Result<Self, SchemaError> {
        let text = std::fs::read(path).map_err(|source| SchemaError::Read {
            path: path.to_owned(),
            source,
        })?;
        let schema: Value = serde_json::from_slice(&text).map_err(|source| SchemaError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let compile_error = |message| SchemaError::Compile {
            path: path.to_owned(),
            message,
        };
        let absolute = std::path::absolute(path).map_err(|e| compile_error(e.to_string()))?;
        jsonschema::options()
            .with_base_uri(file_uri(&absolute))
            .with_retriever(FileRetriever)
            .build(&schema)
            .map(|validator| Self { validator })
            .map_err(|e| compile_error(e.to_string()))
    }

    /// Compiles a schema document (one that references no other file).
    pub fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::options()
            .with_retriever(FileRetriever)
            .build(schema)
            .map(|validator| Self { validator })
            .map_err(|e| e.to_string())
    }

    /// Checks one value. The error names the keyword that failed, where in the value, and
    /// why: `keyword "type" at /uid: "x" is not of type "integer"`.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        match self.validator.iter_errors(value).next() {
            None => Ok(()),
            Some(error) => {
                let schema_path = error.schema_path().to_string();
                let keyword = schema_path.rsplit('/').next().unwrap_or_default();
                let at = error.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                Err(format!("keyword \"{keyword}\" at {at}: {error}"))
            }
        }
    }
}

/// Reads the files a schema `$ref`s (`file:` URIs, which relative references beside a
/// schema file become); refuses anything else, so that loading a configuration never
/// reaches the network.
struct FileRetriever;

impl jsonschema::Retrieve for FileRetriever {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        if uri.scheme().as_str() != "file" {
            return Err(format!(
                "sluice reads referenced schemas from files only: write the $ref relative to the schema file (\"common.json#/$defs/id\"), or copy {uri} beside it"
            )
            .into());
        }
        let path = path_of(&uri.path().decode().to_bytes());
        let text =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_slice(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()).into())
    }
}

#[cfg(unix)]
fn path_of(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

#[cfg(not(unix))]
fn path_of(bytes: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
}

/// `/etc/sluice/word schema.json` -> `file:///etc/sluice/word%20schema.json`.
fn file_uri(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path.to_string_lossy().replace('\\', "/").into_bytes();
    let mut uri = String::from("file://");
    if !bytes.starts_with(b"/") {
        uri.push('/');
    }
    for byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

/// The bytes a record occupies: key, value and headers.
pub fn record_bytes(record: &Record) -> u64 {
    let headers: usize = record
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.as_ref().map_or(0, Vec::len))
        .sum();
    (record.key.as_ref().map_or(0, Vec::len) + record.value.as_ref().map_or(0, Vec::len) + headers)
        as u64
}

/// Checks a record as it arrives: `Err` with the cause when it is larger than `max_bytes`.
pub fn check_size(record: &Record, max_bytes: u64) -> Result<(), String> {
    let size = record_bytes(record);
    if size > max_bytes {
        Err(format!(
            "record is {size} bytes (key, value and headers), more than max_record_bytes ({max_bytes})"
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_errors_name_keyword_and_path() {
        let schema = RecordSchema::compile(&json!({
            "type": "object",
            "required": ["uid"],
            "properties": { "uid": { "type": "integer" }, "word": { "maxLength": 3 } }
        }))
        .unwrap();
        assert!(schema.check(&json!({"uid": 1, "word": "abc"})).is_ok());
        let error = schema.check(&json!({"uid": "x"})).unwrap_err();
        assert!(error.starts_with("keyword \"type\" at /uid:"), "{error}");
        let error = schema.check(&json!({"word": "abc"})).unwrap_err();
        assert!(error.starts_with("keyword \"required\" at /:"), "{error}");
        let error = schema
            .check(&json!({"uid": 1, "word": "abcd"}))
            .unwrap_err();
        assert!(
            error.contains("maxLength") && error.contains("/word"),
            "{error}"
        );
    }

    #[test]
    fn broken_schemas_are_refused() {
        assert!(RecordSchema::compile(&json!({"type": "no-such-type"})).is_err());
        let missing = RecordSchema::load(Path::new("/nonexistent/schema.json")).unwrap_err();
        assert!(missing.to_string().contains("cannot read"), "{missing}");
    }

    #[test]
    fn a_schema_may_ref_files_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("schemas dir");
        std::fs::create_dir(&nested).unwrap();
        std::fs::write(
            nested.join("common.json"),
            r#"{ "$defs": { "uid": { "type": "integer", "minimum": 1 } } }"#,
        )
        .unwrap();
        std::fs::write(
            nested.join("word.json"),
            r#"{ "type": "object", "required": ["uid"],
                 "properties": { "uid": { "$ref": "common.json#/$defs/uid" } } }"#,
        )
        .unwrap();
        let schema = RecordSchema::load(&nested.join("word.json")).expect("compiles");
        assert!(schema.check(&json!({"uid": 1})).is_ok());
        let error = schema.check(&json!({"uid": 0})).unwrap_err();
        assert!(
            error.contains("minimum") && error.contains("/uid"),
            "{error}"
        );

        // A relative path to the schema works the same.
        let cwd = std::env::current_dir().unwrap();
        let relative = pathdiff(&nested.join("word.json"), &cwd);
        assert!(
            RecordSchema::load(&relative).is_ok(),
            "{}",
            relative.display()
        );

        // A missing file is named.
        std::fs::write(
            nested.join("broken.json"),
            r#"{ "properties": { "uid": { "$ref": "missing.json" } } }"#,
        )
        .unwrap();
        let error = RecordSchema::load(&nested.join("broken.json"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("missing.json") && error.contains("cannot read"),
            "{error}"
        );

        // Nothing over the network.
        std::fs::write(
            nested.join("remote.json"),
            r#"{ "$ref": "https://example.com/schema.json" }"#,
        )
        .unwrap();
        let error = RecordSchema::load(&nested.join("remote.json"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("from files only"), "{error}");
    }

    /// `target` relative to `base` (both absolute), with `..` as needed.
    fn pathdiff(target: &Path, base: &Path) -> PathBuf {
        let target: Vec<_> = target.components().collect();
        let base: Vec<_> = base.components().collect();
        let common = target.iter().zip(&base).take_while(|(a, b)| a == b).count();
        let mut out = PathBuf::new();
        for _ in common..base.len() {
            out.push("..");
        }
        for component in &target[common..] {
            out.push(component);
        }
        out
    }

    #[test]
    fn size_counts_key_value_and_headers() {
        let mut record = Record::from_value("t", 0, 1, vec![0u8; 10]);
        record.key = Some(vec![0u8; 5]);
        record.headers = vec![("h".into(), Some(vec![0u8; 4]))];
        assert_eq!(record_bytes(&record), 20);
        assert!(check_size(&record, 20).is_ok());
        let error = check_size(&record, 19).unwrap_err();
        assert!(
            error.contains("20 bytes") && error.contains("max_record_bytes"),
            "{error}"
        );
    }
}
