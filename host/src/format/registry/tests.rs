//! The client against the in-process test registry (`crate::test_registry`; in the host,
//! tests/e2e/registry/mod.rs), and against a canned HTTP server for answers a real
//! registry would not give (cycles, bad bodies).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::test_registry::TestRegistry;
use super::*;
use crate::config::{Secret, Urls};

fn config(urls: &[String]) -> SchemaRegistryConfig {
    SchemaRegistryConfig {
        url: Urls(urls.to_vec()),
        username: None,
        password: None,
        token: None,
        tls: None,
    }
}

fn client(urls: &[String]) -> RegistryClient {
    RegistryClient::new(&config(urls)).unwrap()
}

/// A URL where nothing listens.
async fn dead_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// Serves `routes` (path -> status and body) over HTTP/1.1, one request per connection;
/// other paths answer 404 with no body.
async fn canned(routes: HashMap<String, (u16, String)>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            answer_canned(stream, &routes).await;
        }
    });
    url
}

/// Reads one request from `stream` and answers it from `routes`.
async fn answer_canned<S>(mut stream: S, routes: &HashMap<String, (u16, String)>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut request = Vec::new();
    let mut buffer = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buffer[..n]),
        }
    }
    let text = String::from_utf8_lossy(&request);
    let path = text.split(' ').nth(1).unwrap_or("").to_string();
    let (status, body) = routes.get(&path).cloned().unwrap_or((404, String::new()));
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn testdata(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/format/registry/testdata")
        .join(name)
}

/// An HTTPS server (testdata/server.pem, for localhost and 127.0.0.1, signed by
/// testdata/ca.pem) that asks for a client certificate signed by the same CA.
async fn canned_https(routes: HashMap<String, (u16, String)>) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(testdata("ca.pem")).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_file(testdata("server.pem")).unwrap()],
            PrivateKeyDer::from_pem_file(testdata("server.key")).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            if let Ok(stream) = acceptor.accept(stream).await {
                answer_canned(stream, &routes).await;
            }
        }
    });
    port
}

#[tokio::test]
async fn https_with_a_ca_file_and_a_client_certificate() {
    let mut routes = HashMap::new();
    routes.insert(
        "/schemas/ids/1".to_string(),
        (200, r#"{"schema": "\"int\""}"#.to_string()),
    );
    let port = canned_https(routes).await;
    let mut settings = config(&[format!("https://localhost:{port}")]);
    settings.tls = Some(crate::config::RegistryTls {
        ca: Some(testdata("ca.pem")),
        cert: Some(testdata("client.pem")),
        key: Some(testdata("client.key")),
    });
    let schema = RegistryClient::new(&settings)
        .unwrap()
        .schema_by_id(1)
        .await
        .unwrap();
    assert_eq!(schema.text, "\"int\"");

    // Without the client certificate the server refuses the connection.
    let mut no_cert = settings.clone();
    no_cert.tls = Some(crate::config::RegistryTls {
        ca: Some(testdata("ca.pem")),
        cert: None,
        key: None,
    });
    let error = RegistryClient::new(&no_cert)
        .unwrap()
        .schema_by_id(1)
        .await
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(error.to_string().contains("CertificateRequired"), "{error}");
    // Without the CA, the web's roots do not know the server's.
    let mut no_ca = settings.clone();
    no_ca.tls = None;
    let error = RegistryClient::new(&no_ca)
        .unwrap()
        .schema_by_id(1)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("TLS"), "{error}");
}

