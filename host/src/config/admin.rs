//! The checks of the `admin:` section that its JSON Schema cannot express: the metrics
//! listener's address, and the token's length where other hosts can reach the API.

use std::net::SocketAddr;

use super::problem::Problem;
use super::{AdminConfig, bounds};

/// Pushes the problems of `admin.metrics_listen` and of a token too short for the address
/// the admin API listens on. `admin.listen` that is not an address, and an empty token, are
/// reported by the semantic checks.
pub(super) fn admin_problems(admin: &AdminConfig, problems: &mut Vec<Problem>) {
    let listen = admin.listen.parse::<SocketAddr>().ok();
    if let Some(metrics) = &admin.metrics_listen {
        match metrics.parse::<SocketAddr>() {
            Err(_) => problems.push(Problem::new(
                "admin.metrics_listen",
                format!(
                    "\"{metrics}\" is not an address and port (e.g. 127.0.0.1:9090, or 0.0.0.0:9090 to listen on every interface)"
                ),
            )),
            Ok(metrics) => {
                if let Some(listen) = listen
                    && overlap(listen, metrics)
                {
                    problems.push(Problem::new(
                        "admin.metrics_listen",
                        format!(
                            "\"{metrics}\" takes the port of admin.listen ({listen}): give the metrics listener a port of its own (e.g. 9090)"
                        ),
                    ));
                }
            }
        }
    }
    for (field, token) in [
        ("admin.token", &admin.token),
        ("admin.read_token", &admin.read_token),
    ] {
        if let (Some(listen), Some(token)) = (listen, token) {
            let length = token.expose().len();
            if !listen.ip().is_loopback()
                && !token.expose().trim().is_empty()
                && length < bounds::ADMIN_TOKEN_MIN_BYTES
            {
                problems.push(Problem::new(
                    field,
                    format!(
                        "is {length} bytes: on {listen}, which other hosts can reach, the token must be at least {} bytes (e.g. `openssl rand -hex 32`); only a loopback address (127.0.0.1) takes a shorter one",
                        bounds::ADMIN_TOKEN_MIN_BYTES
                    ),
                ));
            }
        }
    }
}

/// True when two listeners would fight over one port: the same port (not 0, which picks a
/// free one) on the same address, or on any address when either is unspecified (`0.0.0.0`
/// or `[::]` takes the port on every interface).
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

#[cfg(test)]
mod tests {
    use crate::config::{ConfigError, load_str};

    fn problems(admin: &str) -> Vec<String> {
        let text = format!(
            r#"
kafka: {{ brokers: "localhost:9092" }}
admin: {admin}
connectors:
  - name: words
    topics: [words]
    sink:
      url: sqlite://words.db
      table: words
      mode: insert
      columns:
        word: {{ from: /word, type: text }}
"#
        );
        match load_str(&text, &|_| None) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid { problems }) => {
                problems.iter().map(|p| p.to_string()).collect()
            }
            Err(other) => vec![other.to_string()],
        }
    }

    #[test]
    fn metrics_listen_loads() {
        assert_eq!(
            problems(
                r#"{ listen: "0.0.0.0:8083", token: 0123456789abcdef0123, metrics_listen: "0.0.0.0:9090" }"#
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(r#"{ listen: "127.0.0.1:0", metrics_listen: "127.0.0.1:0" }"#),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(r#"{ listen: "127.0.0.1:8083", metrics_listen: "127.0.0.2:8083" }"#),
            Vec::<String>::new()
        );
    }

    #[test]
    fn metrics_listen_must_be_an_address_of_its_own() {
        let found = problems(r#"{ listen: "127.0.0.1:8083", metrics_listen: "localhost" }"#);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("admin.metrics_listen: \"localhost\" is not an address"),
            "{found:?}"
        );
        for (listen, metrics) in [
            ("127.0.0.1:8083", "127.0.0.1:8083"),
            ("0.0.0.0:8083", "127.0.0.1:8083"),
            ("127.0.0.1:8083", "[::]:8083"),
        ] {
            let found = problems(&format!(
                r#"{{ listen: "{listen}", token: 0123456789abcdef0123, metrics_listen: "{metrics}" }}"#
            ));
            assert_eq!(found.len(), 1, "{listen} {metrics}: {found:?}");
            assert!(
                found[0].contains("takes the port of admin.listen"),
                "{found:?}"
            );
        }
    }

    #[test]
    fn a_reachable_admin_api_needs_a_long_token() {
        let found = problems(r#"{ listen: "0.0.0.0:8083", token: change-me }"#);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("admin.token: is 9 bytes: on 0.0.0.0:8083"),
            "{found:?}"
        );
        assert!(
            !found[0].contains("change-me"),
            "the token is never printed: {found:?}"
        );
        let found = problems(r#"{ listen: "10.0.0.5:8083", token: "0123456789abcde" }"#);
        assert_eq!(found.len(), 1, "15 bytes: {found:?}");
        assert_eq!(
            problems(r#"{ listen: "0.0.0.0:8083", token: "0123456789abcdef" }"#),
            Vec::<String>::new()
        );
        // Only this host reaches a loopback address: any token will do there.
        assert_eq!(
            problems(r#"{ listen: "127.0.0.1:8083", token: t }"#),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(r#"{ listen: "[::1]:8083", token: t }"#),
            Vec::<String>::new()
        );
    }
}
