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
/// [`redact_url`] does, or as the file wrote it when it came from `${…}`; the URL itself
/// only through [`SecretUrl::expose`].
#[derive(Clone, Default)]
pub struct SecretUrl {
    url: String,
    /// How it is shown when it came from `${…}`: as written (`${DATABASE_URL}`).
    shown: Option<String>,
}

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            shown: None,
        }
    }

    /// The URL with its secrets: for the database driver, never for a message.
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// The URL's scheme (`postgres`, `mysql`, …): what names the database.
    pub fn scheme(&self) -> &str {
        self.url.split("://").next().unwrap_or_default()
    }

    /// The URL as it is shown: with its password and secret query parameters replaced by
    /// `***`, or as the file wrote it when it came from `${…}`.
    pub fn redacted(&self) -> String {
        self.shown.clone().unwrap_or_else(|| redact_url(&self.url))
    }

    /// Shows the URL as `shown` (the file's `${…}` text, secrets written out hidden).
    pub fn set_shown(&mut self, shown: impl Into<String>) {
        self.shown = Some(shown.into());
    }
}

/// Two URLs are the same when they reach the same database, however they are shown.
impl PartialEq for SecretUrl {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
    }
}

impl Eq for SecretUrl {}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
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
        Self::new(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

/// A map of string settings (`kafka.properties`, a transform's `config`) that reads like a
/// `BTreeMap<String, String>`, but whose `Debug` and [`Properties::redacted`] hide the values
/// of secret keys ([`is_secret_key`]) and show a value that came from `${…}` as the file
/// wrote it. YAML numbers and booleans are accepted and kept as their text (librdkafka
/// wants strings).
#[derive(Clone, Default)]
pub struct Properties(BTreeMap<String, String>, BTreeMap<String, String>);

impl Properties {
    /// Each key with its value as it is shown: as the file wrote it when it came from
    /// `${…}`, `***` for a secret key, the value itself otherwise.
    pub fn redacted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(key, value)| {
            let shown = if let Some(shown) = self.1.get(key) {
                shown.as_str()
            } else if is_secret_key(key) {
                MASK
            } else {
                value.as_str()
            };
            (key.as_str(), shown)
        })
    }

    /// Shows the value of `key` as `shown` (the file's `${…}` text).
    pub fn set_shown(&mut self, key: &str, shown: impl Into<String>) {
        self.1.insert(key.to_string(), shown.into());
    }

    /// The values that came from `${…}`, each with how it is shown.
    pub fn shown_values(&self) -> impl Iterator<Item = (&str, &str)> {
        self.1
            .iter()
            .filter_map(|(key, shown)| Some((self.0.get(key)?.as_str(), shown.as_str())))
    }

    /// The plain map, secrets included: for the client that needs them.
    pub fn expose(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

/// Two maps are the same when they hold the same settings, however they are shown.
impl PartialEq for Properties {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Properties {}

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
        Self(map, BTreeMap::new())
    }
}

impl FromIterator<(String, String)> for Properties {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Self(iter.into_iter().collect(), BTreeMap::new())
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
