//! A small client of the admin API, for `sluice status`, `pause`, `resume`, `restart` and
//! `stop`: HTTP/1.1 over one connection per request (hyper), bearer token when given.

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url}: not an http:// URL of the admin API (e.g. http://127.0.0.1:8083)")]
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
}

/// An answer: status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
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
}

impl AdminClient {
    /// A client of `url` (`http://host:port`, or `host:port`).
    pub fn new(url: &str, token: Option<String>) -> Result<Self, ClientError> {
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let addr = rest.trim_end_matches('/').to_string();
        if addr.is_empty()
            || addr.contains('/')
            || url.starts_with("https://")
            || !addr.contains(':')
        {
            return Err(ClientError::Url {
                url: url.to_string(),
            });
        }
        Ok(Self { addr, token })
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
        let http = |e: hyper::Error| ClientError::Http {
            addr: self.addr.clone(),
            message: e.to_string(),
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.addr);
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
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(http)?
            .to_bytes();
        Ok(Answer {
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Answer, ClientError> {
        self.request(Method::GET, path, None).await
    }
}
