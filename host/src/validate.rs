//! The validate stage: what a record must satisfy before it is written, checked for each
//! record alone so that a bad one fails by itself.
//!
//! - On arrival: its size against the connector's `max_record_bytes`, and its header names
//!   (Kafka header names are strings; one that is not UTF-8 is refused here rather than
//!   crashing a client library that assumes UTF-8).
//! - After the transforms: the connector's optional JSON Schema (`schema:`), checked with
//!   the `jsonschema` crate; the error names the failing keyword and instance path.

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
    /// Reads and compiles a schema file.
    pub fn load(path: &Path) -> Result<Self, SchemaError> {
        let text = std::fs::read(path).map_err(|source| SchemaError::Read {
            path: path.to_owned(),
            source,
        })?;
        let schema: Value = serde_json::from_slice(&text).map_err(|source| SchemaError::Parse {
            path: path.to_owned(),
            source,
        })?;
        Self::compile(&schema).map_err(|message| SchemaError::Compile {
            path: path.to_owned(),
            message,
        })
    }

    /// Compiles a schema document.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::validator_for(schema)
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
