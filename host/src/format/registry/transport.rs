//! How the registry client reaches one registry URL: the URL's parts, the TLS settings,
//! and one HTTP/1.1 GET over a fresh connection (hyper), within the connect and request
//! timeouts. Schemas are cached for good, so requests are rare and a connection pool
//! would buy little.
//!
//! Adapted from host/src/admin/client.rs (connection, handshake, request) and
//! host/src/admin/tls.rs (PEM files, rustls configuration with the ring provider).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::config::RegistryTls;

/// Time to open the TCP connection and finish the TLS handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time for the whole request, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read: a schema is text, rarely past a few hundred KiB.
pub const MAX_BODY: usize = 16 * 1024 * 1024;

const ACCEPT: &str = "application/vnd.schemaregistry.v1+json, application/json";

/// One registry URL, taken apart.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The URL as configured, password replaced by `***`, no trailing `/`: for messages.
    pub shown: String,
    pub https: bool,
    /// Host name or address, without IPv6 brackets (for connecting and TLS).
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written (the `Host` header).
    pub authority: String,
    /// The path before the API's (`/registry` in `https://h/registry/`), or empty.
    pub base_path: String,
    /// `Authorization` from `user:password@` in the URL.
    pub userinfo_auth: Option<String>,
}

impl Endpoint {
    /// Takes `url` apart: `http[s]://[user[:password]@]host[:port][/path]`. The error
    /// says what is wrong without repeating a password.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err("not an http:// or https:// URL (e.g. http://registry:8081)".into());
        };
        if rest.contains(['?', '#']) {
            return Err("a registry URL has no query or fragment".into());
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let scheme = if https { "https" } else { "http" };
        let base_path = path.trim_end_matches('/').to_string();
        let shown_userinfo = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((user, _)) => format!("{user}:***@"),
                None => format!("{u}@"),
            },
            None => String::new(),
        };
        let shown = format!("{scheme}://{shown_userinfo}{hostport}{base_path}");
        let (host, port) = split_host_port(hostport, if https { 443 } else { 80 })?;
        if base_path.chars().any(char::is_whitespace) {
            return Err("the URL's path has white space in it".into());
        }
        let userinfo_auth = userinfo.map(|u| {
            let (user, password) = u.split_once(':').unwrap_or((u, ""));
            basic_auth(&percent_decode(user), &percent_decode(password))
        });
        Ok(Endpoint {
            shown,
            https,
            host,
            port,
            authority: hostport.to_string(),
            base_path,
            userinfo_auth,
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(hostport: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address opened with [ is not closed with ]")?;
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("`{after}` after the IPv6 address")),
            },
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err("no host name in it".into());
    }
    let port = match port {
        None => default_port,
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("`{text}` is not a port (1 to 65535)")),
        },
    };
    Ok((host.to_string(), port))
}

/// `Basic base64(user:password)`.
pub fn basic_auth(user: &str, password: &str) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// `%XX` escapes decoded (a user name or password in a URL); invalid escapes kept as is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `segment` escaped for one path segment (a subject name, a GUID): everything but
/// letters, digits and `-._~`, as the Confluent clients do.
pub fn path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The rustls configuration of `https://` URLs: the CA of `tls.ca`, else the web's public
/// roots; the client certificate of `tls.cert` and `tls.key` when given. The error names
/// the setting.
pub fn client_config(tls: Option<&RegistryTls>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    match tls.and_then(|t| t.ca.as_deref()) {
        Some(path) => {
            for cert in certificates(path, "schema_registry.tls.ca")? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "schema_registry.tls.ca: {}: not a usable CA certificate: {e}",
                        path.display()
                    )
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("schema_registry.tls: {e}"))?
    .with_root_certificates(roots);
    let cert = tls.and_then(|t| t.cert.as_deref());
    let key = tls.and_then(|t| t.key.as_deref());
    let mut config = match (cert, key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) => {
            return Err(
                "schema_registry.tls.cert is set but schema_registry.tls.key is not: a client certificate needs its private key".into(),
            );
        }
        (None, Some(_)) => {
            return Err(
                "schema_registry.tls.key is set but schema_registry.tls.cert is not: a private key needs its certificate".into(),
            );
        }
        (Some(cert), Some(key)) => {
            let chain = certificates(cert, "schema_registry.tls.cert")?;
            let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                format!(
                    "schema_registry.tls.key: {}: cannot read a PEM private key from it (PKCS#8, PKCS#1 or SEC1): {e}",
                    key.display()
                )
            })?;
            builder.with_client_auth_cert(chain, private).map_err(|e| {
                format!(
                    "schema_registry.tls.cert and schema_registry.tls.key ({} and {}) do not make a usable client certificate: {e}",
                    cert.display(),
                    key.display()
                )
            })?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn certificates(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!(
                "{setting}: {}: cannot read a PEM certificate from it: {e}",
                path.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "{setting}: {}: no PEM certificate in it (a file that starts with -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// `error: its cause: its cause's cause…` (hyper's "connection error" alone does not say
/// that the server refused the client certificate).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let more = inner.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = inner.source();
    }
    text
}

