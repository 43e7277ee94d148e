//! Values that hold secrets: [`Secret`] (a token, a password), [`SecretUrl`] (a database
//! URL) and [`Properties`] (string settings, some keys secret). Their `Debug` and `Display`
//! never print the secret; the value itself only through `expose`.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Deserializer};

use super::redact::{MASK, is_secret_key, redact_url};

/// A secret string (a token, a password): `Debug` and `Display` print `***`; the value
/// itself only through [`Secret::expose`], at the one place that hands it on.
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself: for the client that needs it, never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{MASK}\"")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_string())
    }
}

/// A URL that may carry a password (a database URL): `Debug` and `Display` print it as
/// [`redact_url`] does; the URL itself only through [`SecretUrl::expose`].
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its secrets: for the database driver, never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its password and secret query parameters replaced by `***`.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.redacted(), f)
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        Self(url.to_string())
    }
}

/// A map of string settings (`kafka.properties`, a transform's `config`) that reads like a
/// `BTreeMap<String, String>`, but whose `Debug` and [`Properties::redacted`] hide the values
/// of secret keys ([`is_secret_key`]). YAML numbers and booleans are accepted and kept as
/// their text (librdkafka wants strings).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Properties(BTreeMap<String, String>);

impl Properties {
    /// Each key with its value, or `***` for a secret key.
    pub fn redacted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(key, value)| {
            let shown = if is_secret_key(key) {
                MASK
            } else {
                value.as_str()
            };
            (key.as_str(), shown)
        })
    }

    /// The plain map, secrets included: for the client that needs them.
    pub fn expose(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

impl Deref for Properties {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Properties {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a> IntoIterator for &'a Properties {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl From<BTreeMap<String, String>> for Properties {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self(map)
    }
}

impl FromIterator<(String, String)> for Properties {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.redacted()).finish()
    }
}

impl<'de> Deserialize<'de> for Properties {
    /// librdkafka wants strings; YAML users write `10000` and `true`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, serde_json::Value>::deserialize(deserializer)?;
        raw.into_iter()
            .map(|(key, value)| match value {
                serde_json::Value::String(text) => Ok((key, text)),
                serde_json::Value::Number(n) => Ok((key, n.to_string())),
                serde_json::Value::Bool(b) => Ok((key, b.to_string())),
                other => {
                    let kind = match other {
                        serde_json::Value::Null => "null",
                        serde_json::Value::Array(_) => "a list",
                        _ => "a mapping",
                    };
                    Err(serde::de::Error::custom(format!(
                        "property {key} must be a string, number or boolean, not {kind}"
                    )))
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_types_print_masked() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret} {secret:?}"), "*** \"***\"");
        assert_eq!(secret.expose(), "hunter2");
        let url = SecretUrl::new("postgres://u:hunter2@h/db?password=hunter2");
        assert_eq!(format!("{url}"), "postgres://u:***@h/db?password=***");
        assert!(!format!("{url:?}").contains("hunter2"));
        assert!(url.expose().contains("hunter2"));
        let properties: Properties = [
            ("sasl.password".to_string(), "hunter2".to_string()),
            ("sasl.username".to_string(), "app".to_string()),
        ]
        .into_iter()
        .collect();
        let shown = format!("{properties:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("app"),
            "{shown}"
        );
        assert_eq!(properties["sasl.password"], "hunter2");
    }
}
