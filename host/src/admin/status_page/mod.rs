//! The status page, `GET /`: one HTML page, its script and its styles, all inside the
//! binary (`include_str!`), served without the token because they hold no data. The
//! script reads everything from the API with the token the operator types in once (kept
//! in the tab's `sessionStorage`, sent as `Authorization`, never in a URL or a cookie).
//!
//! Every part of it is answered with a Content-Security-Policy that allows nothing from
//! elsewhere: scripts, styles and requests only from this listener, no inline script,
//! no frames around it. `docs/operations.md` ("Status page") shows it.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AdminState;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("style.css");

/// Where the script and the styles are served.
pub const SCRIPT_PATH: &str = "/status-page/app.js";
pub const STYLE_PATH: &str = "/status-page/style.css";

/// Nothing from any other origin, nothing inline: the page's own script and styles, and
/// requests to this listener only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The page's routes (outside the token check).
pub(super) fn routes() -> Router<AdminState> {
    Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            SCRIPT_PATH,
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            STYLE_PATH,
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_loaded_from_elsewhere() {
        for (name, text) in [
            ("index.html", INDEX),
            ("app.js", SCRIPT),
            ("style.css", STYLE),
        ] {
            for external in ["http://", "https://", "//cdn", "@import", "url("] {
                // The SVG namespace is a name, not a load.
                let found = text
                    .match_indices(external)
                    .any(|(i, _)| !text[i..].starts_with("http://www.w3.org/2000/svg"));
                assert!(!found, "{name} refers to {external}");
            }
        }
        assert!(INDEX.contains(SCRIPT_PATH) && INDEX.contains(STYLE_PATH));
        assert!(
            !INDEX.contains("<script>"),
            "no inline script: the policy forbids it"
        );
    }

    #[test]
    fn the_token_goes_in_a_header_and_the_tab_only() {
        assert!(SCRIPT.contains("sessionStorage"));
        assert!(!SCRIPT.contains("localStorage"));
        assert!(!SCRIPT.contains("document.cookie"));
        assert!(SCRIPT.contains("Authorization"));
    }
}