/// A registry's answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// Why one URL gave no answer that can be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetError {
    /// No answer: cannot connect, a TLS or HTTP error, an I/O error, a timeout (the next
    /// URL, or later, may answer).
    #[error("{0}")]
    NoAnswer(String),
    /// An answer came (`status`), but its body is larger than [`MAX_BODY`]: `length`
    /// bytes as its `content-length` said, or more than [`MAX_BODY`] (read until then).
    /// The rest is not read.
    #[error(
        "answered {status} with a body of {}: the answer's size exceeded the bound of {} MiB ({MAX_BODY} bytes) that sluice reads",
        length.map_or_else(|| format!("more than {MAX_BODY} bytes"), |n| format!("{n} bytes")),
        MAX_BODY >> 20
    )]
    TooLarge { status: u16, length: Option<u64> },
}

impl From<String> for GetError {
    fn from(message: String) -> Self {
        GetError::NoAnswer(message)
    }
}

/// GET `path` (below the endpoint's base path) with `authorization`, within
/// [`REQUEST_TIMEOUT`]. The error is why no answer came (to move to the next URL), or
/// that its body is over [`MAX_BODY`].
pub async fn get(
    endpoint: &Endpoint,
    tls: Option<&Arc<rustls::ClientConfig>>,
    authorization: Option<&str>,
    path: &str,
) -> Result<Answer, GetError> {
    match tokio::time::timeout(
        REQUEST_TIMEOUT,
        exchange(endpoint, tls, authorization, path),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(GetError::NoAnswer(format!(
            "no answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

async fn exchange(
    endpoint: &Endpoint,
    tls: Option<&Arc<rustls::ClientConfig>>,
    authorization: Option<&str>,
    path: &str,
) -> Result<Answer, GetError> {
    let http = |e: hyper::Error| format!("HTTP: {}", with_causes(&e));
    let connect = async {
        let stream = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        if !endpoint.https {
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(http)?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            return Ok(sender);
        }
        let config = tls.ok_or("no TLS configuration for an https:// URL")?;
        let name = ServerName::try_from(endpoint.host.clone())
            .map_err(|e| format!("not a host name for TLS: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(config.clone())
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok::<_, String>(sender)
    };
    let mut sender = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| format!("cannot connect within {} s", CONNECT_TIMEOUT.as_secs()))??;
    let mut builder = Request::get(format!("{}{path}", endpoint.base_path))
        .header(hyper::header::HOST, &endpoint.authority)
        .header(hyper::header::ACCEPT, ACCEPT)
        .header(hyper::header::USER_AGENT, "sluice");
    if let Some(authorization) = authorization.or(endpoint.userinfo_auth.as_deref()) {
        builder = builder.header(hyper::header::AUTHORIZATION, authorization);
    }
    let request = builder
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let response = sender.send_request(request).await.map_err(http)?;
    let status = response.status().as_u16();
    // A body announced over the bound is not read at all.
    let length = response
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if let Some(length) = length.filter(|&n| n > MAX_BODY as u64) {
        return Err(GetError::TooLarge {
            status,
            length: Some(length),
        });
    }
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                GetError::TooLarge {
                    status,
                    length: None,
                }
            } else {
                GetError::NoAnswer(format!("reading the answer: {e}"))
            }
        })?
        .to_bytes();
    Ok(Answer { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_come_apart_and_hide_passwords() {
        let e = Endpoint::parse("https://app:s%40cret@reg.example:8443/api/").unwrap();
        assert!(e.https);
        assert_eq!((e.host.as_str(), e.port), ("reg.example", 8443));
        assert_eq!(e.base_path, "/api");
        assert_eq!(e.shown, "https://app:***@reg.example:8443/api");
        assert_eq!(
            e.userinfo_auth.as_deref(),
            Some(basic_auth("app", "s@cret").as_str())
        );
        let e = Endpoint::parse("http://[::1]:8081").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.authority.as_str()),
            ("::1", 8081, "[::1]:8081")
        );
        assert_eq!(Endpoint::parse("http://r").unwrap().port, 80);
        assert_eq!(Endpoint::parse("https://r/").unwrap().port, 443);
        for bad in [
            "ftp://r",
            "r:8081",
            "http://",
            "http://r:0",
            "http://r:99999",
            "http://r:x",
            "http://r?a=1",
            "http://[::1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let error = Endpoint::parse("http://u:hunter2@r:x").unwrap_err();
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(path_segment("orders-value"), "orders-value");
        assert_eq!(path_segment("a/b c:ü"), "a%2Fb%20c%3A%C3%BC");
    }

    #[test]
    fn tls_files_name_their_setting() {
        let dir = std::env::temp_dir().join(format!("sluice-registry-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let tls = |ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>| RegistryTls {
            ca: ca.map(Path::to_path_buf),
            cert: cert.map(Path::to_path_buf),
            key: key.map(Path::to_path_buf),
        };
        let error = client_config(Some(&tls(Some(&empty), None, None))).unwrap_err();
        assert!(error.starts_with("schema_registry.tls.ca:"), "{error}");
        let missing = dir.join("missing.pem");
        let error = client_config(Some(&tls(None, Some(&missing), Some(&missing)))).unwrap_err();
        assert!(error.starts_with("schema_registry.tls.cert:"), "{error}");
        let error = client_config(Some(&tls(None, Some(&empty), None))).unwrap_err();
        assert!(error.contains("schema_registry.tls.key is not"), "{error}");
        assert!(client_config(None).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
