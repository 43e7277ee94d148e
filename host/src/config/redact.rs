//! Secrets never reach logs, errors or printed configuration: passwords in database URLs
//! (userinfo and query parameters), secret-looking keys of string maps
//! (`kafka.properties`, a transform's `config`), and the [`Secret`] types that hold them.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Deserializer};

/// What a hidden value prints as.
pub const MASK: &str = "***";

/// librdkafka properties that hold secrets without saying so in their name.
const SECRET_KEYS: &[&str] = &[
    // A private key in PEM form.
    "ssl.key.pem",
    // `clientSecret=…` and the like, for the built-in OIDC token refresh.
    "sasl.oauthbearer.config",
];

/// Words that make a key (a property, a URL query parameter) a secret, compared without
/// regard to case: `sasl.password`, `ssl.key.password`, `sslpassword`,
/// `sasl.oauthbearer.client.secret`, `api_token`, `…private.key.passphrase`, `api_key`,
/// `access_key_id`, `credentials`.
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "passphrase",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "accesskey",
    "private_key",
    "privatekey",
    "credential",
    // `errors.dlq.signing_key`.
    "signing_key",
];

/// True when the value of `key` must not be shown.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.contains(&key.as_str()) || SECRET_WORDS.iter().any(|word| key.contains(word))
}

/// `postgres://user:secret@host/db?sslpassword=x` -> `postgres://user:***@host/db?sslpassword=***`.
/// The password of the userinfo and the values of query parameters whose name says secret
/// ([`is_secret_key`]: `password`, `sslpassword`, `…token`, `…secret`) are hidden; paths
/// such as `sslkey=/etc/key.pem` stay. A libpq key/value string (`host=db password=x`) has
/// its secret values hidden the same way. Anything else comes back unchanged.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return redact_key_values(url);
    };
    let prefix = &url[..scheme_end + 3];
    let rest = &url[scheme_end + 3..];
    // The userinfo ends at the *last* `@`: a password may hold `/`, `?`, `#` or `@`
    // unencoded (a common mistake), and must be hidden all the same. An `@` further on (in
    // a query value) makes this hide more than the password, never less.
    let userinfo_end = rest
        .rfind('@')
        .filter(|&at| rest[..at].contains(':') || !rest[..at].contains(['/', '?', '#']));
    let host_start = userinfo_end.map_or(0, |at| at);
    let authority_end = host_start
        + rest[host_start..]
            .find(['/', '?', '#'])
            .unwrap_or(rest.len() - host_start);
    let mut out = String::with_capacity(url.len());
    out.push_str(prefix);
    if let Some(at) = userinfo_end {
        let userinfo = &rest[..at];
        match userinfo.find(':') {
            Some(colon) => {
                out.push_str(&userinfo[..colon]);
                out.push(':');
                out.push_str(MASK);
            }
            None => out.push_str(userinfo),
        }
    }
    out.push_str(&rest[host_start..authority_end]);
    let after = &rest[authority_end..];
    let (before_fragment, fragment) = match after.find('#') {
        Some(hash) => after.split_at(hash),
        None => (after, ""),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if is_secret_key(&percent_decode(key)) => {
                        format!("{key}={MASK}")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    out.push_str(fragment);
    out
}

/// `host=db password=x` -> `host=db password=***` (libpq's key/value connection strings;
/// a value in single quotes may hold spaces).
fn redact_key_values(text: &str) -> String {
    if !text.contains('=') {
        return text.to_string();
    }
    // libpq allows spaces around `=` (`password = x`): without them, each pair is one token.
    let text = &tight_equals(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let token_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let token = &rest[..token_end];
        match token.split_once('=') {
            Some((key, value)) if is_secret_key(key.trim()) => {
                out.push_str(key);
                out.push('=');
                out.push_str(MASK);
                if value.starts_with('\'') {
                    // Skip to the closing quote, which may lie past spaces.
                    let after_quote = &rest[key.len() + 2..];
                    let close = closing_quote(after_quote).map_or(after_quote.len(), |i| i + 1);
                    rest = &after_quote[close..];
                    continue;
                }
            }
            _ => out.push_str(token),
        }
        rest = &rest[token_end..];
        let spaces = rest
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(rest.len());
        out.push_str(&rest[..spaces]);
        rest = &rest[spaces..];
    }
    out
}

/// `key = value` -> `key=value`, outside single quotes.
fn tight_equals(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted && !escaped => {
                escaped = true;
                out.push(c);
                continue;
            }
            '\'' if !escaped => quoted = !quoted,
            '=' if !quoted => {
                while out.ends_with(char::is_whitespace) {
                    out.pop();
                }
                out.push('=');
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                continue;
            }
            _ => {}
        }
        escaped = false;
        out.push(c);
    }
    out
}

