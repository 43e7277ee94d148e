//! A Schema Registry for tests: the part of Confluent's REST API that the confluent-kafka
//! serializers and sluice's registry client use, in memory, served by axum on
//! 127.0.0.1 (port 0 unless told), in the test's own runtime.
//!
//! - `POST /subjects/{subject}/versions` registers `{"schema", "schemaType"?,
//!   "references"?}` and answers `{"id", "guid"}`: the same text, type and references
//!   answer the same id (across subjects, as Confluent does) and, in one subject, the same
//!   version; a new text is the subject's next version;
//! - `POST /subjects/{subject}` (lookup) answers the subject's version holding that schema;
//! - `GET /schemas/ids/{id}`, `GET /schemas/guids/{guid}`: the schema, its `schemaType`
//!   (omitted for Avro) and `references`;
//! - `GET /subjects`, `GET /subjects/{s}/versions`, `GET /subjects/{s}/versions/{v}`
//!   (`latest` or `-1` too), `GET /schemas/types`, and
//!   `GET /associations/resources/{namespace}/{topic}` (always `[]`: no associations);
//! - errors as Confluent's: `{"error_code": 40401|40402|40403|42201|42202, "message"}`.
//!
//! Faults for tests: [`TestRegistry::set_unavailable`] (503 for a while),
//! [`TestRegistry::require_basic`] (401 without the credentials);
//! [`TestRegistry::requests`] counts `GET /schemas/…`, [`TestRegistry::log`] lists every
//! request. Schemas are not parsed (any text is accepted), except that a Protobuf schema
//! sent as a base64 `FileDescriptorProto` (as the Python serializers send it) is stored
//! and answered as `.proto` text, as Confluent's registry does (`proto_text.rs`);
//! `?format=serialized` answers the descriptor as sent.
//!
//! Uses only axum, tokio, serde_json and rand (GUIDs), as the e2e binary has them.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

mod proto_text;

/// One registered schema; its global id is its index + 1.
struct Stored {
    /// As answered: a Protobuf schema sent as a base64 descriptor, as `.proto` text.
    schema: String,
    /// The base64 descriptor a Protobuf schema came as (answered for
    /// `?format=serialized`).
    serialized: Option<String>,
    /// `None` for Avro (omitted from answers, as Confluent does).
    schema_type: Option<String>,
    /// `[{name, subject, version}]`.
    references: Value,
    guid: String,
}

#[derive(Default)]
struct Registry {
    schemas: Vec<Stored>,
    /// Each subject's versions: version n is the global id at n - 1.
    subjects: BTreeMap<String, Vec<u32>>,
    unavailable_until: Option<Instant>,
    /// The `Authorization` header asked for.
    basic: Option<String>,
    /// `GET /schemas/…` requests received.
    schema_requests: usize,
    /// Every request, `METHOD /path?query`.
    log: Vec<String>,
}

