//! A small client of the admin API, for `sluice status`, `pause`, `resume`, `restart` and
//! `stop`: HTTP/1.1 over one connection per request (hyper), HTTPS for an `https://`
//! address (trusting a CA file given, else the web's public roots), bearer token when
//! given. Every request carries `X-Sluice-Request: 1`, which a server without a token
//! asks of calls that change something.

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url}: not an http:// or https:// URL of the admin API (e.g. http://127.0.0.1:8083)")]
    Url { url: String },
    #[error("cannot reach the admin API at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("admin API at {addr}: {message}")]
    Http { addr: String, message: String },
    #[error("{status}: {message}")]
    Status { status: u16, message: String },
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
}

/// An answer: status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Answer {
    /// The body as JSON, or `null`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// `Err` for a status of 400 or more, with Kafka Connect's `message`.
    pub fn ok(self) -> Result<Answer, ClientError> {
        if self.status.as_u16() < 400 {
            return Ok(self);
        }
        let message = self
            .json()
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| self.body.clone());
        Err(ClientError::Status {
            status: self.status.as_u16(),
            message,
        })
    }
}

/// The admin API of one process.
#[derive(Debug, Clone)]
pub struct AdminClient {
    /// `host:port`.
    addr: String,
    token: Option<String>,
    /// Set for an `https://` address.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl AdminClient {
    /// A client of `url` (`http://host:port`, or `host:port`); an `https://` URL trusts
    /// the web's public roots.
    pub fn new(url: &str, token: Option<String>) -> Result<Self, ClientError> {
        Self::with_ca(url, token, None)
    }

    /// A client of `url` (`http://host:port`, `https://host:port` or `host:port`) that
    /// trusts the CA certificates in the PEM file `ca` for HTTPS.
    pub fn with_ca(
        url: &str,
        token: Option<String>,
        ca: Option<&std::path::Path>,
    ) -> Result<Self, ClientError> {
        let (https, rest) = match url.strip_prefix("https://") {
            Some(rest) => (true, rest),
            None => (false, url.strip_prefix("http://").unwrap_or(url)),
        };
        let addr = rest.trim_end_matches('/').to_string();
        if addr.is_empty() || addr.contains('/') || addr.contains("://") || !addr.contains(':') {
            return Err(ClientError::Url {
                url: url.to_string(),
            });
        }
        let tls = if https {
            Some(super::tls::client_config(ca)?)
        } else {
            None
        };
        Ok(Self { addr, token, tls })
    }

    /// The host part of the address, as the server's certificate names it.
    fn host(&self) -> &str {
        let host = self
            .addr
            .rsplit_once(':')
            .map_or(self.addr.as_str(), |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }

    /// Sends one request; `body` is JSON.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<Answer, ClientError> {
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|source| ClientError::Connect {
                addr: self.addr.clone(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let http = |e: hyper::Error| ClientError::Http {
            addr: self.addr.clone(),
            message: e.to_string(),
        };
        let mut sender = match &self.tls {
            None => {
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(http)?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                sender
            }
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(self.host().to_string())
                    .map_err(|e| ClientError::Http {
                        addr: self.addr.clone(),
                        message: format!("not a host name for TLS: {e}"),
                    })?;
                let stream = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                    .map_err(|source| ClientError::Connect {
                        addr: self.addr.clone(),
                        source,
                    })?;
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(http)?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                sender
            }
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.addr)
            .header(super::auth::REQUEST_HEADER, "1");
        if let Some(token) = &self.token {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => builder
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body.to_string())).boxed()),
            None => builder.body(Empty::<Bytes>::new().boxed()),
        }
        .map_err(|e| ClientError::Http {
            addr: self.addr.clone(),
            message: e.to_string(),
        })?;
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(http)?
            .to_bytes();
        Ok(Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Answer, ClientError> {
        self.request(Method::GET, path, None).await
    }
}
