//! `${VAR}` and `${VAR:-default}` in any string of the file, resolved from the environment
//! after YAML parsing, so that an error can name the path of the value that needed it.
//!
//! Each string that held a reference is remembered with the text the file wrote
//! ([`Origins`]): a value that came from the environment is shown as its `${VAR}`, never as
//! its text, and its text is hunted for in messages. A whole-value `${VAR}` stays a string:
//! it is typed by the field it fills ([`type_whole_values`]), not by how its text looks.

use jsonschema::{JsonType, JsonTypeSet};
use serde_json::Value;

use super::origin::{Origin, Origins, pointer_segment};
use super::problem::{Problem, render_path};
use super::redact::shown_text;
use super::{Config, is_secret_key};

/// Replaces every `${…}` in the string values of `value`, in place, and returns where each
/// resolved string came from. `lookup` reads a variable. Problems are pushed with their
/// paths.
pub fn interpolate(
    value: &mut Value,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Origins {
    let mut origins = Origins::new();
    walk(
        value,
        &mut Vec::new(),
        &mut String::new(),
        lookup,
        problems,
        &mut origins,
    );
    origins
}

fn walk(
    value: &mut Value,
    path: &mut Vec<String>,
    pointer: &mut String,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
    origins: &mut Origins,
) {
    match value {
        Value::String(text) if text.contains("${") => match expand_with_references(text, lookup) {
            Ok((expanded, references)) => {
                if !references.is_empty() {
                    let whole = references.len() == 1 && references[0].0 == *text;
                    origins.insert(
                        pointer.clone(),
                        Origin {
                            written: std::mem::take(text),
                            whole,
                            references,
                        },
                    );
                }
                *text = expanded;
            }
            Err(message) => problems.push(Problem::new(render_path(path), message)),
        },
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{index}"));
                path.push(format!("[{index}]"));
                walk(item, path, pointer, lookup, problems, origins);
                path.pop();
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&pointer_segment(key));
                path.push(key.clone());
                walk(item, path, pointer, lookup, problems, origins);
                path.pop();
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// Types each whole-value `${VAR}` by the field it fills. `expected` holds, by pointer, the
/// types the schema wants where a resolved string was refused for its type: a numeric or
/// boolean field parses the text, or is a problem that names the reference and its text
/// (`connectors[0].tasks: ${TASKS} is "abc", not a whole number`). A string field keeps
/// the text as written (`12e4`, `0x1F`, `00123`). Returns the pointers that were typed
/// (parsed or refused): fields whose text is a number or a flag, not a secret.
pub fn type_whole_values(
    document: &mut Value,
    origins: &Origins,
    expected: &[(String, JsonTypeSet)],
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let mut typed = Vec::new();
    for (pointer, types) in expected {
        let Some(origin) = origins.get(pointer).filter(|o| o.whole) else {
            continue;
        };
        // A string field keeps the text; a list or mapping is the schema's to refuse.
        let scalar = [JsonType::Integer, JsonType::Number, JsonType::Boolean]
            .iter()
            .any(|t| types.contains(*t));
        if types.contains(JsonType::String) || !scalar {
            continue;
        }
        let Some(slot) = document.pointer_mut(pointer) else {
            continue;
        };
        let Value::String(text) = slot else {
            continue;
        };
        match parse_typed(text.trim(), *types) {
            Ok(value) => *slot = value,
            Err(wanted) => problems.push(Problem::new(
                super::schema_check::pointer_to_path(pointer),
                format!("{} is {:?}, not {wanted}", origin.written, text),
            )),
        }
        typed.push(pointer.clone());
    }
    typed
}

/// Where the schema refuses a whole-value `${VAR}` for its type, the types it wants there:
/// the field decides how the text is read.
pub fn refused_types(document: &Value, origins: &Origins) -> Vec<(String, JsonTypeSet)> {
    use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
    let Ok(validator) = super::schema_check::validator() else {
        return Vec::new();
    };
    let mut refused: Vec<(String, JsonTypeSet)> = Vec::new();
    for error in validator.iter_errors(document) {
        let Kind::Type { kind } = error.kind() else {
            continue;
        };
        let pointer = error.instance_path().to_string();
        if !origins.get(&pointer).is_some_and(|o| o.whole)
            || refused.iter().any(|(p, _)| *p == pointer)
        {
            continue;
        }
        let types = match kind {
            TypeKind::Single(one) => JsonTypeSet::empty().insert(*one),
            TypeKind::Multiple(set) => *set,
        };
        refused.push((pointer, types));
    }
    refused
}

/// The typed values that print (URLs, string maps) show a value that came from `${…}` as
/// the file wrote it.
pub fn show_as_written(config: &mut Config, origins: &Origins) {
    for (pointer, origin) in origins {
        let segments: Vec<String> = pointer
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let index = |text: &str| text.parse::<usize>().ok();
        match segments.as_slice() {
            ["kafka", "properties", key] => config
                .kafka
                .properties
                .set_shown(key, shown_text(origin, is_secret_key(key))),
            ["connectors", c, "sink", "url"] => {
                if let Some(connector) = index(c).and_then(|c| config.connectors.get_mut(c)) {
                    connector.sink.url.set_shown(shown_text(origin, false));
                }
            }
            ["connectors", c, "transforms", t, "config", key] => {
                if let Some(transform) = index(c)
                    .and_then(|c| config.connectors.get_mut(c))
                    .and_then(|connector| index(t).and_then(|t| connector.transforms.get_mut(t)))
                {
                    transform
                        .config
                        .set_shown(key, shown_text(origin, is_secret_key(key)));
                }
            }
            _ => {}
        }
    }
}

/// The text as the first of `types` that reads it, or what was wanted.
fn parse_typed(text: &str, types: JsonTypeSet) -> Result<Value, &'static str> {
    let mut wanted = "a value of this field's type";
    for kind in types.iter() {
        match kind {
            JsonType::Integer => {
                if let Ok(n) = text.parse::<u64>() {
                    return Ok(Value::from(n));
                }
                if let Ok(n) = text.parse::<i64>() {
                    return Ok(Value::from(n));
                }
                wanted = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
                    "a whole number this field can hold (too large)"
                } else {
                    "a whole number"
                };
            }
            JsonType::Number => {
                if let Some(n) = text
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .and_then(serde_json::Number::from_f64)
                {
                    return Ok(Value::Number(n));
                }
                wanted = "a number";
            }
            JsonType::Boolean => match text {
                "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
                "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
                _ => wanted = "true or false",
            },
            _ => {}
        }
    }
    Err(wanted)
}