type Shared = Arc<Mutex<Registry>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Registry> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running test registry; stops when dropped.
pub struct TestRegistry {
    addr: SocketAddr,
    shared: Shared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestRegistry {
    /// Starts one on a free port of 127.0.0.1.
    pub async fn start() -> TestRegistry {
        match Self::start_on(0).await {
            Ok(registry) => registry,
            Err(e) => panic!("test registry: cannot listen on 127.0.0.1: {e}"),
        }
    }

    /// Starts one on 127.0.0.1:`port` (0: any free port).
    pub async fn start_on(port: u16) -> std::io::Result<TestRegistry> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let shared: Shared = Arc::default();
        let router = Router::new()
            .route("/subjects", get(list_subjects))
            .route("/subjects/{subject}", post(lookup))
            .route(
                "/subjects/{subject}/versions",
                post(register).get(list_versions),
            )
            .route(
                "/subjects/{subject}/versions/{version}",
                get(subject_version),
            )
            .route("/schemas/ids/{id}", get(by_id))
            .route("/schemas/guids/{guid}", get(by_guid))
            .route("/schemas/types", get(types))
            .route(
                "/associations/resources/{namespace}/{name}",
                get(associations),
            )
            .fallback(unknown)
            .layer(middleware::from_fn_with_state(shared.clone(), faults))
            .with_state(shared.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(TestRegistry {
            addr,
            shared,
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The GUID of schema `id`.
    pub fn guid_of(&self, id: u32) -> Option<String> {
        let registry = lock(&self.shared);
        let index = usize::try_from(id).ok()?.checked_sub(1)?;
        registry.schemas.get(index).map(|s| s.guid.clone())
    }

    /// Registers a schema as `POST /subjects/{subject}/versions` would (`schema_type`
    /// `AVRO`, `PROTOBUF` or `JSON`; `references` a JSON list of `{name, subject,
    /// version}`), without counting as a request; its id.
    pub fn register(
        &self,
        subject: &str,
        schema_type: &str,
        schema: &str,
        references: Value,
    ) -> u32 {
        let body = json!({"schema": schema, "schemaType": schema_type, "references": references});
        match lock(&self.shared).register(subject, &body) {
            Ok((id, _)) => id,
            Err((_, body)) => panic!("test registry: cannot register in {subject}: {body}"),
        }
    }

    /// Answers 503 to every request for `duration` from now.
    pub fn set_unavailable(&self, duration: Duration) {
        lock(&self.shared).unavailable_until = Some(Instant::now() + duration);
    }

    /// Answers 401 to requests without HTTP basic authentication as `user`:`password`.
    pub fn require_basic(&self, user: &str, password: &str) {
        lock(&self.shared).basic = Some(format!(
            "Basic {}",
            base64(format!("{user}:{password}").as_bytes())
        ));
    }

    /// `GET /schemas/…` requests received so far (answered or refused).
    pub fn requests(&self) -> usize {
        lock(&self.shared).schema_requests
    }

    /// Every request received so far, `METHOD /path?query`, in order.
    pub fn log(&self) -> Vec<String> {
        lock(&self.shared).log.clone()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An answer with the registry's content type.
fn reply(status: StatusCode, body: Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    reply(status, json!({"error_code": code, "message": message}))
}

type Failure = (StatusCode, Value);

fn failure(status: StatusCode, code: u32, message: &str) -> Failure {
    (status, json!({"error_code": code, "message": message}))
}

fn subject_not_found(subject: &str) -> Failure {
    failure(
        StatusCode::NOT_FOUND,
        40401,
        &format!("Subject '{subject}' not found."),
    )
}

fn schema_not_found() -> Failure {
    failure(StatusCode::NOT_FOUND, 40403, "Schema not found")
}

fn answer(result: Result<Value, Failure>) -> Response {
    match result {
        Ok(body) => reply(StatusCode::OK, body),
        Err((status, body)) => reply(status, body),
    }
}

impl Registry {
    /// The `(schema, schemaType, references)` of a registration or lookup body.
    fn parse(body: &Value) -> Result<(String, Option<String>, Value), Failure> {
        let invalid = |message: &str| failure(StatusCode::UNPROCESSABLE_ENTITY, 42201, message);
        let schema = body
            .get("schema")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("Invalid schema: no \"schema\" string"))?;
        let schema_type = match body.get("schemaType").and_then(Value::as_str) {
            None | Some("AVRO") => None,
            Some(t @ ("PROTOBUF" | "JSON")) => Some(t.to_string()),
            Some(_) => return Err(invalid("Invalid schema: unknown schemaType")),
        };
        let references = match body.get("references") {
            None | Some(Value::Null) => json!([]),
            Some(list @ Value::Array(_)) => list.clone(),
            Some(_) => return Err(invalid("Invalid schema: references is not a list")),
        };
        Ok((schema.to_string(), schema_type, references))
    }

    fn find(&self, schema: &str, schema_type: &Option<String>, references: &Value) -> Option<u32> {
        let index = self.schemas.iter().position(|s| {
            s.schema == schema && &s.schema_type == schema_type && &s.references == references
        })?;
        u32::try_from(index + 1).ok()
    }

    fn stored(&self, id: u32) -> Option<&Stored> {
        self.schemas.get(usize::try_from(id).ok()?.checked_sub(1)?)
    }

    /// Registers `body` in `subject`: `(id, version)`.
    fn register(&mut self, subject: &str, body: &Value) -> Result<(u32, usize), Failure> {
        let (schema, schema_type, references) = Self::parse(body)?;
        let (schema, serialized) = normalize(&schema_type, schema);
        for reference in references.as_array().into_iter().flatten() {
            let found = reference
                .get("subject")
                .and_then(Value::as_str)
                .zip(reference.get("version").and_then(Value::as_i64))
                .and_then(|(s, v)| self.version(s, &v.to_string()).ok());
            if found.is_none() || reference.get("name").and_then(Value::as_str).is_none() {
                return Err(failure(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    42201,
                    &format!(
                        "Invalid schema: reference {reference} is not a registered subject version"
                    ),
                ));
            }
        }
        let id = match self.find(&schema, &schema_type, &references) {
            Some(id) => id,
            None => {
                self.schemas.push(Stored {
                    schema,
                    serialized,
                    schema_type,
                    references,
                    guid: random_guid(),
                });
                u32::try_from(self.schemas.len()).unwrap_or(u32::MAX)
            }
        };
        let versions = self.subjects.entry(subject.to_string()).or_default();
        let version = match versions.iter().position(|v| *v == id) {
            Some(index) => index + 1,
            None => {
                versions.push(id);
                versions.len()
            }
        };
        Ok((id, version))
    }

    /// `(id, version)` of `version` (a number, `latest` or `-1`) of `subject`.
    fn version(&self, subject: &str, version: &str) -> Result<(u32, usize), Failure> {
        let versions = self
            .subjects
            .get(subject)
            .ok_or_else(|| subject_not_found(subject))?;
        let number = match version {
            "latest" | "-1" => versions.len(),
            text => text.parse::<usize>().map_err(|_| {
                failure(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    42202,
                    "The specified version is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"",
                )
            })?,
        };
        let id = number
            .checked_sub(1)
            .and_then(|i| versions.get(i))
            .ok_or_else(|| {
                failure(
                    StatusCode::NOT_FOUND,
                    40402,
                    &format!("Version {version} not found."),
                )
            })?;
        Ok((*id, number))
    }

    /// The body of `GET /schemas/ids/{id}`.
    fn schema_body(&self, id: u32, serialized: bool) -> Option<Value> {
        let stored = self.stored(id)?;
        let text = match (&stored.serialized, serialized) {
            (Some(descriptor), true) => descriptor,
            _ => &stored.schema,
        };
        let mut body = json!({"schema": text, "references": stored.references});
        if let (Some(t), Some(map)) = (&stored.schema_type, body.as_object_mut()) {
            map.insert("schemaType".into(), json!(t));
        }
        Some(body)
    }

    /// The body of `GET /subjects/{s}/versions/{v}` and of a lookup.
    fn version_body(
        &self,
        subject: &str,
        id: u32,
        version: usize,
        serialized: bool,
    ) -> Option<Value> {
        let mut body = self.schema_body(id, serialized)?;
        let guid = self.stored(id)?.guid.clone();
        let map = body.as_object_mut()?;
        map.insert("subject".into(), json!(subject));
        map.insert("version".into(), json!(version));
        map.insert("id".into(), json!(id));
        map.insert("guid".into(), json!(guid));
        Some(body)
    }
}

/// A Protobuf schema sent as a base64 descriptor becomes `.proto` text (as Confluent's
/// registry stores it), the descriptor kept; anything else stays as sent.
fn normalize(schema_type: &Option<String>, schema: String) -> (String, Option<String>) {
    if schema_type.as_deref() == Some("PROTOBUF")
        && let Some(text) = proto_text::render(&schema)
    {
        return (text, Some(schema));
    }
    (schema, None)
}

/// Whether the query asks `format=serialized`.
fn serialized(query: &HashMap<String, String>) -> bool {
    query.get("format").is_some_and(|f| f == "serialized")
}

/// Logs, counts, and answers the injected faults before any handler.
async fn faults(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    {
        let mut registry = lock(&shared);
        let line = format!(
            "{} {}",
            request.method(),
            request.uri().path_and_query().map_or("", |p| p.as_str())
        );
        registry.log.push(line);
        if request.method() == Method::GET && request.uri().path().starts_with("/schemas/") {
            registry.schema_requests += 1;
        }
        if registry
            .unavailable_until
            .is_some_and(|until| Instant::now() < until)
        {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                50003,
                "Service unavailable (test fault)",
            );
        }
        if let Some(expected) = &registry.basic {
            let given = request.headers().get(header::AUTHORIZATION);
            if given.and_then(|h| h.to_str().ok()) != Some(expected.as_str()) {
                return error(StatusCode::UNAUTHORIZED, 401, "Unauthorized");
            }
        }
    }
    next.run(request).await
}

fn json_body(bytes: &Bytes) -> Result<Value, Failure> {
    serde_json::from_slice(bytes).map_err(|e| {
        failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            42201,
            &format!("Invalid schema: body is not JSON: {e}"),
        )
    })
}

async fn register(
    State(shared): State<Shared>,
    Path(subject): Path<String>,
    body: Bytes,
) -> Response {
    let mut registry = lock(&shared);
    answer(json_body(&body).and_then(|body| {
        let (id, _) = registry.register(&subject, &body)?;
        let guid = registry.stored(id).map(|s| s.guid.clone());
        Ok(json!({"id": id, "guid": guid}))
    }))
}

async fn lookup(
    State(shared): State<Shared>,
    Path(subject): Path<String>,
    body: Bytes,
) -> Response {
    let registry = lock(&shared);
    answer(json_body(&body).and_then(|body| {
        let (schema, schema_type, references) = Registry::parse(&body)?;
        let (schema, _) = normalize(&schema_type, schema);
        let versions = registry
            .subjects
            .get(&subject)
            .ok_or_else(|| subject_not_found(&subject))?;
        let id = registry
            .find(&schema, &schema_type, &references)
            .ok_or_else(schema_not_found)?;
        let version = versions
            .iter()
            .position(|v| *v == id)
            .ok_or_else(schema_not_found)?
            + 1;
        registry
            .version_body(&subject, id, version, false)
            .ok_or_else(schema_not_found)
    }))
}

async fn list_subjects(State(shared): State<Shared>) -> Response {
    let subjects: Vec<String> = lock(&shared).subjects.keys().cloned().collect();
    reply(StatusCode::OK, json!(subjects))
}

async fn list_versions(State(shared): State<Shared>, Path(subject): Path<String>) -> Response {
    let registry = lock(&shared);
    answer(
        registry
            .subjects
            .get(&subject)
            .map(|versions| json!((1..=versions.len()).collect::<Vec<_>>()))
            .ok_or_else(|| subject_not_found(&subject)),
    )
}

async fn subject_version(
    State(shared): State<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let registry = lock(&shared);
    answer(
        registry
            .version(&subject, &version)
            .and_then(|(id, number)| {
                registry
                    .version_body(&subject, id, number, serialized(&query))
                    .ok_or_else(schema_not_found)
            }),
    )
}

async fn by_id(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let registry = lock(&shared);
    let body = id
        .parse::<u32>()
        .ok()
        .and_then(|id| registry.schema_body(id, serialized(&query)));
    answer(body.ok_or_else(schema_not_found))
}

async fn by_guid(
    State(shared): State<Shared>,
    Path(guid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let registry = lock(&shared);
    let id = registry.schemas.iter().position(|s| s.guid == guid);
    let body = id
        .and_then(|index| u32::try_from(index + 1).ok())
        .and_then(|id| registry.schema_body(id, serialized(&query)))
        .and_then(|mut body| {
            body.as_object_mut()?.insert("guid".into(), json!(guid));
            Some(body)
        });
    answer(body.ok_or_else(schema_not_found))
}

async fn types() -> Response {
    reply(StatusCode::OK, json!(["JSON", "PROTOBUF", "AVRO"]))
}

/// Topic-to-subject associations (asked by confluent-kafka 2.16 serializers before
/// choosing a subject): none, so they fall back to the topic name strategy.
async fn associations() -> Response {
    reply(StatusCode::OK, json!([]))
}

async fn unknown() -> Response {
    error(StatusCode::NOT_FOUND, 404, "HTTP 404 Not Found")
}

/// A random version 4 GUID, lowercase with dashes.
fn random_guid() -> String {
    let bits: u128 = rand::random();
    let bits = (bits & !(0xF << 76)) | (0x4 << 76);
    let bits = (bits & !(0x3 << 62)) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    let part = |range: std::ops::Range<usize>| hex.get(range).unwrap_or("");
    format!(
        "{}-{}-{}-{}-{}",
        part(0..8),
        part(8..12),
        part(12..16),
        part(16..20),
        part(20..32)
    )
}

/// Standard base64 with padding (for the expected basic credentials).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b =
            [chunk.first(), chunk.get(1), chunk.get(2)].map(|b| u32::from(b.copied().unwrap_or(0)));
        let n = (b[0] << 16) | (b[1] << 8) | b[2];
        for i in 0..4 {
            if i <= chunk.len() {
                let sextet = (n >> (18 - 6 * i)) & 63;
                out.push(char::from(
                    ALPHABET.get(sextet as usize).copied().unwrap_or(b'='),
                ));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
