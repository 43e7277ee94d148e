//! The status page (`GET /`) and the history it draws (`/connectors/{name}/history`),
//! against a real `sluice run` on the test broker and SQLite:
//!
//! - the page, its script and its styles are served without the token, under a
//!   Content-Security-Policy that allows nothing from elsewhere, and refer to nothing
//!   elsewhere; the history needs the token and fills with samples as records flow; the
//!   status answer carries the figures the page shows;
//! - the page in a real headless Chromium (`browser.cjs`, playwright-core over Debian's
//!   Chromium): a wrong token refused, the connector and its running tasks, a read token
//!   without buttons, no sideways scroll at a phone's width, a click on Pause that pauses
//!   the connector (checked through the API, and in the table: records that come
//!   meanwhile are not written), a stopped process shown as not answering, a click while
//!   it is down said to be unanswered, the page recovered once it is back, a connector's
//!   own link, and a link to a connector the process does not run;
//! - the connector's lag and rate summed over two processes (`processes.rs`).
//!
//! The browser test needs `node`, Chromium and playwright-core: `scripts/setup.sh --tests`
//! installs them. Without them it fails, and says so.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::Value;
use sluice::admin::client::AdminClient;

use crate::harness::{self, Backend, Pipeline, Scenario, free_port};

mod degraded;
mod processes;

const TOKEN: &str = "page-token-0123";
const READ_TOKEN: &str = "page-read-0123";
const TASKS: u32 = 2;

/// A scenario of `TASKS` tasks through the `word_parse` plugin (named `parse`), with an
/// admin listener on `port` that has both tokens.
fn scenario(port: u16) -> Scenario {
    let mut scenario = Scenario::new(TASKS);
    scenario.extra_kafka = format!(
        "admin:\n  listen: \"127.0.0.1:{port}\"\n  token: {TOKEN}\n  read_token: {READ_TOKEN}"
    );
    scenario.transforms = format!(
        "    transforms:\n      - name: parse\n        plugin: {}\n",
        sluice_transform::example_plugin_path("word_parse").display()
    );
    scenario
}

fn client(port: u16, token: Option<&str>) -> AdminClient {
    AdminClient::new(&format!("http://127.0.0.1:{port}"), token.map(String::from)).expect("client")
}

