//! The Schema Registry client: the schema a record's frame names (a global id, or a GUID
//! for magic byte 1), fetched over Confluent's REST API with the schemas it references,
//! and cached for good (a registered schema never changes).
//!
//! - `GET /schemas/ids/{id}` or `GET /schemas/guids/{guid}` answers the schema's text,
//!   `schemaType` (absent means Avro) and `references` (`[{name, subject, version}]`);
//! - each reference is `GET /subjects/{subject}/versions/{version}`, whose own references
//!   are fetched in turn, at most [`MAX_REFERENCE_DEPTH`] deep, a cycle refused.
//!
//! Several URLs make one registry: a request starts at the URL that last answered, and a
//! connection error, a timeout or a 5xx answer moves it to the next; a 4xx answer is the
//! registry's word and is not retried elsewhere. Authentication is HTTP basic
//! (`username`/`password`, or `user:password@` in a URL) or a bearer `token`.

pub mod cache;
pub mod error;
pub mod transport;

/// The suite's Schema Registry (test code, kept in `tests/`), for the client's tests.
#[cfg(test)]
#[path = "../../../../tests/e2e/registry/mod.rs"]
pub(crate) mod test_registry;
#[cfg(test)]
mod tests;

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use serde_json::Value;

use crate::config::SchemaRegistryConfig;
use crate::format::{Reference, RegisteredSchema, SchemaType};

pub use cache::{CAPACITY, Lru};
pub use error::RegistryError;
use transport::{Endpoint, GetError, path_segment};

/// Deepest chain of references followed (a schema referencing one referencing one …).
pub const MAX_REFERENCE_DEPTH: usize = 32;

/// Called once per HTTP request with its outcome (`ok`, `not_found`, `unavailable`,
/// `denied`, `invalid`) and the seconds it took.
pub type Observer = Arc<dyn Fn(&'static str, f64) + Send + Sync>;

/// A Schema Registry client; clones share the connection settings, the cache and the
/// observer.
#[derive(Clone)]
pub struct RegistryClient {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<Endpoint>,
    /// For `https://` URLs.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The configured `Authorization` header (basic or bearer), if any.
    authorization: Option<String>,
    /// The endpoint that answered last: the next request starts there.
    preferred: AtomicUsize,
    cache: Mutex<cache::SchemaCache>,
    observer: RwLock<Option<Observer>>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("urls", &self.describe())
            .finish_non_exhaustive()
    }
}

/// What a request looks up: how a 404 reads, and what a message calls it.
enum Lookup<'a> {
    /// `GET /subjects`: whether the registry answers at all (`sluice validate`).
    Subjects,
    Id(u32),
    Guid(&'a str),
    Version {
        subject: &'a str,
        version: i32,
        /// The reference's name and who refers to it.
        referenced_as: &'a str,
    },
}

impl Lookup<'_> {
    fn what(&self) -> String {
        match self {
            Lookup::Subjects => "the list of subjects".to_string(),
            Lookup::Id(id) => format!("schema id {id}"),
            Lookup::Guid(guid) => format!("schema guid {guid}"),
            Lookup::Version {
                subject,
                version,
                referenced_as,
            } => format!("subject {subject:?} version {version} (referenced as {referenced_as})"),
        }
    }
}

/// A schema as one answer has it, its references not yet fetched.
struct Unresolved {
    schema_type: SchemaType,
    text: String,
    /// `(name, subject, version)`.
    references: Vec<(String, String, i32)>,
}

type Resolving<'a> =
    Pin<Box<dyn Future<Output = Result<Arc<RegisteredSchema>, RegistryError>> + Send + 'a>>;

impl RegistryClient {
    /// A client of the registry `config` describes, after checking it: each URL
    /// `http://` or `https://` and well formed, TLS files readable PEM that make a usable
    /// configuration, `username` with `password`, `token` without either. The error names
    /// the setting.
    pub fn new(config: &SchemaRegistryConfig) -> Result<RegistryClient, String> {
        Self::with_capacity(config, CAPACITY)
    }

