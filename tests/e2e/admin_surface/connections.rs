//! Slow and too many connections, and a listener that cannot move.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use sluice::admin::client::AdminClient;

use super::*;
use crate::harness::{self, SluiceProcess, free_port};

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
