//! `filter`: keeps the records whose JSON field matches a condition, drops the others.
//!
//! Config:
//!
//! | key     | meaning                                                                   |
//! |---------|---------------------------------------------------------------------------|
//! | `field` | required; a top-level name (`word`) or a JSON Pointer (`/user/country`)   |
//! | `op`    | `eq` (default), `ne`, `gt`, `ge`, `lt`, `le`, `contains`, `prefix`, `exists`, `missing` |
//! | `value` | the operand (required except for `exists`/`missing`); parsed as JSON when it is valid JSON (`42`, `true`, `"x"`), else taken as a string |
//!
//! Comparisons: `eq`/`ne` compare JSON values (numbers numerically, so `1` equals `1.0`);
//! `gt`/`ge`/`lt`/`le` compare two numbers or two strings, anything else does not match;
//! `contains`/`prefix` apply to strings (and `contains` to arrays, by element).
//! A value that is not JSON is a per-record error; tombstones are kept (they carry deletes).

use std::cmp::Ordering;

use sluice_plugin_sdk::serde_json::{self, Value};
use sluice_plugin_sdk::{Config, Error, Outcome, Record, Transform};

/// The comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Contains,
    Prefix,
    Exists,
    Missing,
}

/// The plugin: one condition.
pub struct Filter {
    pointer: String,
    op: Op,
    operand: Value,
}

impl Transform for Filter {
    fn init(config: &Config) -> Result<Self, Error> {
        config.deny_unknown(&["field", "op", "value"])?;
        let field = config.require("field")?;
        let pointer = if field.starts_with('/') {
            field.to_owned()
        } else {
            format!("/{}", field.replace('~', "~0").replace('/', "~1"))
        };
        let op = match config.get_or("op", "eq") {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "gt" => Op::Gt,
            "ge" => Op::Ge,
            "lt" => Op::Lt,
            "le" => Op::Le,
            "contains" => Op::Contains,
            "prefix" => Op::Prefix,
            "exists" => Op::Exists,
            "missing" => Op::Missing,
            other => {
                return Err(Error::new(format!(
                    "config `op`: unknown operator {other:?} (one of eq, ne, gt, ge, lt, le, contains, prefix, exists, missing)"
                )));
            }
        };
        let operand = match (op, config.get("value")) {
            (Op::Exists | Op::Missing, _) => Value::Null,
            (_, None) => {
                return Err(Error::new(format!(
                    "config `value` is required for op {:?}",
                    config.get_or("op", "eq")
                )));
            }
            (_, Some(raw)) => {
                serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
            }
        };
        Ok(Filter {
            pointer,
            op,
            operand,
        })
    }

    fn transform(&mut self, record: Record) -> Result<Outcome, Error> {
        let Some(json) = record.value_json()? else {
            return Ok(Outcome::Emit(record));
        };
        if self.matches(json.pointer(&self.pointer)) {
            Ok(Outcome::Emit(record))
        } else {
            Ok(Outcome::Discard)
        }
    }
}

impl Filter {
    fn matches(&self, field: Option<&Value>) -> bool {
        let Some(field) = field else {
            return self.op == Op::Missing || self.op == Op::Ne;
        };
        match self.op {
            Op::Exists => true,
            Op::Missing => false,
            Op::Eq => json_eq(field, &self.operand),
            Op::Ne => !json_eq(field, &self.operand),
            Op::Gt => compare(field, &self.operand) == Some(Ordering::Greater),
            Op::Ge => matches!(
                compare(field, &self.operand),
                Some(Ordering::Greater | Ordering::Equal)
            ),
            Op::Lt => compare(field, &self.operand) == Some(Ordering::Less),
            Op::Le => matches!(
                compare(field, &self.operand),
                Some(Ordering::Less | Ordering::Equal)
            ),
            Op::Contains => match (field, &self.operand) {
                (Value::String(s), Value::String(needle)) => s.contains(needle.as_str()),
                (Value::Array(items), needle) => items.iter().any(|i| json_eq(i, needle)),
                _ => false,
            },
            Op::Prefix => match (field, &self.operand) {
                (Value::String(s), Value::String(p)) => s.starts_with(p.as_str()),
                _ => false,
            },
        }
    }
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

sluice_plugin_sdk::export_transform!(Filter);

#[cfg(test)]
mod tests {
    use super::*;

    fn keeps(config: &[(&str, &str)], value: &str) -> bool {
        let mut f = Filter::init(&Config::from_pairs(config.iter().copied())).unwrap();
        match f.transform(Record::from_value(value)).unwrap() {
            Outcome::Emit(_) => true,
            Outcome::Discard => false,
            Outcome::EmitMany(_) => unreachable!(),
        }
    }

    #[test]
    fn equality_and_ordering() {
        let v = r#"{"word":"hello","n":5,"user":{"country":"NL"},"tags":["a","b"]}"#;
        assert!(keeps(&[("field", "word"), ("value", "hello")], v));
        assert!(keeps(&[("field", "word"), ("value", "\"hello\"")], v));
        assert!(!keeps(&[("field", "word"), ("value", "bye")], v));
        assert!(keeps(&[("field", "n"), ("value", "5.0")], v));
        assert!(keeps(&[("field", "n"), ("op", "gt"), ("value", "4")], v));
        assert!(!keeps(&[("field", "n"), ("op", "lt"), ("value", "5")], v));
        assert!(keeps(&[("field", "n"), ("op", "le"), ("value", "5")], v));
        assert!(!keeps(
            &[("field", "word"), ("op", "gt"), ("value", "5")],
            v
        ));
        assert!(keeps(
            &[("field", "/user/country"), ("op", "ne"), ("value", "DE")],
            v
        ));
        assert!(keeps(
            &[("field", "tags"), ("op", "contains"), ("value", "b")],
            v
        ));
        assert!(keeps(
            &[("field", "word"), ("op", "prefix"), ("value", "he")],
            v
        ));
        assert!(keeps(&[("field", "nope"), ("op", "missing")], v));
        assert!(!keeps(&[("field", "nope"), ("op", "exists")], v));
        assert!(!keeps(&[("field", "nope"), ("value", "1")], v));
    }

    #[test]
    fn config_and_record_errors() {
        assert!(Filter::init(&Config::default()).is_err());
        assert!(
            Filter::init(&Config::from_pairs([
                ("field", "a"),
                ("op", "like"),
                ("value", "x")
            ]))
            .is_err()
        );
        assert!(Filter::init(&Config::from_pairs([("field", "a")])).is_err());
        let mut f = Filter::init(&Config::from_pairs([("field", "a"), ("value", "1")])).unwrap();
        assert!(
            f.transform(Record::from_value("{"))
                .unwrap_err()
                .message()
                .contains("not JSON")
        );
        let mut tomb = Record::from_value("");
        tomb.value = None;
        assert!(matches!(f.transform(tomb).unwrap(), Outcome::Emit(_)));
    }
}
