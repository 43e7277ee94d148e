//! YAML as people write it: anchors and aliases (`&sink`, `*sink`, expanded by the parser)
//! and merge keys (`<<: *sink`, `<<: [*a, *b]`), turned into the JSON value that the rest of
//! loading (interpolation, the JSON Schema, deserialization) works on.

use serde_json::Value as Json;
use serde_yaml_ng::{Mapping, Value as Yaml};

use super::problem::{Problem, render_path};

/// The merge key of YAML 1.1.
const MERGE: &str = "<<";

/// Applies the merge keys of `value` and converts it to JSON; `None` with the problems
/// pushed, each with its path, when the document cannot be converted.
pub fn to_json(mut value: Yaml, problems: &mut Vec<Problem>) -> Option<Json> {
    let before = problems.len();
    merge_keys(&mut value, &mut Vec::new(), problems);
    if problems.len() > before {
        return None;
    }
    let json = convert(value, &mut Vec::new(), problems);
    (problems.len() == before).then_some(json)
}

/// Replaces every `<<` in the mappings of `value` by the entries it merges: keys written in
/// the mapping win over merged ones, and an earlier mapping of a `<<` list over a later one
/// (YAML 1.1's merge). Merged keys take the place of the `<<` entry, so that `columns`
/// keep the order the file shows. A merged mapping's own `<<` is applied first.
fn merge_keys(value: &mut Yaml, path: &mut Vec<String>, problems: &mut Vec<Problem>) {
    match value {
        Yaml::Mapping(map) => {
            for (key, item) in map.iter_mut() {
                path.push(key_name(key));
                merge_keys(item, path, problems);
                path.pop();
            }
            if map.contains_key(MERGE) {
                let merged = splice(std::mem::take(map), path, problems);
                *map = merged;
            }
        }
        Yaml::Sequence(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                path.push(format!("[{index}]"));
                merge_keys(item, path, problems);
                path.pop();
            }
        }
        Yaml::Tagged(tagged) => merge_keys(&mut tagged.value, path, problems),
        _ => {}
    }
}

fn splice(map: Mapping, path: &[String], problems: &mut Vec<Problem>) -> Mapping {
    let at = |rest: &[String]| {
        let mut segments = path.to_vec();
        segments.extend_from_slice(rest);
        render_path(&segments)
    };
    let written: Vec<Yaml> = map
        .keys()
        .filter(|key| key.as_str() != Some(MERGE))
        .cloned()
        .collect();
    let mut out = Mapping::with_capacity(map.len());
    for (key, value) in map {
        if key.as_str() != Some(MERGE) {
            out.insert(key, value);
            continue;
        }
        let sources = match value {
            Yaml::Mapping(source) => vec![source],
            Yaml::Sequence(items) => items
                .into_iter()
                .enumerate()
                .filter_map(|(index, item)| match item {
                    Yaml::Mapping(source) => Some(source),
                    other => {
                        problems.push(Problem::new(
                            at(&[MERGE.to_string(), format!("[{index}]")]),
                            format!(
                                "a merge list holds mappings (aliases such as *defaults), not {}",
                                kind(&other)
                            ),
                        ));
                        None
                    }
                })
                .collect(),
            other => {
                problems.push(Problem::new(
                    at(&[MERGE.to_string()]),
                    format!(
                        "the merge key << takes a mapping or a list of mappings (an alias such as *defaults, or [*a, *b]), not {}",
                        kind(&other)
                    ),
                ));
                Vec::new()
            }
        };
        for source in sources {
            for (key, value) in source {
                if !written.contains(&key) && !out.contains_key(&key) {
                    out.insert(key, value);
                }
            }
        }
    }
    out
}

fn convert(value: Yaml, path: &mut Vec<String>, problems: &mut Vec<Problem>) -> Json {
    match value {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(b),
        Yaml::Number(n) => {
            if let Some(u) = n.as_u64() {
                Json::from(u)
            } else if let Some(i) = n.as_i64() {
                Json::from(i)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Json::Null, Json::Number)
            }
        }
        Yaml::String(text) => Json::String(text),
        Yaml::Sequence(items) => Json::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(index, item)| {
                    path.push(format!("[{index}]"));
                    let item = convert(item, path, problems);
                    path.pop();
                    item
                })
                .collect(),
        ),
        Yaml::Mapping(map) => {
            let mut object = serde_json::Map::with_capacity(map.len());
            for (key, item) in map {
                let name = match &key {
                    Yaml::String(text) => text.clone(),
                    Yaml::Number(n) => n.to_string(),
                    Yaml::Bool(b) => b.to_string(),
                    Yaml::Null => "null".to_string(),
                    other => {
                        problems.push(Problem::new(
                            render_path(path),
                            format!("a key must be a plain value, not {}", kind(other)),
                        ));
                        continue;
                    }
                };
                path.push(name.clone());
                let item = convert(item, path, problems);
                path.pop();
                object.insert(name, item);
            }
            Json::Object(object)
        }
        Yaml::Tagged(tagged) => {
            problems.push(Problem::new(
                render_path(path),
                format!(
                    "YAML tags such as {} mean nothing in this file: remove the tag",
                    tagged.tag
                ),
            ));
            Json::Null
        }
    }
}

/// A key as a path segment.
fn key_name(key: &Yaml) -> String {
    match key {
        Yaml::String(text) => text.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        _ => "?".to_string(),
    }
}

/// What a value is, for a message (never the value itself: it may be a secret).
fn kind(value: &Yaml) -> &'static str {
    match value {
        Yaml::Null => "null",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Result<Json, Vec<String>> {
        let yaml: Yaml = serde_yaml_ng::from_str(text).expect("YAML");
        let mut problems = Vec::new();
        to_json(yaml, &mut problems).ok_or_else(|| problems.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn merges_mappings_in_place_with_written_keys_first() {
        let value = json(
            "base: &base { a: 1, b: 2, c: 3 }\nother: &other { c: 30, d: 40 }\nx: { z: 0, <<: [*base, *other], b: 20 }\n",
        )
        .unwrap();
        assert_eq!(
            value["x"].to_string(),
            r#"{"z":0,"a":1,"c":3,"d":40,"b":20}"#
        );
        assert!(value["base"].get("<<").is_none());
    }

    #[test]
    fn nested_merges_apply() {
        let value = json("a: &a { x: 1 }\nb: &b { <<: *a, y: 2 }\nc: { <<: *b, z: 3 }\n").unwrap();
        assert_eq!(value["c"].to_string(), r#"{"x":1,"y":2,"z":3}"#);
    }

    #[test]
    fn bad_merges_are_named_by_path() {
        let problems = json("list:\n  - { <<: 5 }\n  - { <<: [{ a: 1 }, x] }\n").unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("list[0].<<: the merge key << takes a mapping"));
        assert!(problems[1].starts_with("list[1].<<[1]: a merge list holds mappings"));
    }

    #[test]
    fn tags_are_refused() {
        let problems = json("a: { b: !secret x }\n").unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("a.b: YAML tags"), "{problems:?}");
    }
}
