//! A problem found in a configuration file: where (a path such as
//! `connectors[1].sink.key[0]`) and what.

use std::fmt;

/// One problem in a configuration file: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `connectors[1].sink.key[0]`, or empty for the whole file.
    pub path: String,
    /// What is wrong, and where possible how to fix it.
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// `["connectors", "[1]", "sink"]` -> `connectors[1].sink`.
pub fn render_path(segments: &[String]) -> String {
    let mut out = String::new();
    for segment in segments {
        if !segment.starts_with('[') && !out.is_empty() {
            out.push('.');
        }
        out.push_str(segment);
    }
    out
}
