//! `${VAR}` and `${VAR:-default}` in any string of the file, resolved from the environment
//! after YAML parsing, so that an error can name the path of the value that needed it.

use serde_json::Value;

use super::problem::{Problem, render_path};

/// Replaces every `${…}` in the string values of `value`, in place. `lookup` reads a variable.
/// A string that is one `${…}` and nothing else is re-read as a YAML scalar, so that
/// `tasks: ${TASKS:-2}` is the number 2. Problems are pushed with their paths.
pub fn interpolate(
    value: &mut Value,
    path: &mut Vec<String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) {
    match value {
        Value::String(text) if text.contains("${") => match expand(text, lookup) {
            Ok(expanded) => {
                let whole = text.starts_with("${")
                    && text.ends_with('}')
                    && text.matches("${").count() == 1;
                *value = if whole {
                    scalar(&expanded)
                } else {
                    Value::String(expanded)
                };
            }
            Err(message) => problems.push(Problem::new(render_path(path), message)),
        },
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                path.push(format!("[{index}]"));
                interpolate(item, path, lookup, problems);
                path.pop();
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                path.push(key.clone());
                interpolate(item, path, lookup, problems);
                path.pop();
            }
        }
        _ => {}
    }
}

/// A whole-value substitution keeps YAML's typing: numbers and booleans stay numbers and
/// booleans; anything else is a string.
fn scalar(text: &str) -> Value {
    match serde_yaml_ng::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
        _ => Value::String(text.to_string()),
    }
}

/// Expands one string. `$${` is a literal `${`.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
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
        match (lookup(name), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!(
                    "environment variable {name} is not set (write ${{{name}:-default}} to give a default)"
                ));
            }
        }
        rest = &body_start[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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
    fn whole_value_keeps_type() {
        let mut value = serde_json::json!({"tasks": "${N}", "url": "x${N}", "bad": ["${NOPE}"]});
        let mut problems = Vec::new();
        interpolate(&mut value, &mut Vec::new(), &env, &mut problems);
        assert_eq!(value["tasks"], serde_json::json!(4));
        assert_eq!(value["url"], serde_json::json!("x4"));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, "bad[0]");
    }
}
