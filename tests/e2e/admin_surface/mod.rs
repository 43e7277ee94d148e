//! The admin API's surface against the network it is on, with a real `sluice run`: slow
//! and too many connections, the topics it reads (only its connectors' and their
//! dead-letter topics), answers bounded in bytes, HTTPS with `sluice status`, the read
//! token, the `Bearer` scheme in any case, the `Host` check of a loopback listener, the
//! header that keeps web pages from changing anything, `validate` refusing an open
//! listener, and a reload to an address that is taken.
//!
//! The listener's own tests run on the embedded Kafka (no broker needed); the record
//! reads run on the real broker and each database.

//!
//! - [`connections`]: half-sent headers, stalled bodies, connection 257, a reload to a
//!   taken address.
//! - [`access`]: tokens, the read token, the `Host` check, `X-Sluice-Request`, `validate`,
//!   HTTPS.
//! - [`reads`]: the topics it reads, 16 MiB answers, dry runs at once, the offsets calls'
//!   Kafka client.

mod access;
mod connections;
mod reads;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use sluice::admin::client::AdminClient;

/// A configuration with one connector on the embedded Kafka and SQLite, and `admin`.
pub(super) fn embedded_config(dir: &Path, admin: &str) -> PathBuf {
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
pub(super) async fn wait_ready(client: &AdminClient) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.get("/healthz").await {
            Ok(answer) if answer.status == StatusCode::OK => return,
            other => assert!(Instant::now() < deadline, "admin API never up: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn plain(port: u16) -> AdminClient {
    AdminClient::new(&format!("http://127.0.0.1:{port}"), None).expect("client")
}

/// One raw HTTP/1.1 request, its head as given: the status code, or `None` when the
/// connection closed without an answer.
pub(super) fn raw(port: u16, head: &str) -> Option<u16> {
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
pub(super) fn half_header(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .expect("write");
    stream
}

/// True once the server closed `stream` (end of file or reset), polled without blocking
/// for long.
pub(super) fn closed_by_server(stream: &mut TcpStream) -> bool {
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

pub(super) fn sluice_command(args: &[&str], config: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("SLUICE_ADMIN_TOKEN")
        .env_remove("SLUICE_ADMIN_CA")
        .output()
        .expect("run sluice")
}