async fn wait_up(port: u16) {
    let anonymous = client(port, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match anonymous.get("/healthz").await {
            Ok(answer) if answer.status == StatusCode::OK => return,
            other => assert!(Instant::now() < deadline, "admin API never up: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `GET path` with the token until `check` holds (at most `seconds`).
async fn wait_json(port: u16, path: &str, seconds: u64, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let answer = client(port, Some(TOKEN)).get(path).await.expect("request");
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
        let body = answer.json();
        if check(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path} never matched: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn header<'a>(answer: &'a sluice::admin::client::Answer, name: &str) -> &'a str {
    answer
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// External references in a text: `http://` or `https://`, but for the SVG namespace
/// (a name, never loaded).
fn external_references(text: &str) -> Vec<&str> {
    text.match_indices("http")
        .map(|(i, _)| &text[i..text.len().min(i + 40)])
        .filter(|at| at.starts_with("http://") || at.starts_with("https://"))
        .filter(|at| !at.starts_with("http://www.w3.org/2000/svg"))
        .collect()
}

/// The page and its parts without the token, their policy; the history with it, filling
/// as records flow; the status's figures for the page.
#[test]
fn the_page_is_open_and_its_data_needs_the_token() {
    harness::run_test(async {
        let port = free_port();
        let run = Pipeline::new(Backend::Sqlite, scenario(port), 2).await;
        let name = run.scenario.connector.clone();
        run.broker.produce_raw(&run.scenario.topic, 0..2000).await;
        let _sluice = run.start();
        wait_up(port).await;

        let anonymous = client(port, None);
        let page = anonymous.get("/").await.expect("GET /");
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(header(&page, "content-type").starts_with("text/html"));
        let policy = header(&page, "content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(policy.contains(directive), "{directive} missing: {policy}");
        }
        assert_eq!(header(&page, "x-content-type-options"), "nosniff");
        assert_eq!(external_references(&page.body), Vec::<&str>::new());
        assert!(page.body.contains("/status-page/app.js"));
        for (path, kind) in [
            ("/status-page/app.js", "text/javascript"),
            ("/status-page/style.css", "text/css"),
        ] {
            let part = anonymous.get(path).await.expect(path);
            assert_eq!(part.status, StatusCode::OK, "{path}");
            assert!(header(&part, "content-type").starts_with(kind), "{path}");
            assert_eq!(header(&part, "content-security-policy"), policy, "{path}");
            assert_eq!(
                external_references(&part.body),
                Vec::<&str>::new(),
                "{path}"
            );
        }

        // The data needs the token; the answer says what a token may do.
        let history_path = format!("/connectors/{name}/history");
        let refused = anonymous.get(&history_path).await.expect("history");
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);
        let read = client(port, Some(READ_TOKEN))
            .get(&history_path)
            .await
            .expect("history");
        assert_eq!(read.status, StatusCode::OK);
        assert_eq!(header(&read, "x-sluice-access"), "read");
        let full = client(port, Some(TOKEN))
            .get(&history_path)
            .await
            .expect("history");
        assert_eq!(header(&full, "x-sluice-access"), "all");
        let unknown = client(port, Some(TOKEN))
            .get("/connectors/nope/history")
            .await
            .expect("history");
        assert_eq!(unknown.status, StatusCode::NOT_FOUND);
        assert_eq!(unknown.json()["message"], "Connector nope not found");

        // Samples every 5 s; more records after the first: a rate above 0, and the last
        // sample's total is every row.
        run.wait_for_rows(2000, 120).await;
        wait_json(port, &history_path, 30, |h| {
            h["samples"].as_array().is_some_and(|s| !s.is_empty())
        })
        .await;
        run.broker
            .produce_raw(&run.scenario.topic, 2000..4000)
            .await;
        run.wait_for_rows(4000, 120).await;
        let history = wait_json(port, &history_path, 30, |h| {
            let samples = h["samples"].as_array().cloned().unwrap_or_default();
            samples.last().is_some_and(|s| s["rows_written"] == 4000)
                && samples
                    .iter()
                    .any(|s| s["rows_per_second"].as_f64().is_some_and(|r| r > 0.0))
        })
        .await;
        assert_eq!(history["interval_seconds"], 5, "{history}");
        assert_eq!(history["window_seconds"], 900, "{history}");
        let samples = history["samples"].as_array().expect("samples");
        assert_eq!(samples[0]["rows_per_second"], Value::Null, "{history}");
        let times: Vec<i64> = samples.iter().filter_map(|s| s["at"].as_i64()).collect();
        assert!(
            times.windows(2).all(|w| w[1] - w[0] >= 4900),
            "samples 5 s apart: {times:?}"
        );

        // The figures the page shows, from the same counters as /metrics.
        let status = wait_json(port, &format!("/connectors/{name}/status"), 30, |s| {
            s["tasks"].as_array().is_some_and(|t| {
                t.len() == TASKS as usize && t.iter().all(|t| t["state"] == "RUNNING")
            })
        })
        .await;
        for field in [
            "records_skipped",
            "duplicates_skipped",
            "offset_gaps",
            "offset_resets",
            "offsets_skipped",
            "dead_letters",
        ] {
            assert!(status[field].is_u64(), "{field}: {status}");
        }
        assert_eq!(status["rows_written"], 4000, "{status}");
        assert_eq!(status["last_error"], Value::Null, "{status}");
        let plugins = status["plugins"].as_array().expect("plugins");
        assert_eq!(plugins.len(), 1, "{status}");
        assert_eq!(plugins[0]["name"], "parse");
        assert_eq!(plugins[0]["plugin"], "word_parse.wasm");
        let calls = plugins[0]["calls"].as_u64().unwrap_or(0);
        assert!(calls > 0, "{status}");
        let scrape = client(port, Some(TOKEN))
            .get("/metrics")
            .await
            .expect("scrape");
        let count =
            format!("sluice_plugin_call_seconds_count{{connector=\"{name}\",plugin=\"parse\"}} ");
        let scraped: Option<u64> = scrape
            .body
            .lines()
            .find_map(|l| l.strip_prefix(count.as_str()))
            .and_then(|v| v.trim().parse().ok());
        assert!(
            scraped.is_some_and(|s| s >= calls),
            "the status's calls ({calls}) are the metric's ({scraped:?})"
        );
    });
}

/// The browser script's process, killed if the test ends before it does.
struct Script(std::process::Child);

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most `seconds`) for the browser script to print `word`.
async fn expect_line(
    hear: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    word: &str,
    seconds: u64,
) {
    let line = tokio::time::timeout(Duration::from_secs(seconds), hear.recv()).await;
    assert_eq!(
        line,
        Ok(Some(word.to_string())),
        "the browser script did not get to {word} (its log is above)"
    );
}

/// Where `scripts/setup.sh --tests` installs playwright-core.
fn browser_deps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/status-page-browser/node_modules/playwright-core")
}

const CHROMIUM: &str = "/usr/bin/chromium";

/// What the browser test needs, or a failure that says how to get it.
fn browser_tools() -> PathBuf {
    let setup = "run `scripts/setup.sh --tests` (it installs Chromium from Debian and playwright-core from npm into target/status-page-browser)";
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "the status page's browser test needs `node`, which is missing ({node:?}): {setup}"
    );
    assert!(
        Path::new(CHROMIUM).exists(),
        "the status page's browser test needs {CHROMIUM}, which is missing: {setup}"
    );
    let deps = browser_deps();
    let pinned: Value = serde_json::from_str(include_str!("package.json")).expect("package.json");
    let installed = std::fs::read_to_string(deps.join("package.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
    let want = &pinned["dependencies"]["playwright-core"];
    assert!(
        installed.as_ref().is_some_and(|i| &i["version"] == want),
        "the status page's browser test needs playwright-core {want} in {}, found {:?}: {setup}",
        deps.display(),
        installed.map(|i| i["version"].clone())
    );
    deps
}

/// The page in headless Chromium: tokens, tasks, phone width, Pause through the API, a
/// stopped process shown as such, a click while it is down, its recovery once started
/// again, and the links to one connector. Screenshots go to target/tmp/status-page/.
#[test]
fn the_page_in_chromium_pauses_and_sees_the_process_stop() {
    let deps = browser_tools();
    harness::run_test(async {
        let port = free_port();
        let run = Pipeline::new(Backend::Sqlite, scenario(port), 2).await;
        let name = run.scenario.connector.clone();
        run.broker.produce_raw(&run.scenario.topic, 0..2000).await;
        let sluice = run.start();
        wait_up(port).await;
        run.wait_for_rows(2000, 120).await;
        // Records keep flowing at a steady pace, for the chart.
        let (bootstrap, topic) = (run.broker.bootstrap.clone(), run.scenario.topic.clone());
        let producer = tokio::spawn(async move {
            harness::produce_values(
                &bootstrap,
                &topic,
                2000..6000,
                |uid| format!("#{uid}*w{}@{}", uid % 97, 1_700_000_000_000u64 + uid),
                Some(200),
            )
            .await;
        });

        let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page");
        std::fs::create_dir_all(&shots).expect("screenshot dir");
        let mut node = Script(
            Command::new("node")
                .arg(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../tests/e2e/status_page/browser.cjs"),
                )
                .env("PLAYWRIGHT_CORE", &deps)
                .env("CHROMIUM", CHROMIUM)
                .env("URL", format!("http://127.0.0.1:{port}/"))
                .env("TOKEN", TOKEN)
                .env("READ_TOKEN", READ_TOKEN)
                .env("CONNECTOR", &name)
                .env("TASKS", TASKS.to_string())
                .env("SHOTS", &shots)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start node"),
        );
        let mut to_node = node.0.stdin.take().expect("stdin");
        let from_node = node.0.stdout.take().expect("stdout");
        let (said, mut hear) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(from_node).lines().map_while(Result::ok) {
                let _ = said.send(line);
            }
        });
        expect_line(&mut hear, "PAUSE_CLICKED", 120).await;
        // The click paused the connector: the API says so, in every task.
        wait_json(port, &format!("/connectors/{name}/status"), 30, |s| {
            s["connector"]["state"] == "PAUSED"
                && s["tasks"].as_array().is_some_and(|t| {
                    t.len() == TASKS as usize && t.iter().all(|t| t["state"] == "PAUSED")
                })
        })
        .await;
        expect_line(&mut hear, "PAUSED_SHOWN", 60).await;
        // And the table: records that come while it is paused are not written.
        producer.abort();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let paused_at = run.stats().await.rows;
        run.broker
            .produce_raw(&run.scenario.topic, 10_000..10_500)
            .await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(
            run.stats().await.rows,
            paused_at,
            "rows were written while the page's Pause held"
        );

        let exit = sluice.terminate();
        assert!(exit.success(), "sluice exited with {exit}");
        writeln!(to_node, "STOPPED").expect("tell the browser script");
        expect_line(&mut hear, "UNREACHABLE_SHOWN", 60).await;
        expect_line(&mut hear, "CLICK_FAILURE_SHOWN", 60).await;
        let sluice = run.start();
        wait_up(port).await;
        writeln!(to_node, "STARTED").expect("tell the browser script");
        expect_line(&mut hear, "RECOVERED", 60).await;
        // The click while it was down did nothing: still paused.
        wait_json(port, &format!("/connectors/{name}/status"), 10, |s| {
            s["connector"]["state"] == "PAUSED"
        })
        .await;
        expect_line(&mut hear, "LINKS_SHOWN", 60).await;
        let exit = sluice.terminate();
        assert!(exit.success(), "sluice exited with {exit}");
        let status = tokio::task::spawn_blocking(move || {
            let mut node = node;
            node.0.wait()
        })
        .await
        .expect("join")
        .expect("wait for node");
        assert!(status.success(), "the browser script failed: {status}");
        assert!(shots.join("status-page.png").exists());
    });
}
