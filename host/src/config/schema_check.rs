//! The JSON Schema of `connectors.yaml` (`schemas/connectors.schema.json`, compiled into
//! the binary) as a check of the document, its errors in the file's own paths.

use std::sync::OnceLock;

use serde_json::Value;

use super::problem::{Problem, render_path};

/// The JSON Schema of `connectors.yaml`, compiled into the binary.
pub const SCHEMA: &str = include_str!("../../../schemas/connectors.schema.json");

/// The built-in schema, compiled once.
pub(super) fn validator() -> Result<&'static jsonschema::Validator, &'static str> {
    static VALIDATOR: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| {
            let schema: Value = serde_json::from_str(SCHEMA).map_err(|e| e.to_string())?;
            jsonschema::validator_for(&schema).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(String::as_str)
}

pub(super) fn schema_problems(document: &Value) -> Vec<Problem> {
    let validator = match validator() {
        Ok(v) => v,
        Err(e) => {
            return vec![Problem::new(
                "",
                format!("internal: the built-in schema is broken: {e}"),
            )];
        }
    };
    let mut problems: Vec<Problem> = validator
        .iter_errors(document)
        .map(|error| {
            let pointer = error.instance_path().to_string();
            Problem::new(pointer_to_path(&pointer), schema_message(&error))
        })
        .collect();
    problems.dedup();
    problems
}

/// The schema's message, said the way a user of the file thinks of it.
fn schema_message(error: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    let value = error.instance();
    match error.kind() {
        Kind::Enum { options } => {
            let options: Vec<String> = options
                .as_array()
                .map(|o| o.iter().map(|v| v.to_string()).collect())
                .unwrap_or_default();
            format!("{value} is not one of {}", options.join(", "))
        }
        Kind::Pattern { pattern } if pattern.contains("(ms|s|m|h|d)") => {
            format!(
                "{value} is not a duration: write a number and a unit, ms, s, m, h or d (50ms, 2s, 5m, 7d)"
            )
        }
        Kind::Pattern { pattern } if pattern.starts_with("^(header:") => {
            format!("{value} is not an id source: write header:NAME or a JSON pointer such as /id")
        }
        Kind::Pattern { pattern } if pattern.contains("KiB") => {
            format!(
                "{value} is not a size: write bytes, or a number and a unit (512KiB, 4MiB, 1GB)"
            )
        }
        Kind::OneOfNotValid { .. }
            if error.schema_path().to_string().contains("size")
                || error.instance_path().to_string().ends_with("max_bytes") =>
        {
            format!(
                "{value} is not a size: write bytes, or a number and a unit (512KiB, 4MiB, 1GB)"
            )
        }
        Kind::OneOfNotValid { .. } if error.instance_path().to_string().ends_with("/sink/key") => {
            format!("{value} is not a key: write a list of column names ([id]) or record_key")
        }
        Kind::AdditionalProperties { unexpected } => {
            format!(
                "unknown field{} {}",
                if unexpected.len() > 1 { "s" } else { "" },
                unexpected.join(", ")
            )
        }
        // A mapping or a list of the wrong type said in full would bury the message (and
        // could hold a secret): name its kind instead.
        Kind::Type { .. } => match value.as_ref() {
            Value::Object(_) => error.to_string().replace(&value.to_string(), "a mapping"),
            Value::Array(_) => error.to_string().replace(&value.to_string(), "a list"),
            _ => error.to_string(),
        },
        _ => error.to_string(),
    }
}

/// `/connectors/1/sink/key/0` -> `connectors[1].sink.key[0]`.
pub fn pointer_to_path(pointer: &str) -> String {
    let mut segments = Vec::new();
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.chars().all(|c| c.is_ascii_digit()) {
            segments.push(format!("[{segment}]"));
        } else {
            segments.push(segment);
        }
    }
    render_path(&segments)
}
