//! The configuration as it is shown (the admin API's connector config, `sluice validate`'s
//! printout, messages that quote the file): each value that came from `${…}` as the file
//! wrote it ([`shown_document`]), or every secret masked ([`redact_document`]). What counts
//! as a secret and how a URL hides one is `redact.rs`; a string that quotes a secret
//! elsewhere is caught by the [`Scrubber`].

use super::origin::{Origins, pointer_segment};
use super::redact::{MASK, is_secret_key, redact_url, shown_text};
use super::scrub::Scrubber;

/// The document as it is shown (the admin API, printouts): each value that came from
/// `${…}` as the file wrote it ([`shown_text`]), never its text; the rest as
/// [`redact_document`] masks it, `scrubber` replacing any secret a string quotes.
pub fn shown_document(
    document: &serde_json::Value,
    origins: &Origins,
    scrubber: &Scrubber,
) -> serde_json::Value {
    fn walk(
        value: &serde_json::Value,
        secret: bool,
        pointer: &mut String,
        origins: &Origins,
        scrubber: &Scrubber,
    ) -> serde_json::Value {
        use serde_json::Value;
        // The written text is the file's own, not a text the environment gave.
        if let Some(origin) = origins.get(pointer.as_str()) {
            return Value::String(shown_text(origin, secret));
        }
        match value {
            Value::Null => Value::Null,
            Value::Array(items) if !secret => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| {
                        let len = pointer.len();
                        pointer.push_str(&format!("/{index}"));
                        let shown = walk(item, false, pointer, origins, scrubber);
                        pointer.truncate(len);
                        shown
                    })
                    .collect(),
            ),
            Value::Object(map) if !secret => Value::Object(
                map.iter()
                    .map(|(key, item)| {
                        let len = pointer.len();
                        pointer.push('/');
                        pointer.push_str(&pointer_segment(key));
                        let shown = walk(item, is_secret_key(key), pointer, origins, scrubber);
                        pointer.truncate(len);
                        (key.clone(), shown)
                    })
                    .collect(),
            ),
            _ if secret => Value::String(MASK.to_string()),
            Value::String(text) => Value::String(scrubber.scrub(&redact_url(text))),
            other => other.clone(),
        }
    }
    walk(document, false, &mut String::new(), origins, scrubber)
}

/// A copy of a parsed document with its secrets masked: values under secret keys become
/// `***` (whatever their type), URL passwords and secret query parameters as
/// [`redact_url`] prints them, and any other string that quotes one of those secrets.
pub fn redact_document(document: &serde_json::Value) -> serde_json::Value {
    let scrubber = Scrubber::from_document(document);
    fn walk(value: &serde_json::Value, secret: bool, scrubber: &Scrubber) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Null => Value::Null,
            _ if secret => Value::String(MASK.to_string()),
            Value::String(text) => Value::String(scrubber.scrub(&redact_url(text))),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| walk(item, false, scrubber))
                    .collect(),
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, item)| (key.clone(), walk(item, is_secret_key(key), scrubber)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    walk(document, false, &scrubber)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_documents_hide_every_secret() {
        let document = serde_json::json!({
            "sink": {"url": "postgres://app:hunter2@db/x?sslpassword=s3cr3t"},
            "transforms": [{"config": {"api_token": "tok-123456", "region": "eu"}}],
            "note": "copied tok-123456 here",
            "properties": {"sasl.password": 42}
        });
        let redacted = redact_document(&document).to_string();
        for secret in ["hunter2", "s3cr3t", "tok-123456", "42"] {
            assert!(!redacted.contains(secret), "{secret} shows in {redacted}");
        }
        assert!(redacted.contains("\"region\":\"eu\""), "{redacted}");
        assert!(redacted.contains("postgres://app:***@db/x"), "{redacted}");
    }
}
