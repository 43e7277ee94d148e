//! The last guard for messages built from values: a [`Scrubber`] knows the secrets of a
//! configuration and replaces them wherever a message quotes them.

use super::origin::{Origins, is_only_references};
use super::redact::{MASK, is_secret_key, redact_url, shown_text};
use super::{Config, Properties};

/// Replaces the secrets of a configuration wherever a message quotes them: the last guard
/// for messages built from values (a schema error that prints a whole mapping, a
/// `${…}` error that quotes its string). Each URL with a secret becomes its redacted form;
/// each value of a secret key becomes `***`.
#[derive(Debug, Default)]
pub struct Scrubber {
    /// (what a message may contain, what it shows instead), longest first.
    replacements: Vec<(String, String)>,
}

impl Scrubber {
    /// Collects the secrets of a parsed document: every string that [`redact_url`] changes,
    /// and every string under a secret key.
    pub fn from_document(document: &serde_json::Value) -> Self {
        let mut scrubber = Self::default();
        scrubber.add_document(document);
        scrubber
    }

    /// The secrets of a loaded configuration, for messages built outside loading (a
    /// plugin's `init` may quote its config): each value that came from `${…}` shows as the
    /// file wrote it, the sink URLs as they print, and the values of secret keys (of
    /// `kafka.properties`, of each transform's `config`) as `***`.
    pub fn of_config(config: &Config) -> Self {
        let mut scrubber = Self::default();
        let maps = std::iter::once(&config.kafka.properties).chain(
            config
                .connectors
                .iter()
                .flat_map(|c| c.transforms.iter().map(|t| &t.config)),
        );
        for map in maps {
            for (value, shown) in map.shown_values() {
                scrubber.add_shown(value, shown);
            }
        }
        for connector in &config.connectors {
            scrubber.add_shown(connector.sink.url.expose(), &connector.sink.url.redacted());
        }
        let mut document = serde_json::Map::new();
        let secrets = |map: &Properties| {
            map.expose()
                .iter()
                .filter(|(key, _)| is_secret_key(key))
                .map(|(key, value)| (key.clone(), serde_json::Value::String(value.clone())))
                .collect::<serde_json::Map<_, _>>()
        };
        document.insert(
            "kafka".into(),
            serde_json::Value::Object(secrets(&config.kafka.properties)),
        );
        let connectors = config
            .connectors
            .iter()
            .map(|connector| {
                let transforms: Vec<serde_json::Value> = connector
                    .transforms
                    .iter()
                    .map(|t| serde_json::Value::Object(secrets(&t.config)))
                    .collect();
                serde_json::json!({
                    "url": connector.sink.url.expose(),
                    "transforms": transforms,
                })
            })
            .collect();
        document.insert("connectors".into(), serde_json::Value::Array(connectors));
        scrubber.add_document(&serde_json::Value::Object(document));
        scrubber
    }

    /// Adds the secrets of another form of the document (after `${…}` interpolation, say).
    pub fn add_document(&mut self, document: &serde_json::Value) {
        self.walk(document, false);
        self.sort();
    }

    fn walk(&mut self, value: &serde_json::Value, secret: bool) {
        match value {
            // `${PW}` names where a secret comes from; it is none.
            serde_json::Value::String(text) if is_only_references(text) => {}
            serde_json::Value::String(text) => {
                if secret {
                    self.add_secret(text);
                } else {
                    self.add_url(text);
                }
            }
            serde_json::Value::Number(n) if secret => self.add_secret(&n.to_string()),
            serde_json::Value::Array(items) => {
                for item in items {
                    self.walk(item, secret);
                }
            }
            serde_json::Value::Object(map) => {
                for (key, item) in map {
                    self.walk(item, secret || is_secret_key(key));
                }
            }
            _ => {}
        }
    }

    /// Adds the values that came from `${…}` in `document` (as resolved): each shows as the
    /// file wrote it ([`shown_text`]), each reference's text as the reference. `typed` are
    /// the pointers of numeric and boolean fields: their text is a number or a flag, and
    /// messages say it. Call before [`add_document`](Self::add_document): what is added
    /// first wins.
    pub fn add_origins(
        &mut self,
        document: &serde_json::Value,
        origins: &Origins,
        typed: &[String],
    ) {
        for (pointer, origin) in origins {
            if typed.contains(pointer) {
                continue;
            }
            let Some(resolved) = document.pointer(pointer).and_then(|v| v.as_str()) else {
                continue;
            };
            // Secret when any part of its path is (`signing_key/0`, a list of secrets).
            let secret = pointer
                .split('/')
                .any(|key| is_secret_key(&key.replace("~1", "/").replace("~0", "~")));
            self.add_shown(resolved, &shown_text(origin, secret));
            for (reference, value) in &origin.references {
                self.add_shown(value, reference);
            }
        }
        self.sort();
    }

