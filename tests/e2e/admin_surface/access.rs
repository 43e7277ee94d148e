//! Who may call what: tokens, the read token, the `Host` check, `X-Sluice-Request`,
//! `validate` of an open listener, HTTPS.

use std::path::{Path, PathBuf};

use hyper::{Method, StatusCode};
use serde_json::json;
use sluice::admin::client::AdminClient;

use super::*;
use crate::harness::{self, SluiceProcess, free_port};

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
        &format!("admin: {{ listen: \"0.0.0.0:{port}\", token: t-0123456789abcdef }}"),
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
