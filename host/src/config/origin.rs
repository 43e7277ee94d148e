//! Where a value of the file came from: each string that held `${…}` references, as the
//! file wrote it and with what each reference resolved to ([`Origin`]), kept by the JSON
//! pointer of the value ([`Origins`]). Interpolation (`interpolate.rs`) records them;
//! showing the file (`redact.rs`, `shown.rs`) and scrubbing messages (`scrub.rs`) read them,
//! so that a value from the environment shows as its `${VAR}`, never as its text.

use std::collections::BTreeMap;

/// A string of the file that held `${…}` references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The text as the file wrote it: `postgres://u:${PW}@h/db`.
    pub written: String,
    /// The string is one reference and nothing else (`${TASKS:-2}`).
    pub whole: bool,
    /// Each reference as written, with the text it was resolved to.
    pub references: Vec<(String, String)>,
}

/// The strings that held references, by JSON pointer (`/connectors/0/sink/url`).
pub type Origins = BTreeMap<String, Origin>;

/// A JSON pointer's segment: `~` and `/` escaped.
pub fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// True when `text` is made of references only (`${PW}`, `${A}${B}`): shown as written, it
/// shows no secret of the file.
pub fn is_only_references(text: &str) -> bool {
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let Some(body) = rest.strip_prefix("${") else {
            return false;
        };
        let Some(end) = body.find('}') else {
            return false;
        };
        rest = &body[end + 1..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_references() {
        assert!(is_only_references("${PW}"));
        assert!(is_only_references("${A}${B:-x}"));
        assert!(!is_only_references("a${PW}"));
        assert!(!is_only_references("${PW}b"));
        assert!(!is_only_references(""));
    }
}
