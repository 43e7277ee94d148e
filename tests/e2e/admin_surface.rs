//! The admin API's surface against the network it is on, with a real `sluice run`: slow
//! and too many connections, the topics it reads (only its connectors' and their
//! dead-letter topics), answers bounded in bytes, HTTPS with `sluice status`, the read
//! token, the `Bearer` scheme in any case, the `Host` check of a loopback listener, the
//! header that keeps web pages from changing anything, `validate` refusing an open
//! listener, and a reload to an address that is taken.
//!
//! The listener's own tests run on the embedded Kafka (no broker needed); the record
//! reads run on the real broker and each database.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use sluice::admin::client::AdminClient;

use crate::harness::{self, Backend, Broker, SluiceProcess, TestDb, free_port};

/// A configuration with one connector on the embedded Kafka and SQLite, and `admin`.
fn embedded_config(dir: &Path, admin: &str) -> PathBuf {
    let db = dir.join("sink.db");
    let path = dir.join("connectors.yaml");
    std::fs::write(
        &path,
        format!(
            r#"kafka: {{ brokers: embedded }}
connectors:
  - name: surface
    topics: [surface]
    sink:
      url: "sqlite://{}?mode=rwc"
      table: surface
      columns: {{ v: {{ from: /v, type: text }} }}
      create_table: true
{admin}
"#,
            db.display()
        ),
    )
    .expect("write config");
    path
}

