//! Who may call what. Applied to every route:
//!
//! - a listener on a loopback address answers only requests whose `Host` names a loopback
//!   host (`localhost`, `127.x.x.x`, `[::1]`): a web page that rebinds its own name to
//!   127.0.0.1 (DNS rebinding) sends its own name, and is refused;
//!
//! and to every route but `/healthz`, `/readyz` and the status page (`/`, its script and
//! styles, which hold no data):
//!
//! - with `admin.token` and/or `admin.read_token`, a request carries
//!   `Authorization: Bearer <token>` (the scheme in any case, RFC 9110 §11.1): the token
//!   allows everything, the read token only `GET` and `HEAD`;
//! - without a token, a call that changes something (any method but `GET`, `HEAD`,
//!   `OPTIONS`) carries `X-Sluice-Request: 1`, a header a browser does not send
//!   cross-site without the server's consent (which this server never gives).
//!
//! Every answer that passed the token check says what its caller may do in
//! [`ACCESS_HEADER`]: `all`, `read` (the read token) or `open` (no token configured), so
//! that the status page hides the buttons a read token cannot use.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::{AdminState, error};
use crate::config::Secret;

/// The header that a state-changing call without a token carries.
pub const REQUEST_HEADER: &str = "x-sluice-request";

/// The answer's header that tells what the caller's token allows: `all`, `read`, `open`.
pub const ACCESS_HEADER: &str = "x-sluice-access";

/// The tokens a server checks, replaced in place by a reload that changes only them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tokens {
    /// Allows every call.
    pub token: Option<Secret>,
    /// Allows `GET` and `HEAD` only.
    pub read_token: Option<Secret>,
}

impl Tokens {
    fn any(&self) -> bool {
        self.token.is_some() || self.read_token.is_some()
    }
}

/// What a request may do, from its headers.
#[derive(Debug, PartialEq, Eq)]
enum Access {
    All,
    ReadOnly,
    /// No token given, or a wrong one.
    Unauthenticated,
}

/// The token of an `Authorization` header of scheme `Bearer` (in any case).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches([' ', '\t']))
        .filter(|t| !t.is_empty())
}

fn access(tokens: &Tokens, headers: &HeaderMap) -> Access {
    let Some(given) = bearer(headers) else {
        return Access::Unauthenticated;
    };
    let matches = |t: &Option<Secret>| {
        t.as_ref()
            .is_some_and(|t| constant_time_eq(given.as_bytes(), t.expose().as_bytes()))
    };
    if matches(&tokens.token) {
        Access::All
    } else if matches(&tokens.read_token) {
        Access::ReadOnly
    } else {
        Access::Unauthenticated
    }
}

fn reads_only(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// True when `host` (a `Host` header's value) names this machine's loopback interface.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]` or `[::1]:8083`.
        Some(rest) => match rest.split_once(']') {
            Some((ip, port)) if port.is_empty() || port.starts_with(':') => ip,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `Host` check of a loopback listener; every route.
pub(super) async fn check_host(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    if state.loopback {
        let host = request
            .headers()
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or(""));
        if let Some(host) = host
            && !loopback_host(host)
        {
            tracing::warn!(
                host,
                "admin API: refused a request for a foreign Host on a loopback listener (DNS rebinding?)"
            );
            return error(
                StatusCode::FORBIDDEN,
                "this admin API listens on loopback and answers only requests for localhost, 127.0.0.1 or [::1]",
            );
        }
    }
    next.run(request).await
}

/// The token checks; every route but `/healthz` and `/readyz`.
pub(super) async fn authorize(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    let tokens = state.tokens.read().map(|t| t.clone()).unwrap_or_default();
    let method = request.method().clone();
    let mut allowed = "open";
    if tokens.any() {
        match access(&tokens, request.headers()) {
            Access::All => allowed = "all",
            Access::ReadOnly if reads_only(&method) => allowed = "read",
            Access::ReadOnly => {
                return error(
                    StatusCode::FORBIDDEN,
                    format!("the read token allows only GET; {method} needs admin.token"),
                );
            }
            Access::Unauthenticated => {
                let mut response = error(
                    StatusCode::UNAUTHORIZED,
                    "this endpoint needs the header Authorization: Bearer <admin.token>",
                );
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
                return response;
            }
        }
    } else if !reads_only(&method)
        && request
            .headers()
            .get(REQUEST_HEADER)
            .is_none_or(|v| v.as_bytes() != b"1")
    {
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "{method} without admin.token needs the header X-Sluice-Request: 1 (it keeps web pages from calling this API)"
            ),
        );
    }
    let mut response = next.run(request).await;
    response.headers_mut().insert(
        header::HeaderName::from_static(ACCESS_HEADER),
        header::HeaderValue::from_static(allowed),
    );
    response
}

/// Compares without stopping at the first difference (the time taken does not tell how
/// much of a guessed token was right).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i % b.len().max(1)).copied().unwrap_or(0));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"s3cre", b"s3cret"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(!constant_time_eq(b"x", b""));
        assert!(constant_time_eq(b"", b""));
    }

    fn with_authorization(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().expect("header"));
        headers
    }

    #[test]
    fn the_scheme_matches_in_any_case_and_each_token_has_its_access() {
        let tokens = Tokens {
            token: Some("w".into()),
            read_token: Some("r".into()),
        };
        for value in ["Bearer w", "bearer w", "BEARER  w", "bEaReR\tw"] {
            assert_eq!(
                access(&tokens, &with_authorization(value)),
                Access::All,
                "{value}"
            );
        }
        assert_eq!(
            access(&tokens, &with_authorization("bearer r")),
            Access::ReadOnly
        );
        for value in ["Bearer", "Bearer ", "Basic w", "Bearerw", "Bearer x", "w"] {
            assert_eq!(
                access(&tokens, &with_authorization(value)),
                Access::Unauthenticated,
                "{value}"
            );
        }
        assert_eq!(access(&tokens, &HeaderMap::new()), Access::Unauthenticated);
    }

    #[test]
    fn loopback_hosts_are_told_from_foreign_ones() {
        for host in [
            "localhost",
            "LOCALHOST:8083",
            "127.0.0.1",
            "127.0.0.1:8083",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:8083",
        ] {
            assert!(loopback_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8083",
            "localhost.evil.example",
            "10.0.0.1:8083",
            "[::2]:8083",
            "[::1]x",
            "",
        ] {
            assert!(!loopback_host(host), "{host}");
        }
    }
}