/// Expands one string. `$${` is a literal `${`.
#[cfg(test)]
fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    expand_with_references(text, lookup).map(|(expanded, _)| expanded)
}

/// Expands one string, with each reference as written and the text it became.
fn expand_with_references(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Vec<(String, String)>), String> {
    let mut references = Vec::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('$') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        if let Some(stripped) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = stripped;
            continue;
        }
        let Some(body_start) = after.strip_prefix("${") else {
            out.push('$');
            rest = &after[1..];
            continue;
        };
        let end = body_start
            .find('}')
            .ok_or_else(|| format!("unclosed \"${{\" in \"{text}\""))?;
        let body = &body_start[..end];
        let (name, default) = match body.find(":-") {
            Some(i) => (&body[..i], Some(&body[i + 2..])),
            None => (body, None),
        };
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!(
                "\"${{{body}}}\" is not a valid reference: write ${{NAME}} or ${{NAME:-default}}"
            ));
        }
        let resolved = match (lookup(name), default) {
            (Some(value), _) => value,
            (None, Some(default)) => default.to_string(),
            (None, None) => {
                return Err(format!(
                    "environment variable {name} is not set (write ${{{name}:-default}} to give a default)"
                ));
            }
        };
        out.push_str(&resolved);
        references.push((format!("${{{body}}}"), resolved));
        rest = &body_start[end + 1..];
    }
    out.push_str(rest);
    Ok((out, references))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("db".into()),
            "N" => Some("4".into()),
            _ => None,
        }
    }

    #[test]
    fn expands_and_defaults() {
        assert_eq!(expand("pg://${HOST}/x", &env).unwrap(), "pg://db/x");
        assert_eq!(expand("${MISSING:-7}", &env).unwrap(), "7");
        assert_eq!(
            expand("$${HOST} costs $5", &env).unwrap(),
            "${HOST} costs $5"
        );
        assert!(
            expand("${MISSING}", &env)
                .unwrap_err()
                .contains("MISSING is not set")
        );
        assert!(expand("${HOST", &env).unwrap_err().contains("unclosed"));
        assert!(
            expand("${a-b}", &env)
                .unwrap_err()
                .contains("not a valid reference")
        );
    }

    #[test]
    fn whole_values_stay_text_and_remember_what_was_written() {
        let mut value = serde_json::json!({
            "tasks": "${N}", "url": "x${N}", "bad": ["${NOPE}"], "escaped": "$${N}",
            "weird/key": "${MISSING:-0x1F}"
        });
        let mut problems = Vec::new();
        let origins = interpolate(&mut value, &env, &mut problems);
        assert_eq!(value["tasks"], serde_json::json!("4"));
        assert_eq!(value["url"], serde_json::json!("x4"));
        assert_eq!(value["escaped"], serde_json::json!("${N}"));
        assert_eq!(value["weird/key"], serde_json::json!("0x1F"));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, "bad[0]");
        assert!(origins["/tasks"].whole);
        assert_eq!(origins["/url"].written, "x${N}");
        assert!(!origins["/url"].whole);
        assert_eq!(
            origins["/url"].references,
            [("${N}".to_string(), "4".to_string())]
        );
        assert!(!origins.contains_key("/escaped"));
        assert_eq!(origins["/weird~1key"].written, "${MISSING:-0x1F}");
    }

    #[test]
    fn whole_values_are_typed_by_their_field() {
        let lookup = |name: &str| match name {
            "A" => Some("12e4".to_string()),
            "B" => Some("00123".to_string()),
            "C" => Some("abc".to_string()),
            "D" => Some("TRUE".to_string()),
            "E" => Some("99999999999999999999999".to_string()),
            _ => None,
        };
        let mut value = serde_json::json!({
            "text": "${A}", "count": "${B}", "bad": "${C}", "flag": "${D}", "big": "${E}"
        });
        let mut problems = Vec::new();
        let origins = interpolate(&mut value, &lookup, &mut problems);
        let integer = JsonTypeSet::empty().insert(JsonType::Integer);
        let expected = vec![
            ("/count".to_string(), integer),
            ("/bad".to_string(), integer),
            ("/big".to_string(), integer),
            (
                "/flag".to_string(),
                JsonTypeSet::empty().insert(JsonType::Boolean),
            ),
            (
                "/text".to_string(),
                JsonTypeSet::empty()
                    .insert(JsonType::String)
                    .insert(JsonType::Number),
            ),
        ];
        let typed = type_whole_values(&mut value, &origins, &expected, &mut problems);
        assert_eq!(value["text"], serde_json::json!("12e4"));
        assert_eq!(value["count"], serde_json::json!(123));
        assert_eq!(value["flag"], serde_json::json!(true));
        let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            shown,
            [
                "bad: ${C} is \"abc\", not a whole number",
                "big: ${E} is \"99999999999999999999999\", not a whole number this field can hold (too large)",
            ]
        );
        assert_eq!(typed, ["/count", "/bad", "/big", "/flag"]);
    }
}