/// Waits until `client` answers `GET /healthz`.
async fn wait_ready(client: &AdminClient) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.get("/healthz").await {
            Ok(answer) if answer.status == StatusCode::OK => return,
            other => assert!(Instant::now() < deadline, "admin API never up: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn plain(port: u16) -> AdminClient {
    AdminClient::new(&format!("http://127.0.0.1:{port}"), None).expect("client")
}

/// One raw HTTP/1.1 request, its head as given: the status code, or `None` when the
/// connection closed without an answer.
fn raw(port: u16, head: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
        .write_all(format!("{head}\r\nConnection: close\r\n\r\n").as_bytes())
        .expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// A connection that sent half a request head and waits.
fn half_header(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .expect("write");
    stream
}

/// True once the server closed `stream` (end of file or reset), polled without blocking
/// for long.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(5)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    match stream.read(&mut buf) {
        Ok(0) => true,
        // An answer (408, say) is followed by the close.
        Ok(_) => closed_by_server(stream),
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// 300 connections that never finish their headers are closed after the 10 s header
/// timeout (not before), and the server answers a normal request after them.
#[test]
fn half_sent_headers_are_closed_after_the_header_timeout() {
    harness::run_test(async {
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = embedded_config(
            dir.path(),
            &format!("admin: {{ listen: \"127.0.0.1:{port}\" }}"),
        );
        let _sluice = SluiceProcess::start(&config);
        wait_ready(&plain(port)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;

        let opened = Instant::now();
        let mut slow: Vec<TcpStream> = (0..300).map(|_| half_header(port)).collect();
        let mut open = vec![true; slow.len()];
        let mut first_close = None;
        // 256 are served at once and time out at 10 s; the other 44 wait in the backlog
        // and time out 10 s after they are taken.
        while open.iter().any(|o| *o) && opened.elapsed() < Duration::from_secs(40) {
            for (stream, open) in slow.iter_mut().zip(open.iter_mut()) {
                if *open && closed_by_server(stream) {
                    *open = false;
                    first_close.get_or_insert(opened.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let still_open = open.iter().filter(|o| **o).count();
        assert_eq!(
            still_open,
            0,
            "{still_open} of 300 half-header connections still open after {:?}",
            opened.elapsed()
        );
        let first_close = first_close.expect("a close");
        assert!(
            first_close >= Duration::from_secs(9),
            "a connection was closed after {first_close:?}, before the header timeout"
        );
        println!(
            "ADMIN-SURFACE half headers: first closed after {first_close:?}, all 300 after {:?}",
            opened.elapsed()
        );
        assert_eq!(
            raw(port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1"),
            Some(200)
        );
    });
}

/// A request whose body stops arriving ends at the 60 s idle timeout (an answer, or the
/// connection closed), not before, and not never.
#[test]
fn a_request_body_that_never_comes_ends_at_the_idle_timeout() {
    harness::run_test(async {
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = embedded_config(
            dir.path(),
            &format!("admin: {{ listen: \"127.0.0.1:{port}\" }}"),
        );
        let _sluice = SluiceProcess::start(&config);
        wait_ready(&plain(port)).await;
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .write_all(b"POST /connectors/surface/dry-run HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Sluice-Request: 1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"limit\":")
            .expect("write");
        let sent = Instant::now();
        stream
            .set_read_timeout(Some(Duration::from_secs(90)))
            .expect("timeout");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let ended = sent.elapsed();
        println!(
            "ADMIN-SURFACE a stalled body ended after {ended:?}: {:?}",
            String::from_utf8_lossy(&answer).lines().next()
        );
        assert!(
            (Duration::from_secs(55)..Duration::from_secs(80)).contains(&ended),
            "a stalled request body ended after {ended:?}"
        );
    });
}

/// While 256 connections are held, connection 257 is not served; once they go, it is.
#[test]
fn connection_257_waits_while_256_are_held() {
    harness::run_test(async {
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = embedded_config(
            dir.path(),
            &format!("admin: {{ listen: \"127.0.0.1:{port}\" }}"),
        );
        let _sluice = SluiceProcess::start(&config);
        wait_ready(&plain(port)).await;
        // The readiness probe's connection is closed on the server's side too.
        tokio::time::sleep(Duration::from_millis(500)).await;

        let held: Vec<TcpStream> = (0..256).map(|_| half_header(port)).collect();
        let mut extra = TcpStream::connect(("127.0.0.1", port)).expect("connect 257");
        extra
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .expect("write");
        extra
            .set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        match extra.read(&mut buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            other => panic!(
                "connection 257 was served while 256 were held: {other:?} {:?}",
                String::from_utf8_lossy(&buf)
            ),
        }
        drop(held);
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut answer = Vec::new();
        let _ = extra.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "connection 257 after the others closed: {answer:?}"
        );
    });
}

/// Tokens: the read token reads and changes nothing; `bearer` in lower case is the same
/// scheme; a wrong token is 401.
#[test]
fn the_read_token_only_reads_and_the_scheme_has_no_case() {
    harness::run_test(async {
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = embedded_config(
            dir.path(),
            &format!(
                "admin: {{ listen: \"127.0.0.1:{port}\", token: write-0123, read_token: read-0123 }}"
            ),
        );
        let _sluice = SluiceProcess::start(&config);
        let reader = AdminClient::new(&format!("127.0.0.1:{port}"), Some("read-0123".into()))
            .expect("client");
        wait_ready(&reader).await;
        for path in ["/connectors", "/connectors/surface/status", "/metrics"] {
            let answer = reader.get(path).await.expect("get");
            assert_eq!(answer.status, StatusCode::OK, "GET {path}: {}", answer.body);
        }
        for (method, path) in [
            (Method::PUT, "/connectors/surface/pause"),
            (Method::POST, "/connectors/surface/restart"),
            (Method::DELETE, "/connectors/surface/offsets"),
            (Method::PATCH, "/connectors/surface/offsets"),
            (Method::POST, "/reload"),
        ] {
            let answer = reader
                .request(method.clone(), path, Some(json!({"offsets": []})))
                .await
                .expect("request");
            assert_eq!(
                answer.status,
                StatusCode::FORBIDDEN,
                "{method} {path} with the read token: {}",
                answer.body
            );
        }
        let host = format!("Host: 127.0.0.1:{port}");
        for scheme in ["Bearer", "bearer", "BEARER"] {
            assert_eq!(
                raw(
                    port,
                    &format!(
                        "GET /connectors HTTP/1.1\r\n{host}\r\nAuthorization: {scheme} write-0123"
                    )
                ),
                Some(200),
                "{scheme}"
            );
            assert_eq!(
                raw(
                    port,
                    &format!(
                        "PUT /connectors/nope/pause HTTP/1.1\r\n{host}\r\nAuthorization: {scheme} write-0123\r\nContent-Length: 0"
                    )
                ),
                Some(404),
                "{scheme} with the token passes to the handler"
            );
        }
        assert_eq!(
            raw(
                port,
                &format!("GET /connectors HTTP/1.1\r\n{host}\r\nAuthorization: bearer nope")
            ),
            Some(401)
        );
        assert_eq!(
            raw(port, &format!("GET /connectors HTTP/1.1\r\n{host}")),
            Some(401)
        );
        assert_eq!(
            raw(port, &format!("GET /healthz HTTP/1.1\r\n{host}")),
            Some(200)
        );
    });
}

/// Without a token, on loopback: a foreign `Host` is refused (DNS rebinding), and a call
/// that changes something needs `X-Sluice-Request: 1`.
#[test]
fn a_loopback_listener_refuses_foreign_hosts_and_bare_writes() {
    harness::run_test(async {
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = embedded_config(
            dir.path(),
            &format!("admin: {{ listen: \"127.0.0.1:{port}\" }}"),
        );
        let _sluice = SluiceProcess::start(&config);
        wait_ready(&plain(port)).await;
        let ours = format!("Host: 127.0.0.1:{port}");
        assert_eq!(
            raw(port, &format!("GET /connectors HTTP/1.1\r\n{ours}")),
            Some(200)
        );
        assert_eq!(
            raw(
                port,
                &format!("GET /connectors HTTP/1.1\r\nHost: localhost:{port}")
            ),
            Some(200)
        );
        assert_eq!(
            raw(
                port,
                &format!("GET /connectors HTTP/1.1\r\nHost: rebound.example:{port}")
            ),
            Some(403)
        );
        assert_eq!(
            raw(
                port,
                &format!("GET /healthz HTTP/1.1\r\nHost: rebound.example:{port}")
            ),
            Some(403)
        );
        let pause = "PUT /connectors/surface/pause HTTP/1.1\r\nContent-Length: 0";
        assert_eq!(raw(port, &format!("{pause}\r\n{ours}")), Some(403));
        assert_eq!(
            raw(port, &format!("{pause}\r\n{ours}\r\nX-Sluice-Request: 0")),
            Some(403)
        );
        assert_eq!(
            raw(port, &format!("{pause}\r\n{ours}\r\nX-Sluice-Request: 1")),
            Some(202)
        );
        // The library's client (and so `sluice pause`) sends it.
        let answer = plain(port)
            .request(Method::PUT, "/connectors/surface/resume", None)
            .await
            .expect("resume");
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    });
}

fn sluice_command(args: &[&str], config: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("SLUICE_ADMIN_TOKEN")
        .env_remove("SLUICE_ADMIN_CA")
        .output()
        .expect("run sluice")
}

/// `validate` (and so `run`) refuses a listener other hosts reach without a token.
#[test]
fn validate_refuses_a_listener_beyond_loopback_without_a_token() {
    let dir = tempfile::tempdir().expect("dir");
    let port = free_port();
    let open = embedded_config(
        dir.path(),
        &format!("admin: {{ listen: \"0.0.0.0:{port}\" }}"),
    );
    let output = sluice_command(&["validate"], &open);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("admin.listen") && stderr.contains("token"),
        "{stderr}"
    );
    let closed = embedded_config(
        dir.path(),
        &format!("admin: {{ listen: \"0.0.0.0:{port}\", token: t-0123 }}"),
    );
    let output = sluice_command(&["validate"], &closed);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, and a server certificate for localhost and 127.0.0.1 that it signed, made with
/// openssl: (CA certificate, server certificate, server key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let status = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run openssl");
        assert!(status.success(), "openssl {args:?} failed");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"],
            &ec[..],
            &[
                "-days",
                "2",
                "-subj",
                "/CN=sluice test CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"],
            &ec[..],
            &[
                "-subj",
                "/CN=localhost",
                "-keyout",
                "admin.key",
                "-out",
                "admin.csr",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .expect("write ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "admin.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "admin.crt",
    ]);
    (
        dir.join("ca.crt"),
        dir.join("admin.crt"),
        dir.join("admin.key"),
    )
}

/// `admin.tls` serves HTTPS: `sluice status` speaks it (trusting the file's `admin.tls.ca`),
/// a client trusting only the public roots refuses the certificate, plain HTTP gets no
/// answer.
#[test]
fn https_end_to_end_with_sluice_status() {
    harness::run_test(async {
        let dir = tempfile::tempdir().expect("dir");
        let (ca, cert, key) = certificates(dir.path());
        let port = free_port();
        let config = embedded_config(
            dir.path(),
            &format!(
                "admin:\n  listen: \"127.0.0.1:{port}\"\n  tls: {{ cert: {}, key: {}, ca: {} }}",
                cert.display(),
                key.display(),
                ca.display()
            ),
        );
        let _sluice = SluiceProcess::start(&config);
        let https = AdminClient::with_ca(&format!("https://127.0.0.1:{port}"), None, Some(&ca))
            .expect("client");
        wait_ready(&https).await;
        let by_name = AdminClient::with_ca(&format!("https://localhost:{port}"), None, Some(&ca))
            .expect("client");
        assert_eq!(
            by_name.get("/connectors").await.expect("get").status,
            StatusCode::OK
        );
        let untrusting =
            AdminClient::new(&format!("https://127.0.0.1:{port}"), None).expect("client");
        let refused = untrusting
            .get("/healthz")
            .await
            .expect_err("a self-signed certificate is not a public root's");
        assert!(refused.to_string().contains("certificate"), "{refused}");
        assert!(
            plain(port).get("/healthz").await.is_err(),
            "plain HTTP on the HTTPS port"
        );

        let output = sluice_command(&["status"], &config);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.starts_with("CONNECTOR") && stdout.contains("surface"),
            "{stdout}"
        );
        let output = sluice_command(&["pause", "surface"], &config);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// A reload to an address that is taken keeps the old listener serving and says so in
/// its answer; a reload to a free one moves it.
#[test]
fn a_reload_to_a_taken_address_keeps_the_old_listener() {
    harness::run_test(async {
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = embedded_config(
            dir.path(),
            &format!("admin: {{ listen: \"127.0.0.1:{port}\" }}"),
        );
        let _sluice = SluiceProcess::start(&config);
        let client = plain(port);
        wait_ready(&client).await;

        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let taken_port = taken.local_addr().expect("addr").port();
        embedded_config(
            dir.path(),
            &format!("admin: {{ listen: \"127.0.0.1:{taken_port}\" }}"),
        );
        let answer = client
            .request(Method::POST, "/reload", None)
            .await
            .expect("reload");
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let body = answer.json();
        assert_eq!(
            body["admin_listener"]["listening"],
            format!("127.0.0.1:{port}"),
            "{body}"
        );
        assert_eq!(
            body["admin_listener"]["refused"],
            format!("127.0.0.1:{taken_port}"),
            "{body}"
        );
        assert!(
            body["admin_listener"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("in use")),
            "{body}"
        );
        for _ in 0..3 {
            assert_eq!(
                client.get("/healthz").await.expect("old listener").status,
                StatusCode::OK
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        drop(taken);
        let moved =
            AdminClient::new(&format!("http://127.0.0.1:{taken_port}"), None).expect("client");
        let answer = client
            .request(Method::POST, "/reload", None)
            .await
            .expect("reload");
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        assert!(
            answer.json().get("admin_listener").is_none(),
            "{}",
            answer.body
        );
        wait_ready(&moved).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while client.get("/healthz").await.is_ok() {
            assert!(
                Instant::now() < deadline,
                "the old listener still serves after the move"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

/// A connector on the real broker with a dead-letter topic, and the admin API.
fn broker_config(
    dir: &Path,
    bootstrap: &str,
    db: &TestDb,
    topic: &str,
    dlq: &str,
    port: u16,
) -> PathBuf {
    let path = dir.join("connectors.yaml");
    let table = harness::unique("surface");
    std::fs::write(
        &path,
        format!(
            r#"kafka: {{ brokers: "{bootstrap}" }}
admin: {{ listen: "127.0.0.1:{port}", token: surface-0123 }}
connectors:
  - name: reader
    topics: [{topic}]
    group: {group}
    format: string
    sink:
      url: "{url}"
      table: {table}
      columns: {{ v: {{ from: $value, type: text }} }}
      create_table: true
    errors: {{ policy: dlq, dlq: {{ topic: {dlq} }} }}
"#,
            group = harness::unique("group"),
            url = db.url,
        ),
    )
    .expect("write config");
    path
}

async fn produce_raw(bootstrap: &str, topic: &str, values: &[Vec<u8>]) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.max.bytes", "2000000")
        .set("linger.ms", "0")
        .create()
        .expect("producer");
    for value in values {
        producer
            .send(
                FutureRecord::<(), _>::to(topic).partition(0).payload(value),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
    }
}

/// The records endpoint and dry-run read the connector's topic and its dead-letter topic
/// (200) and nothing else (403, the same whether the topic exists or not); a read of large
/// records stops at 16 MiB and says where to go on.
async fn the_admin_api_reads_only_its_connectors_topics(db: Backend) {
    let broker = Broker::start();
    let db = TestDb::new(db);
    let topic = harness::unique("surface");
    let dlq = format!("{topic}-dlq");
    let foreign = harness::unique("connect-configs");
    for t in [&topic, &dlq, &foreign] {
        broker.create_topic(t, 1).await;
    }
    produce_raw(
        &broker.bootstrap,
        &foreign,
        &[br#"{"connection.password":"hunter2"}"#.to_vec()],
    )
    .await;
    produce_raw(&broker.bootstrap, &dlq, &[b"dead".to_vec()]).await;
    // 20 records of 900 kB: 18 MB, more than one answer holds.
    let big: Vec<Vec<u8>> = (0..20u8).map(|i| vec![b'a' + i % 26; 900_000]).collect();
    produce_raw(&broker.bootstrap, &topic, &big).await;

    let dir = tempfile::tempdir().expect("dir");
    let port = free_port();
    let config = broker_config(dir.path(), &broker.bootstrap, &db, &topic, &dlq, port);
    let _sluice = SluiceProcess::start(&config);
    let client = AdminClient::new(&format!("127.0.0.1:{port}"), Some("surface-0123".into()))
        .expect("client");
    wait_ready(&client).await;

    let records = |t: &str, query: &str| format!("/topics/{t}/partitions/0/records?{query}");
    let forbidden = client
        .get(&records(&foreign, "offset=0"))
        .await
        .expect("get");
    assert_eq!(
        forbidden.status,
        StatusCode::FORBIDDEN,
        "{}",
        forbidden.body
    );
    assert!(!forbidden.body.contains("hunter2"));
    let missing = client
        .get(&records("no-such-topic", "offset=0"))
        .await
        .expect("get");
    assert_eq!(missing.status, StatusCode::FORBIDDEN, "{}", missing.body);
    assert_eq!(
        forbidden.body.replace(&foreign, "T"),
        missing.body.replace("no-such-topic", "T"),
        "a 403 tells nothing of whether the topic exists"
    );
    let dead = client.get(&records(&dlq, "offset=0")).await.expect("get");
    assert_eq!(dead.status, StatusCode::OK, "{}", dead.body);
    assert_eq!(dead.json()[0]["value"], "dead");
    let dry_foreign = client
        .request(
            Method::POST,
            "/connectors/reader/dry-run",
            Some(json!({"topic": foreign, "offset": 0, "limit": 1})),
        )
        .await
        .expect("dry-run");
    assert_eq!(
        dry_foreign.status,
        StatusCode::FORBIDDEN,
        "{}",
        dry_foreign.body
    );

    // Large records: cut at 16 MiB, with where to go on.
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let answer = client
            .get(&records(&topic, "offset=0&limit=20"))
            .await
            .expect("get");
        if answer.status == StatusCode::OK || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert!(
        first.body.len() <= 16 * 1024 * 1024,
        "an answer of {} bytes",
        first.body.len()
    );
    let got = first.json().as_array().expect("array").len();
    assert!((1..20).contains(&got), "{got} records in the first answer");
    assert_eq!(
        first
            .headers
            .get("x-sluice-truncated")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let next: usize = first
        .headers
        .get("x-sluice-next-offset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("next offset");
    assert_eq!(next, got);
    let rest = client
        .get(&records(&topic, &format!("offset={next}&limit=20")))
        .await
        .expect("get");
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.body);
    assert_eq!(rest.json().as_array().expect("array").len(), 20 - got);
    assert!(rest.headers.get("x-sluice-truncated").is_none());
    println!(
        "ADMIN-SURFACE 20 records of 900 kB: {got} in the first answer ({} bytes), {} in the second",
        first.body.len(),
        20 - got
    );

    let dry = client
        .request(
            Method::POST,
            "/connectors/reader/dry-run",
            Some(json!({"topic": topic, "offset": 0, "limit": 20})),
        )
        .await
        .expect("dry-run");
    assert_eq!(
        dry.status,
        StatusCode::OK,
        "{}",
        &dry.body[..dry.body.len().min(300)]
    );
    assert!(
        dry.body.len() <= 16 * 1024 * 1024,
        "a dry run of {} bytes",
        dry.body.len()
    );
    let body = dry.json();
    assert_eq!(body["truncated"], true);
    let records = body["records"].as_array().expect("records").len();
    assert_eq!(body["next_offset"], records);

    // At most 2 dry runs at once: of 6 sent together, some are refused with 503.
    let body = json!({"topic": topic, "offset": 0, "limit": 20});
    let answers = futures_util::future::join_all((0..6).map(|_| {
        client.request(
            Method::POST,
            "/connectors/reader/dry-run",
            Some(body.clone()),
        )
    }))
    .await;
    let codes: Vec<u16> = answers
        .into_iter()
        .map(|a| a.expect("dry-run").status.as_u16())
        .collect();
    assert!(codes.iter().all(|c| *c == 200 || *c == 503), "{codes:?}");
    assert!(codes.contains(&200) && codes.contains(&503), "{codes:?}");
}
for_each_database!(the_admin_api_reads_only_its_connectors_topics);

/// The client ports of every TCP connection to `port` on this machine, in any state
/// (`TIME_WAIT` too: a connection closed a moment ago still shows).
fn client_ports_to(port: u16) -> std::collections::BTreeSet<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port_of = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let local = port_of(fields.next()?)?;
            let remote = port_of(fields.next()?)?;
            if remote == port {
                Some(local)
            } else if local == port {
                Some(remote)
            } else {
                None
            }
        })
        .collect()
}

/// `GET /connectors/{name}/offsets` of an at-least-once connector (the Kafka group's
/// committed offsets) reuses one Kafka client: ten calls open no new connections to the
/// broker after the first, where a client per call opens some each time.
#[test]
fn at_least_once_offsets_calls_reuse_one_kafka_client() {
    harness::run_test(async {
        let broker = Broker::start();
        let topic = harness::unique("alo");
        broker.create_topic(&topic, 2).await;
        let broker_port: u16 = broker
            .bootstrap
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("the broker's port");
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let config = dir.path().join("connectors.yaml");
        std::fs::write(
            &config,
            format!(
                r#"kafka: {{ brokers: "{bootstrap}" }}
admin: {{ listen: "127.0.0.1:{port}" }}
connectors:
  - name: alo
    topics: [{topic}]
    group: {group}
    format: string
    delivery: {{ guarantee: at_least_once }}
    sink:
      url: "sqlite://{db}?mode=rwc"
      table: alo
      columns: {{ v: {{ from: $value, type: text }} }}
      create_table: true
"#,
                bootstrap = broker.bootstrap,
                group = harness::unique("group"),
                db = dir.path().join("alo.db").display(),
            ),
        )
        .expect("write config");
        let _sluice = SluiceProcess::start(&config);
        let client = plain(port);
        wait_ready(&client).await;
        let offsets = || async {
            let answer = client
                .get("/connectors/alo/offsets")
                .await
                .expect("offsets");
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        };
        offsets().await;
        let before = client_ports_to(broker_port);
        for _ in 0..10 {
            offsets().await;
        }
        let new: Vec<u16> = client_ports_to(broker_port)
            .difference(&before)
            .copied()
            .collect();
        println!(
            "ADMIN-SURFACE 10 offsets calls opened {} new connections to the broker",
            new.len()
        );
        assert!(
            new.len() < 5,
            "10 offsets calls opened {} new connections to the broker: a client per call",
            new.len()
        );
    });
}