/// Index of the quote that ends a single-quoted libpq value (`\'` is an escaped quote).
fn closing_quote(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '\'' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// `%70assword` -> `password`, for comparing query parameter names.
fn percent_decode(text: &str) -> String {
    fn hex(byte: u8) -> Option<u8> {
        (byte as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(high * 16 + low);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

    /// Adds the secrets of another form of the document (after `${…}` interpolation, say).
    pub fn add_document(&mut self, document: &serde_json::Value) {
        self.walk(document, false);
        self.sort();
    }

    fn walk(&mut self, value: &serde_json::Value, secret: bool) {
        match value {
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

    /// `message` with every known secret replaced.
    pub fn scrub(&self, message: &str) -> String {
        let mut out = message.to_string();
        for (from, to) in &self.replacements {
            if out.contains(from.as_str()) {
                out = out.replace(from.as_str(), to);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_credential_names_are_secret() {
        for key in [
            "api_key",
            "X-API-Key",
            "aws_access_key_id",
            "credentials",
            "private_key",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in ["key", "table", "separator", "ssl.key.location"] {
            assert!(!is_secret_key(key), "{key}");
        }
    }

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

    #[test]
    fn hides_passwords_with_reserved_characters() {
        for (url, shown) in [
            (
                "postgres://app:hun#ter2@db.example/prod",
                "postgres://app:***@db.example/prod",
            ),
            (
                "postgres://app:hun/ter?2@db.example:5432/prod?sslmode=require",
                "postgres://app:***@db.example:5432/prod?sslmode=require",
            ),
            ("mysql://app:p@ss@db/prod", "mysql://app:***@db/prod"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("ter"), "{url}");
        }
        // An `@` in a query value is not a userinfo when no password precedes it.
        assert_eq!(
            redact_url("postgres://db/prod?application_name=a@b"),
            "postgres://db/prod?application_name=a@b"
        );
    }

    #[test]
    fn hides_key_value_passwords_with_spaces_around_equals() {
        let shown = redact_url("host=db user=app password = hunter2 dbname=prod");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(shown, "host=db user=app password=*** dbname=prod");
        let shown = redact_url("host=db password= 'hunter 2' dbname=prod");
        assert!(!shown.contains("hunter"), "{shown}");
    }

    #[test]
    fn hides_userinfo_passwords_only() {
        assert_eq!(
            redact_url("postgres://app:s3cr@t@db:5432/x?sslmode=require"),
            "postgres://app:***@db:5432/x?sslmode=require"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1/test"),
            "mysql://root@127.0.0.1/test"
        );
        assert_eq!(redact_url("sqlite://sluice.db"), "sqlite://sluice.db");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn hides_secret_query_parameters() {
        assert_eq!(
            redact_url("postgres://u@h/db?password=hunter2"),
            "postgres://u@h/db?password=***"
        );
        assert_eq!(
            redact_url(
                "postgres://u:pw@h/db?sslmode=verify-full&sslpassword=k3y&sslkey=/etc/k.pem&sslrootcert=/etc/ca.pem"
            ),
            "postgres://u:***@h/db?sslmode=verify-full&sslpassword=***&sslkey=/etc/k.pem&sslrootcert=/etc/ca.pem"
        );
        assert_eq!(
            redact_url("mysql://h/db?PASSWORD=a&Api_Token=b&client_secret=c&x=1#frag"),
            "mysql://h/db?PASSWORD=***&Api_Token=***&client_secret=***&x=1#frag"
        );
        assert_eq!(
            redact_url("postgres://h/db?pass%77ord=a"),
            "postgres://h/db?pass%77ord=***"
        );
        // A query without a path, and a lone key.
        assert_eq!(
            redact_url("postgres://h?password=a&sslmode"),
            "postgres://h?password=***&sslmode"
        );
        assert_eq!(
            redact_url("sqlite://x.db?mode=rwc"),
            "sqlite://x.db?mode=rwc"
        );
    }

    #[test]
    fn hides_key_value_passwords() {
        assert_eq!(
            redact_url("host=db user=app password=hunter2 sslmode=require"),
            "host=db user=app password=*** sslmode=require"
        );
        assert_eq!(
            redact_url("host=db password='hun ter2' dbname=x"),
            "host=db password=*** dbname=x"
        );
    }

    #[test]
    fn secret_keys() {
        for key in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.truststore.password",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
            "ssl.key.pem",
            "SASL.PASSWORD",
            "api_token",
            "sasl.oauthbearer.assertion.private.key.passphrase",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in [
            "sasl.username",
            "sasl.mechanism",
            "ssl.key.location",
            "sslkey",
            "session.timeout.ms",
        ] {
            assert!(!is_secret_key(key), "{key}");
        }
    }

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
