//! Secrets never reach logs, errors or printed configuration: passwords in database URLs
//! (userinfo and query parameters), secret-looking keys of string maps
//! (`kafka.properties`, a transform's `config`), and the [`Secret`](super::Secret) types
//! that hold them (in `secret.rs`). This file says what a secret is and how one is hidden
//! in a URL or a value; whole documents are shown by `shown.rs`, and messages scrubbed by
//! `scrub.rs`.

use super::origin::{Origin, is_only_references};

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
    redact_url_keeping(url, &|_| false)
}

/// A URL as the file wrote it (`postgres://u:${PW}@h/db`), for showing: a password or secret
/// parameter that is only `${…}` references stays as written (it shows where the secret
/// comes from, not the secret); one written out in the file is hidden as [`redact_url`]
/// hides it.
pub fn redact_written_url(url: &str) -> String {
    redact_url_keeping(url, &is_only_references)
}

/// [`redact_url`], but a secret for which `keep` is true is shown as it is.
fn redact_url_keeping(url: &str, keep: &dyn Fn(&str) -> bool) -> String {
    let mask = |secret: &str| {
        if keep(secret) {
            secret.to_string()
        } else {
            MASK.to_string()
        }
    };
    let Some(scheme_end) = url.find("://") else {
        return redact_key_values(url, keep);
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
                out.push_str(&mask(&userinfo[colon + 1..]));
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
                    Some((key, value)) if is_secret_key(&percent_decode(key)) => {
                        format!("{key}={}", mask(value))
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
fn redact_key_values(text: &str, keep: &dyn Fn(&str) -> bool) -> String {
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
            Some((key, value)) if is_secret_key(key.trim()) && keep(value) => out.push_str(token),
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

/// A value that came from `${…}` as it is shown: the text as the file wrote it. Under a
/// secret key (`secret`), only a value made of references alone shows; one with literal
/// text in it is `***`. Elsewhere a URL's written-out password is hidden
/// ([`redact_written_url`]).
pub fn shown_text(origin: &Origin, secret: bool) -> String {
    if secret {
        if is_only_references(&origin.written) {
            origin.written.clone()
        } else {
            MASK.to_string()
        }
    } else {
        redact_written_url(&origin.written)
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
}