    /// [`RegistryClient::new`] with caches of `capacity` entries each (tests use a small
    /// one to see eviction).
    pub(crate) fn with_capacity(
        config: &SchemaRegistryConfig,
        capacity: usize,
    ) -> Result<RegistryClient, String> {
        if config.url.0.is_empty() {
            return Err("schema_registry.url: no URL given".into());
        }
        let endpoints = config
            .url
            .0
            .iter()
            .map(|url| {
                Endpoint::parse(url).map_err(|reason| {
                    // Shown as parsed so far: never with its password.
                    let shown = match url.rsplit_once('@') {
                        Some((_, host)) => format!("…@{host}"),
                        None => url.clone(),
                    };
                    format!("schema_registry.url: {shown}: {reason}")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let authorization = match (&config.username, &config.password, &config.token) {
            (None, None, None) => None,
            (None, None, Some(token)) if token.expose().is_empty() => {
                return Err("schema_registry.token is empty".into());
            }
            (None, None, Some(token)) => Some(format!("Bearer {}", token.expose())),
            (_, _, Some(_)) => {
                return Err("schema_registry.token excludes schema_registry.username and password: use a token or basic authentication".into());
            }
            (Some(user), Some(password), None) => {
                Some(transport::basic_auth(user, password.expose()))
            }
            (Some(_), None, None) => {
                return Err("schema_registry.username is set but schema_registry.password is not: basic authentication needs both".into());
            }
            (None, Some(_), None) => {
                return Err("schema_registry.password is set but schema_registry.username is not: basic authentication needs both".into());
            }
        };
        let tls = if config.tls.is_some() || endpoints.iter().any(|e| e.https) {
            Some(transport::client_config(config.tls.as_ref())?)
        } else {
            None
        };
        Ok(RegistryClient {
            inner: Arc::new(Inner {
                endpoints,
                tls,
                authorization,
                preferred: AtomicUsize::new(0),
                cache: Mutex::new(cache::SchemaCache::new(capacity)),
                observer: RwLock::new(None),
            }),
        })
    }

    /// The schema with global id `id` (magic byte 0), its references resolved.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        if let Some(schema) = self.cache().by_id.get(&id).cloned() {
            return Ok(schema);
        }
        let lookup = Lookup::Id(id);
        let body = self.fetch(&format!("/schemas/ids/{id}"), &lookup).await?;
        let unresolved = self.parse_schema(&body, &lookup)?;
        let schema = self
            .resolve(unresolved, lookup.what(), &mut Vec::new())
            .await?;
        self.cache().by_id.insert(id, schema.clone());
        Ok(schema)
    }

    /// The schema with GUID `guid` (magic byte 1), its references resolved.
    pub async fn schema_by_guid(&self, guid: &str) -> Result<Arc<RegisteredSchema>, RegistryError> {
        if let Some(schema) = self.cache().by_guid.get(guid).cloned() {
            return Ok(schema);
        }
        let lookup = Lookup::Guid(guid);
        let path = format!("/schemas/guids/{}", path_segment(guid));
        let body = self.fetch(&path, &lookup).await?;
        let unresolved = self.parse_schema(&body, &lookup)?;
        let schema = self
            .resolve(unresolved, lookup.what(), &mut Vec::new())
            .await?;
        self.cache()
            .by_guid
            .insert(guid.to_string(), schema.clone());
        Ok(schema)
    }

    /// Asks the registry for its subjects (`GET /subjects`, which every implementation
    /// answers): `Ok` when it answers as a registry, with the credentials it was given.
    pub async fn probe(&self) -> Result<(), RegistryError> {
        self.fetch("/subjects", &Lookup::Subjects).await.map(|_| ())
    }

    /// The URLs as configured, passwords replaced by `***`, for messages.
    pub fn describe(&self) -> String {
        let shown: Vec<&str> = self
            .inner
            .endpoints
            .iter()
            .map(|e| e.shown.as_str())
            .collect();
        shown.join(", ")
    }

    /// Calls `observer` once per HTTP request from now on, in this client and its clones.
    pub fn set_observer(&mut self, observer: Arc<dyn Fn(&'static str, f64) + Send + Sync>) {
        let mut slot = self
            .inner
            .observer
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *slot = Some(observer);
    }

    /// Schemas cached by id and by GUID (the `sluice_schema_registry_schemas` gauge).
    pub fn cached(&self) -> usize {
        self.cache().cached()
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, cache::SchemaCache> {
        self.inner
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn observe(&self, outcome: &'static str, started: Instant) {
        let observer = self
            .inner
            .observer
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if let Some(observer) = observer {
            observer(outcome, started.elapsed().as_secs_f64());
        }
    }

    /// Fetches the references of `schema` (what `referrer` names, for messages), each
    /// from the cache or the registry, and their references in turn. `chain` holds the
    /// `(subject, version)`s being resolved above this one, to refuse a cycle.
    fn resolve<'a>(
        &'a self,
        schema: Unresolved,
        referrer: String,
        chain: &'a mut Vec<(String, i32)>,
    ) -> Resolving<'a> {
        Box::pin(async move {
            let mut references = Vec::with_capacity(schema.references.len());
            for (name, subject, version) in schema.references {
                let key = (subject.clone(), version);
                if chain.contains(&key) {
                    let mut path: Vec<String> =
                        chain.iter().map(|(s, v)| format!("{s} v{v}")).collect();
                    path.push(format!("{subject} v{version}"));
                    return Err(RegistryError::Unusable {
                        what: referrer.clone(),
                        message: format!("reference cycle: {}", path.join(" -> ")),
                    });
                }
                if chain.len() >= MAX_REFERENCE_DEPTH {
                    return Err(RegistryError::Unusable {
                        what: referrer.clone(),
                        message: format!(
                            "references nest deeper than {MAX_REFERENCE_DEPTH} levels"
                        ),
                    });
                }
                // Version -1 means "latest", which may change: never cached.
                let cacheable = version > 0;
                let cached = if cacheable {
                    self.cache().by_version.get(&key).cloned()
                } else {
                    None
                };
                let resolved = match cached {
                    Some(resolved) => resolved,
                    None => {
                        let referenced_as = format!("{name:?} by {referrer}");
                        let lookup = Lookup::Version {
                            subject: &subject,
                            version,
                            referenced_as: &referenced_as,
                        };
                        let path =
                            format!("/subjects/{}/versions/{version}", path_segment(&subject));
                        let body = self.fetch(&path, &lookup).await?;
                        let unresolved = self.parse_schema(&body, &lookup)?;
                        chain.push(key.clone());
                        let resolved = self
                            .resolve(
                                unresolved,
                                format!("subject {subject:?} version {version}"),
                                chain,
                            )
                            .await;
                        chain.pop();
                        let resolved = resolved?;
                        if cacheable {
                            self.cache().by_version.insert(key, resolved.clone());
                        }
                        resolved
                    }
                };
                references.push(Reference {
                    name,
                    subject,
                    version,
                    schema: resolved,
                });
            }
            Ok(Arc::new(RegisteredSchema {
                schema_type: schema.schema_type,
                text: schema.text,
                references,
            }))
        })
    }

    /// GET `path`, trying the URLs in turn from the one that answered last; the JSON of a
    /// 2xx answer, or the error the answer means.
    async fn fetch(&self, path: &str, lookup: &Lookup<'_>) -> Result<Value, RegistryError> {
        let endpoints = &self.inner.endpoints;
        let first = self.inner.preferred.load(Ordering::Relaxed);
        let mut last_failure: Option<(String, String)> = None;
        for step in 0..endpoints.len() {
            let index = (first + step) % endpoints.len();
            let Some(endpoint) = endpoints.get(index) else {
                continue;
            };
            let started = Instant::now();
            let answer = transport::get(
                endpoint,
                self.inner.tls.as_ref(),
                self.inner.authorization.as_deref(),
                path,
            )
            .await;
            let answer = match answer {
                // 5xx, and 408 and 429 (a timeout, a rate limit): another URL, or later.
                Ok(answer) if retry_elsewhere(answer.status) => {
                    self.observe("unavailable", started);
                    let message = format!(
                        "answered {} for {}: {}",
                        answer.status,
                        lookup.what(),
                        error_message(&answer.body)
                    );
                    last_failure = Some((endpoint.shown.clone(), message));
                    continue;
                }
                Ok(answer) => answer,
                Err(error @ GetError::TooLarge { status, .. }) if retry_elsewhere(status) => {
                    self.observe("unavailable", started);
                    last_failure = Some((
                        endpoint.shown.clone(),
                        format!("{error}, for {}", lookup.what()),
                    ));
                    continue;
                }
                // The registry answered, too much to read: that answer's, not an outage.
                Err(GetError::TooLarge { status, length }) => {
                    self.inner.preferred.store(index, Ordering::Relaxed);
                    let error = too_large(endpoint, status, length, lookup);
                    self.observe(error.outcome(), started);
                    return Err(error);
                }
                Err(GetError::NoAnswer(message)) => {
                    self.observe("unavailable", started);
                    last_failure = Some((endpoint.shown.clone(), message));
                    continue;
                }
            };
            self.inner.preferred.store(index, Ordering::Relaxed);
            let result = interpret(endpoint, answer, lookup);
            self.observe(
                match &result {
                    Ok(_) => "ok",
                    Err(error) => error.outcome(),
                },
                started,
            );
            return result;
        }
        let (url, message) = last_failure.unwrap_or_default();
        Err(if endpoints.len() > 1 {
            RegistryError::Unavailable {
                url: self.describe(),
                message: format!(
                    "none of the {} URLs answered; the last, {url}: {message}",
                    endpoints.len()
                ),
            }
        } else {
            RegistryError::Unavailable { url, message }
        })
    }

    /// The schema in an answer: `schema` (text), `schemaType` (absent: Avro) and
    /// `references`.
    fn parse_schema(&self, body: &Value, lookup: &Lookup<'_>) -> Result<Unresolved, RegistryError> {
        let bad = |message: String| RegistryError::Unusable {
            what: lookup.what(),
            message,
        };
        let text = body
            .get("schema")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("the answer has no \"schema\" string".into()))?
            .to_string();
        let schema_type = match body.get("schemaType") {
            None | Some(Value::Null) => SchemaType::Avro,
            Some(Value::String(name)) => match name.as_str() {
                "AVRO" => SchemaType::Avro,
                "PROTOBUF" => SchemaType::Protobuf,
                "JSON" => SchemaType::Json,
                other => {
                    return Err(bad(format!(
                        "schemaType {other:?} is none of AVRO, PROTOBUF, JSON"
                    )));
                }
            },
            Some(other) => return Err(bad(format!("schemaType is {other}, not a string"))),
        };
        let references = match body.get("references") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let field = |name: &str| item.get(name);
                    let name = field("name").and_then(Value::as_str);
                    let subject = field("subject").and_then(Value::as_str);
                    let version = field("version")
                        .and_then(Value::as_i64)
                        .and_then(|v| i32::try_from(v).ok());
                    match (name, subject, version) {
                        (Some(name), Some(subject), Some(version)) => {
                            Ok((name.to_string(), subject.to_string(), version))
                        }
                        _ => Err(bad(format!(
                            "references[{i}] is not {{\"name\": string, \"subject\": string, \"version\": integer}}: {item}"
                        ))),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => return Err(bad(format!("references is {other}, not a list"))),
        };
        Ok(Unresolved {
            schema_type,
            text,
            references,
        })
    }
}

/// Whether an answer's status says to ask another URL, or later: 5xx, and 408 and 429 (a
/// timeout, a rate limit).
fn retry_elsewhere(status: u16) -> bool {
    status >= 500 || matches!(status, 408 | 429)
}

/// What an answer (not to retry elsewhere) whose body is over [`transport::MAX_BODY`]
/// means: a refusal is still one ([`RegistryError::Denied`]); anything else fails the
/// records of what was looked up ([`RegistryError::Unusable`], `decode_failed`), not the
/// task, and is not retried: the registry answered, and a schema's answer never changes.
fn too_large(
    endpoint: &Endpoint,
    status: u16,
    length: Option<u64>,
    lookup: &Lookup<'_>,
) -> RegistryError {
    if matches!(status, 401 | 403) {
        return RegistryError::Denied {
            url: endpoint.shown.clone(),
            status,
        };
    }
    RegistryError::Unusable {
        what: lookup.what(),
        message: format!(
            "{} {}",
            endpoint.shown,
            GetError::TooLarge { status, length }
        ),
    }
}

/// What a (non-5xx) answer means.
fn interpret(
    endpoint: &Endpoint,
    answer: transport::Answer,
    lookup: &Lookup<'_>,
) -> Result<Value, RegistryError> {
    let url = || endpoint.shown.clone();
    match answer.status {
        200..=299 => serde_json::from_slice(&answer.body).map_err(|e| RegistryError::Invalid {
            url: url(),
            message: format!("{}: the answer is not JSON: {e}", lookup.what()),
        }),
        401 | 403 => Err(RegistryError::Denied {
            url: url(),
            status: answer.status,
        }),
        404 => {
            let code = serde_json::from_slice::<Value>(&answer.body)
                .ok()
                .and_then(|body| body.get("error_code").and_then(Value::as_i64));
            let not_found = match lookup {
                Lookup::Subjects => false,
                Lookup::Guid(_) => true,
                Lookup::Id(_) => code == Some(40403),
                Lookup::Version { .. } => matches!(code, Some(40401..=40403)),
            };
            if not_found {
                Err(RegistryError::NotFound {
                    what: lookup.what(),
                })
            } else {
                Err(RegistryError::Invalid {
                    url: url(),
                    message: format!(
                        "answered 404 without a registry error code for {} ({}): is the URL the registry's?",
                        lookup.what(),
                        error_message(&answer.body)
                    ),
                })
            }
        }
        status => Err(RegistryError::Invalid {
            url: url(),
            message: format!(
                "answered {status} for {}: {}",
                lookup.what(),
                error_message(&answer.body)
            ),
        }),
    }
}

/// The `message` of a registry error body (`{"error_code": …, "message": …}`), else the
/// body's start.
fn error_message(body: &[u8]) -> String {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    if let Some(body) = parsed.as_ref() {
        let code = body.get("error_code").and_then(Value::as_i64);
        if let Some(message) = body.get("message").and_then(Value::as_str) {
            return match code {
                Some(code) => format!("{message} (error_code {code})"),
                None => message.to_string(),
            };
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or(text)),
        None if text.is_empty() => "(empty body)".into(),
        None => text.to_string(),
    }
}
