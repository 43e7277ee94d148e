//! From a file to a checked [`Config`]: YAML parse, `${ENV}` interpolation, the JSON Schema,
//! deserialization, then the semantic checks the schema cannot express. Every problem found
//! is reported, each with the path of the value it is about.

use std::path::Path;

use super::files::resolve_relative_paths;
use super::interpolate::{interpolate, refused_types, show_as_written, type_whole_values};
use super::problem::{Problem, render_path};
use super::schema_check::schema_problems;
use super::scrub::Scrubber;
use super::semantic::semantic_problems;
use super::shown::shown_document;
use super::{Config, yaml};

/// A configuration that cannot be used, with every problem found.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{}", .problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n"))]
    Invalid { problems: Vec<Problem> },
}

impl ConfigError {
    /// One line per problem, prefixed by the file name, as `sluice validate` prints them.
    pub fn lines(&self, file: &str) -> Vec<String> {
        match self {
            ConfigError::Read { .. } => vec![self.to_string()],
            ConfigError::Invalid { problems } => problems
                .iter()
                .map(|p| {
                    if p.path.is_empty() {
                        format!("{file}: {}", p.message)
                    } else {
                        format!("{file}: {p}")
                    }
                })
                .collect(),
        }
    }
}

/// Reads and checks a configuration file, with the process environment for `${VAR}`.
/// The paths it names (plugins, `schema:` and `.avsc` files, TLS files) are resolved
/// against the file's directory, but not opened: `sluice run`, a reload and `sluice
/// validate` load through `server::load_checked`, which reads each of them as its user
/// will.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: path.display().to_string(),
        source,
    })?;
    let mut config = load_str(&text, &|name| std::env::var(name).ok())?;
    resolve_relative_paths(&mut config, path);
    Ok(config)
}

/// Checks configuration text; `lookup` resolves `${VAR}`. No message of the error quotes
/// a secret of the file: URLs show as [`redact_url`] prints them, values of secret keys as
/// `***`.
pub fn load_str(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut scrubber = Scrubber::default();
    check_str(text, lookup, &mut scrubber).map_err(|problems| ConfigError::Invalid {
        problems: problems
            .into_iter()
            .map(|p| Problem::new(p.path, scrubber.scrub(&p.message)))
            .collect(),
    })
}

/// A hint for a YAML error on a line that puts an unquoted `${…}` inside `{ … }`: the
/// braces are YAML's flow mapping, so the reference must be quoted.
fn flow_reference_hint(text: &str, line: usize) -> Option<String> {
    // The error may be reported at the line after the culprit (an unclosed mapping).
    let lines: Vec<&str> = text.lines().collect();
    let candidates = [line.checked_sub(1), line.checked_sub(2)];
    candidates.into_iter().flatten().find_map(|index| {
        let written = lines.get(index)?;
        let reference = written.find("${")?;
        let opened = written[..reference].contains('{');
        let quoted = written[..reference].ends_with('"') || written[..reference].ends_with('\'');
        (opened && !quoted).then(|| {
            format!(
                " (line {}: a ${{…}} inside {{ … }} must be quoted, as in token: \"${{SLUICE_ADMIN_TOKEN}}\": unquoted, its braces end YAML's {{ … }} mapping)",
                index + 1
            )
        })
    })
}

fn check_str(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    scrubber: &mut Scrubber,
) -> Result<Config, Vec<Problem>> {
    let parsed: serde_yaml_ng::Value = match serde_yaml_ng::from_str(text) {
        Ok(serde_yaml_ng::Value::Null) => {
            return Err(vec![Problem::new("", "the file is empty")]);
        }
        Ok(parsed) => parsed,
        Err(error) => {
            let mut message = match error.location() {
                Some(at) => format!(
                    "line {}, column {}: {}",
                    at.line(),
                    at.column(),
                    strip_location(&error.to_string())
                ),
                None => format!("not valid YAML: {error}"),
            };
            if let Some(hint) = error
                .location()
                .and_then(|at| flow_reference_hint(text, at.line()))
            {
                message.push_str(&hint);
            }
            return Err(vec![Problem::new("", message)]);
        }
    };

    let mut problems = Vec::new();
    let Some(mut document) = yaml::to_json(parsed, &mut problems) else {
        return Err(problems);
    };
    let written = document.clone();
    let origins = interpolate(&mut document, lookup, &mut problems);
    if !problems.is_empty() {
        // The messages quote the strings as written.
        scrubber.add_document(&written);
        return Err(problems);
    }
    drop(written);

    let expected = refused_types(&document, &origins);
    let typed = type_whole_values(&mut document, &origins, &expected, &mut problems);
    let refused: Vec<String> = problems.iter().map(|p| p.path.clone()).collect();
    scrubber.add_origins(&document, &origins, &typed);
    scrubber.add_document(&document);
    problems.extend(
        schema_problems(&document)
            .into_iter()
            .filter(|p| !refused.contains(&p.path)),
    );
    if !problems.is_empty() {
        return Err(problems);
    }

    let mut config: Config = match serde_path_to_error::deserialize(&document) {
        Ok(config) => config,
        Err(error) => {
            let path = render_serde_path(error.path());
            return Err(vec![Problem::new(path, error.into_inner().to_string())]);
        }
    };
    show_as_written(&mut config, &origins);
    // A connector without a registry of its own uses the `kafka:` section's.
    for connector in &mut config.connectors {
        if connector.schema_registry.is_none() {
            connector
                .schema_registry
                .clone_from(&config.kafka.schema_registry);
        }
    }

    problems.extend(semantic_problems(&config));
    config.shown = super::Document(shown_document(&document, &origins, scrubber));
    config.document = super::Document(document);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

fn render_serde_path(path: &serde_path_to_error::Path) -> String {
    let segments: Vec<String> = path
        .iter()
        .filter_map(|segment| match segment {
            serde_path_to_error::Segment::Seq { index } => Some(format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => Some(key.clone()),
            serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
            serde_path_to_error::Segment::Unknown => None,
        })
        .collect();
    render_path(&segments)
}