#[tokio::test]
async fn fetches_by_id_with_its_type() {
    let registry = TestRegistry::start().await;
    let avro = registry.register("a-value", "AVRO", r#""string""#, json!([]));
    let proto = registry.register("p-value", "PROTOBUF", "syntax = \"proto3\";", json!([]));
    let json_id = registry.register("j-value", "JSON", r#"{"type":"object"}"#, json!([]));
    let client = client(&[registry.url()]);
    let schema = client.schema_by_id(avro).await.unwrap();
    assert_eq!(
        schema.schema_type,
        SchemaType::Avro,
        "schemaType absent means Avro"
    );
    assert_eq!(schema.text, r#""string""#);
    assert!(schema.references.is_empty());
    assert_eq!(
        client.schema_by_id(proto).await.unwrap().schema_type,
        SchemaType::Protobuf
    );
    assert_eq!(
        client.schema_by_id(json_id).await.unwrap().schema_type,
        SchemaType::Json
    );
}

#[tokio::test]
async fn fetches_by_guid() {
    let registry = TestRegistry::start().await;
    let id = registry.register("a-value", "JSON", r#"{"type":"string"}"#, json!([]));
    let guid = registry.guid_of(id).unwrap();
    let client = client(&[registry.url()]);
    let schema = client.schema_by_guid(&guid).await.unwrap();
    assert_eq!(schema.text, r#"{"type":"string"}"#);
    assert_eq!(client.cached(), 1);
    let missing = client
        .schema_by_guid("00000000-0000-4000-8000-000000000000")
        .await
        .unwrap_err();
    assert!(
        matches!(missing, RegistryError::NotFound { .. }),
        "{missing}"
    );
}

#[tokio::test]
async fn resolves_references_two_levels_deep_and_caches_them() {
    let registry = TestRegistry::start().await;
    registry.register("common.proto", "PROTOBUF", "message C {}", json!([]));
    registry.register(
        "middle.proto",
        "PROTOBUF",
        "import \"common.proto\"; message B { C c = 1; }",
        json!([{"name": "common.proto", "subject": "common.proto", "version": 1}]),
    );
    let top = registry.register(
        "orders-value",
        "PROTOBUF",
        "import \"middle.proto\"; message A { B b = 1; }",
        json!([{"name": "middle.proto", "subject": "middle.proto", "version": 1}]),
    );
    let client = client(&[registry.url()]);
    let schema = client.schema_by_id(top).await.unwrap();
    let middle = &schema.references[0];
    assert_eq!(
        (
            middle.name.as_str(),
            middle.subject.as_str(),
            middle.version
        ),
        ("middle.proto", "middle.proto", 1)
    );
    let common = &middle.schema.references[0];
    assert_eq!(common.schema.text, "message C {}");
    let order: Vec<&str> = schema
        .references_in_order()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(order, vec!["common.proto", "middle.proto"]);
    assert_eq!(
        registry.requests(),
        1,
        "one GET /schemas/ids; the rest are /subjects/…"
    );
    assert_eq!(registry.log().len(), 3);

    // A second schema referring to middle.proto fetches only itself.
    let other = registry.register(
        "other-value",
        "PROTOBUF",
        "import \"middle.proto\"; message D { B b = 1; }",
        json!([{"name": "middle.proto", "subject": "middle.proto", "version": 1}]),
    );
    let before = registry.log().len();
    client.schema_by_id(other).await.unwrap();
    assert_eq!(registry.log().len(), before + 1, "{:?}", registry.log());
}

#[tokio::test]
async fn missing_schema_is_not_found_per_record() {
    let registry = TestRegistry::start().await;
    let client = client(&[registry.url()]);
    let error = client.schema_by_id(999).await.unwrap_err();
    assert_eq!(
        error,
        RegistryError::NotFound {
            what: "schema id 999".into()
        }
    );
    assert!(!error.is_transient());
}

#[tokio::test]
async fn basic_authentication_and_its_refusal() {
    let registry = TestRegistry::start().await;
    let id = registry.register("a-value", "AVRO", r#""long""#, json!([]));
    registry.require_basic("app", "s3cret");
    let error = client(&[registry.url()])
        .schema_by_id(id)
        .await
        .unwrap_err();
    assert!(
        matches!(error, RegistryError::Denied { status: 401, .. }),
        "{error}"
    );
    assert!(!error.is_transient());
    assert!(error.to_string().contains(&registry.url()), "{error}");
    let mut settings = config(&[registry.url()]);
    settings.username = Some("app".into());
    settings.password = Some(Secret::new("s3cret"));
    let schema = RegistryClient::new(&settings)
        .unwrap()
        .schema_by_id(id)
        .await
        .unwrap();
    assert_eq!(schema.text, r#""long""#);
    // user:password@ in the URL works too, and is not shown.
    let url = registry.url().replace("http://", "http://app:s3cret@");
    let client = client(&[url]);
    assert!(
        !client.describe().contains("s3cret"),
        "{}",
        client.describe()
    );
    client.schema_by_id(id).await.unwrap();
}

#[tokio::test]
async fn a_503_fails_over_to_the_next_url_which_is_then_tried_first() {
    let first = TestRegistry::start().await;
    let second = TestRegistry::start().await;
    for registry in [&first, &second] {
        registry.register("a-value", "AVRO", r#""int""#, json!([]));
        registry.register("b-value", "AVRO", r#""float""#, json!([]));
    }
    first.set_unavailable(Duration::from_secs(60));
    let mut client = client(&[first.url(), second.url()]);
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let seen = outcomes.clone();
    client.set_observer(Arc::new(move |outcome, _| {
        seen.lock().unwrap().push(outcome)
    }));
    assert_eq!(client.schema_by_id(1).await.unwrap().text, r#""int""#);
    assert_eq!((first.requests(), second.requests()), (1, 1));
    assert_eq!(*outcomes.lock().unwrap(), vec!["unavailable", "ok"]);
    client.schema_by_id(2).await.unwrap();
    assert_eq!(
        (first.requests(), second.requests()),
        (1, 2),
        "starts at the URL that answered"
    );
}

#[tokio::test]
async fn every_url_down_is_unavailable_and_transient() {
    let urls = [dead_url().await, dead_url().await];
    let error = client(&urls).schema_by_id(1).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    let RegistryError::Unavailable { message, .. } = &error else {
        panic!("{error}")
    };
    assert!(
        message.contains("none of the 2 URLs") && message.contains(&urls[1]),
        "{message}"
    );

    let registry = TestRegistry::start().await;
    registry.set_unavailable(Duration::from_secs(60));
    let error = client(&[registry.url()]).schema_by_id(1).await.unwrap_err();
    assert!(
        error.is_transient() && error.to_string().contains("503"),
        "{error}"
    );
}

#[tokio::test]
async fn a_cache_hit_makes_no_request() {
    let registry = TestRegistry::start().await;
    let id = registry.register("a-value", "AVRO", r#""bytes""#, json!([]));
    let client = client(&[registry.url()]);
    let first = client.schema_by_id(id).await.unwrap();
    let again = client.clone().schema_by_id(id).await.unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(registry.requests(), 1);
    assert_eq!(client.cached(), 1);
}

#[tokio::test]
async fn the_least_recently_used_schema_is_evicted() {
    let registry = TestRegistry::start().await;
    for (i, text) in ["\"int\"", "\"long\"", "\"string\""].iter().enumerate() {
        registry.register(&format!("s{i}"), "AVRO", text, json!([]));
    }
    let client = RegistryClient::with_capacity(&config(&[registry.url()]), 2).unwrap();
    client.schema_by_id(1).await.unwrap();
    client.schema_by_id(2).await.unwrap();
    client.schema_by_id(1).await.unwrap(); // 2 is now the least recently used
    client.schema_by_id(3).await.unwrap(); // evicts 2
    assert_eq!((registry.requests(), client.cached()), (3, 2));
    client.schema_by_id(1).await.unwrap();
    assert_eq!(registry.requests(), 3, "1 stayed");
    client.schema_by_id(2).await.unwrap();
    assert_eq!(registry.requests(), 4, "2 was evicted");
}

#[tokio::test]
async fn a_reference_cycle_and_too_deep_a_chain_are_refused() {
    let schema = |subject: &str| {
        json!({"schema": "x", "references": [{"name": subject, "subject": subject, "version": 1}]})
            .to_string()
    };
    let mut routes = HashMap::new();
    routes.insert("/schemas/ids/1".to_string(), (200, schema("x")));
    routes.insert("/subjects/x/versions/1".to_string(), (200, schema("y")));
    routes.insert("/subjects/y/versions/1".to_string(), (200, schema("x")));
    routes.insert("/schemas/ids/2".to_string(), (200, schema("s0")));
    for n in 0..40 {
        routes.insert(
            format!("/subjects/s{n}/versions/1"),
            (200, schema(&format!("s{}", n + 1))),
        );
    }
    let client = client(&[canned(routes).await]);
    let error = client.schema_by_id(1).await.unwrap_err();
    assert!(
        matches!(&error, RegistryError::Unusable { message, .. } if message.contains("x v1 -> y v1 -> x v1")),
        "{error}"
    );
    let error = client.schema_by_id(2).await.unwrap_err();
    assert!(
        matches!(error, RegistryError::Unusable { .. })
            && error.to_string().contains("deeper than 32"),
        "{error}"
    );
}

#[tokio::test]
async fn unusable_answers_are_invalid_or_unusable_and_named() {
    let mut routes = HashMap::new();
    routes.insert("/schemas/ids/1".to_string(), (200, "<html>".to_string()));
    routes.insert(
        "/schemas/ids/2".to_string(),
        (
            200,
            r#"{"schema": "x", "schemaType": "THRIFT"}"#.to_string(),
        ),
    );
    routes.insert(
        "/schemas/ids/3".to_string(),
        (200, r#"{"schemaType": "AVRO"}"#.to_string()),
    );
    routes.insert(
        "/schemas/ids/4".to_string(),
        (400, r#"{"error_code": 400, "message": "bad"}"#.to_string()),
    );
    routes.insert(
        "/schemas/ids/6".to_string(),
        (
            200,
            r#"{"schema": "x", "references": [{"name": "n"}]}"#.to_string(),
        ),
    );
    let client = client(&[canned(routes).await]);
    // A registry that answers nothing usable at all (the settings are wrong) fails the
    // task; one schema answered in a form that cannot be used fails its records alone.
    for (id, needle, whole_registry) in [
        (1, "not JSON", true),
        (2, "THRIFT", false),
        (3, "no \"schema\"", false),
        (4, "400", true),
        (5, "404 without", true),
        (6, "references[0]", false),
    ] {
        let error = client.schema_by_id(id).await.unwrap_err();
        let kind_ok = if whole_registry {
            matches!(error, RegistryError::Invalid { .. })
        } else {
            matches!(error, RegistryError::Unusable { .. })
        };
        assert!(
            kind_ok && error.to_string().contains(needle),
            "id {id}: {error}"
        );
        assert!(
            error.to_string().contains(&format!("schema id {id}")),
            "{error}"
        );
    }
}

#[test]
fn settings_are_checked_and_named() {
    let check = |settings: SchemaRegistryConfig| RegistryClient::new(&settings).unwrap_err();
    assert!(check(config(&["ftp://r".into()])).starts_with("schema_registry.url:"));
    assert!(check(config(&[])).starts_with("schema_registry.url:"));
    let error = check(config(&["http://u:hunter2@r:x".into()]));
    assert!(!error.contains("hunter2"), "{error}");
    let mut settings = config(&["http://r:8081".into()]);
    settings.username = Some("u".into());
    assert!(check(settings.clone()).contains("schema_registry.password is not"));
    settings.password = Some("p".into());
    settings.token = Some("t".into());
    assert!(check(settings.clone()).starts_with("schema_registry.token excludes"));
    settings.username = None;
    settings.password = None;
    assert!(RegistryClient::new(&settings).is_ok());
    let client = client(&["https://a:8081/".into(), "http://b:8081".into()]);
    assert_eq!(client.describe(), "https://a:8081, http://b:8081");
}

proptest! {
    /// Whatever a registry answers, interpreting and parsing it never panics.
    #[test]
    fn any_answer_is_interpreted_without_panicking(
        status in 100u16..600,
        body in proptest::collection::vec(any::<u8>(), 0..200),
        json_body in "\\{(\"schema\": \"[a-z]{0,5}\", )?(\"schemaType\": (\"AVRO\"|\"JSON\"|1|null), )?\"references\": (\\[\\{\"name\": \"a\", \"subject\": \"s\", \"version\": (-?[0-9]{1,12}|\"1\")\\}\\]|\\{\\}|null)\\}",
    ) {
        let client = client(&["http://r:8081".into()]);
        let endpoint = Endpoint::parse("http://r:8081").unwrap();
        for body in [body.clone(), json_body.into_bytes()] {
            let answer = transport::Answer { status, body: body.into() };
            if let Ok(value) = interpret(&endpoint, answer, &Lookup::Id(1)) {
                let _ = client.parse_schema(&value, &Lookup::Id(1));
            }
        }
    }

    /// Any URL text parses or is refused, never panics.
    #[test]
    fn any_url_text_parses_or_is_refused(url in "(https?://)?[a-z:@\\[\\]/%0-9?.]{0,30}") {
        let _ = Endpoint::parse(&url);
    }
}

/// The client is shared across tasks, and its futures run on any worker.
#[test]
fn the_client_and_its_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync + Clone + 'static>(_: &T) {}
    fn send<T: Send>(_: T) {}
    let client = client(&["http://127.0.0.1:1".into()]);
    send_sync(&client);
    send(client.schema_by_id(1));
    send(client.schema_by_guid("g"));
}

#[tokio::test]
async fn a_rate_limit_or_timeout_is_waited_out_not_a_failure() {
    for status in [408u16, 429] {
        let mut routes = HashMap::new();
        routes.insert(
            "/schemas/ids/1".to_string(),
            (
                status,
                r#"{"error_code": 42901, "message": "slow down"}"#.to_string(),
            ),
        );
        let client = client(&[canned(routes).await]);
        let error = client.schema_by_id(1).await.unwrap_err();
        assert!(
            error.is_transient() && error.to_string().contains(&status.to_string()),
            "{status}: {error}"
        );
    }
}

/// Answers every request with `status` and a body of `length` bytes sent without a
/// `content-length` (the end of the body is the end of the connection).
async fn streamed(status: u16, length: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer).await;
                let head = format!("HTTP/1.1 {status} X\r\nconnection: close\r\n\r\n");
                let _ = stream.write_all(head.as_bytes()).await;
                let chunk = vec![b' '; 64 * 1024];
                let mut left = length;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    url
}

/// A schema's answer larger than the bound is that schema's failure (`Unusable`: its
/// records fail with `decode_failed`), not an outage to wait out: it names the schema,
/// the URL (without its password) and the bound, and the registry's other schemas are
/// still fetched. Answered with or without a `content-length`, for an id or a reference.
#[tokio::test]
async fn an_answer_over_the_bound_fails_that_schema_not_the_registry() {
    let over = format!(r#"{{"schema": "{}"}}"#, "x".repeat(transport::MAX_BODY));
    let mut routes = HashMap::new();
    routes.insert("/schemas/ids/1".to_string(), (200, over.clone()));
    routes.insert(
        "/schemas/ids/2".to_string(),
        (200, r#"{"schema": "\"int\""}"#.to_string()),
    );
    routes.insert(
        "/schemas/ids/3".to_string(),
        (
            200,
            json!({"schema": "x", "references": [{"name": "big", "subject": "big", "version": 4}]})
                .to_string(),
        ),
    );
    routes.insert("/subjects/big/versions/4".to_string(), (200, over.clone()));
    let url = canned(routes).await;
    let with_password = url.replace("http://", "http://app:s3cret@");
    let registry = client(&[with_password]);
    let error = registry.schema_by_id(1).await.unwrap_err();
    assert!(!error.is_transient(), "{error}");
    let RegistryError::Unusable { what, message } = &error else {
        panic!("{error}")
    };
    assert_eq!(what, "schema id 1");
    let shown = url.replace("http://", "http://app:***@");
    for needle in [
        shown.as_str(),
        "answered 200",
        &format!("a body of {} bytes", over.len()),
        "the answer's size exceeded the bound of 16 MiB",
    ] {
        assert!(message.contains(needle), "{needle}: {message}");
    }
    assert!(!error.to_string().contains("s3cret"), "{error}");
    assert_eq!(registry.schema_by_id(2).await.unwrap().text, "\"int\"");
    let error = registry.schema_by_id(3).await.unwrap_err();
    assert!(
        matches!(&error, RegistryError::Unusable { what, .. } if what.contains("subject \"big\" version 4")),
        "{error}"
    );

    // Without a content-length: read up to the bound, then refused the same way.
    let error = client(&[streamed(200, transport::MAX_BODY + 1).await])
        .schema_by_id(5)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RegistryError::Unusable { message, .. }
            if message.contains(&format!("a body of more than {} bytes", transport::MAX_BODY))),
        "{error}"
    );
    // A body of exactly the bound is read (and is not JSON here).
    let error = client(&[streamed(200, transport::MAX_BODY).await])
        .schema_by_id(5)
        .await
        .unwrap_err();
    assert!(matches!(error, RegistryError::Invalid { .. }), "{error}");
    // A 503 stays an outage, whatever its body.
    let error = client(&[streamed(503, transport::MAX_BODY + 1).await])
        .schema_by_id(5)
        .await
        .unwrap_err();
    assert!(
        error.is_transient() && error.to_string().contains("503"),
        "{error}"
    );
}