    /// Messages show `text` as `shown`: quoted at any length, bare when long enough not to
    /// be found inside unrelated words.
    pub fn add_shown(&mut self, text: &str, shown: &str) {
        if text.is_empty() || text == shown {
            return;
        }
        self.push(format!("\"{text}\""), format!("\"{shown}\""));
        let escaped = serde_json::to_string(text).unwrap_or_default();
        let shown_escaped = serde_json::to_string(shown).unwrap_or_default();
        self.push(escaped, shown_escaped);
        if text.chars().count() >= 8 {
            self.push(text.to_string(), shown.to_string());
        }
        self.sort();
    }

    fn add_url(&mut self, text: &str) {
        let redacted = redact_url(text);
        if redacted != text {
            self.push(text.to_string(), redacted.clone());
            // As a JSON string inside a printed mapping.
            let quoted = serde_json::to_string(text).unwrap_or_default();
            let quoted = quoted.trim_matches('"');
            if quoted != text {
                let redacted = serde_json::to_string(&redacted).unwrap_or_default();
                self.push(quoted.to_string(), redacted.trim_matches('"').to_string());
            }
        }
    }

    fn add_secret(&mut self, text: &str) {
        if text.is_empty() || text.contains(MASK) {
            return;
        }
        // Quoted, as most messages quote values: safe at any length.
        self.push(format!("\"{text}\""), format!("\"{MASK}\""));
        let escaped = serde_json::to_string(text).unwrap_or_default();
        self.push(escaped, format!("\"{MASK}\""));
        // Bare only when long enough not to be found inside unrelated words.
        if text.chars().count() >= 4 {
            self.push(text.to_string(), MASK.to_string());
        }
    }

    fn push(&mut self, from: String, to: String) {
        if !self.replacements.iter().any(|(f, _)| *f == from) {
            self.replacements.push((from, to));
        }
    }

    fn sort(&mut self) {
        self.replacements
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    }

    /// `message` with every known secret replaced. Longer secrets are replaced first, and
    /// what a replacement puts in is never searched again (a value shown as
    /// `${A:-localhost:9092}` keeps its default as written).
    pub fn scrub(&self, message: &str) -> String {
        // Each match first becomes a placeholder of private-use characters, which no
        // configuration text holds; the placeholders become their replacements last.
        let placeholder = |index: usize| {
            let digits: String = index
                .to_string()
                .chars()
                .filter_map(|d| d.to_digit(10))
                .filter_map(|d| char::from_u32(0xE100 + d))
                .collect();
            format!("\u{E000}{digits}\u{E001}")
        };
        let mut out = message.to_string();
        let mut used = Vec::new();
        for (index, (from, _)) in self.replacements.iter().enumerate() {
            if out.contains(from.as_str()) {
                out = out.replace(from.as_str(), &placeholder(index));
                used.push(index);
            }
        }
        for index in used {
            out = out.replace(&placeholder(index), &self.replacements[index].1);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubber_replaces_what_a_message_quotes() {
        let document = serde_json::json!({
            "kafka": { "properties": { "sasl.password": "hunter2", "ssl.key.password": 1234 } },
            "connectors": [{ "sink": { "url": "postgres://u:pw1@h/db?password=hunter3" } }]
        });
        let scrubber = Scrubber::from_document(&document);
        let message = format!("{document} is not of type \"array\"");
        let scrubbed = scrubber.scrub(&message);
        for secret in ["hunter2", "hunter3", "pw1", "1234"] {
            assert!(!scrubbed.contains(secret), "{secret} in {scrubbed}");
        }
        assert!(scrubbed.contains("postgres://u:***@h/db?password=***"));
        // Short secrets are not hunted for in unrelated words.
        let short = Scrubber::from_document(&serde_json::json!({ "token": "a" }));
        assert_eq!(short.scrub("a \"a\""), "a \"***\"");
    }
}
