//! `sluice status`, `pause`, `resume`, `restart` and `stop`: the admin API of a running
//! sluice, for humans. The API's address comes from `--admin`, else from the
//! configuration file's `admin.listen` (`https://` when the file has `admin.tls`); the
//! token from `--token`, `SLUICE_ADMIN_TOKEN`, or the file's `admin.token` (`status` also
//! takes its `admin.read_token`); the CA that HTTPS trusts from `--ca`, `SLUICE_ADMIN_CA`,
//! or the file's `admin.tls.ca`.

use std::path::Path;

use hyper::Method;
use serde_json::Value;

use super::{EXIT_FAILURE, EXIT_INVALID};
use crate::admin::client::AdminClient;

/// Where the admin API is and how to talk to it.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The admin API, `http://host:port` or `https://host:port`; default: the file's
    /// `admin.listen`.
    #[arg(long)]
    admin: Option<String>,
    /// Bearer token; default: `SLUICE_ADMIN_TOKEN`, else the file's `admin.token`.
    #[arg(long)]
    token: Option<String>,
    /// CA certificate(s) (PEM) that an https:// admin API's certificate is checked
    /// against; default: `SLUICE_ADMIN_CA`, else the file's `admin.tls.ca`, else the web's
    /// public roots.
    #[arg(long)]
    ca: Option<std::path::PathBuf>,
    /// The configuration file that names the admin API when `--admin` is not given.
    #[arg(long, short, default_value = "connectors.yaml")]
    config: std::path::PathBuf,
}

/// What to do to a connector.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    Pause,
    Resume,
    Stop,
    Restart { tasks: bool, only_failed: bool },
}

/// The client of `target`; `reads_only`: the calls it makes only read (the file's read
/// token will do).
fn client(target: &Target, reads_only: bool) -> Result<AdminClient, u8> {
    let file = || -> Result<crate::config::AdminConfig, u8> {
        let config = super::load(Path::new(&target.config))?;
        config.admin.ok_or_else(|| {
            eprintln!(
                "{}: no admin section; give --admin http://host:port",
                target.config.display()
            );
            EXIT_INVALID
        })
    };
    let (url, file_token, file_ca) = match &target.admin {
        Some(url) => (url.clone(), None, None),
        None => {
            let admin = file()?;
            let listen = match admin.listen.rsplit_once(':') {
                Some(("0.0.0.0", port)) => format!("127.0.0.1:{port}"),
                Some(("[::]", port)) => format!("[::1]:{port}"),
                _ => admin.listen.clone(),
            };
            let scheme = if admin.tls.is_some() { "https" } else { "http" };
            let token = admin
                .token
                .or(if reads_only { admin.read_token } else { None })
                .map(|t| t.expose().to_string());
            (
                format!("{scheme}://{listen}"),
                token,
                admin.tls.and_then(|tls| tls.ca),
            )
        }
    };
    let token = target
        .token
        .clone()
        .or_else(|| {
            std::env::var("SLUICE_ADMIN_TOKEN")
                .ok()
                .filter(|t| !t.is_empty())
        })
        .or(file_token);
    let ca = target
        .ca
        .clone()
        .or_else(|| {
            std::env::var_os("SLUICE_ADMIN_CA")
                .filter(|c| !c.is_empty())
                .map(std::path::PathBuf::from)
        })
        .or(file_ca);
    AdminClient::with_ca(&url, token, ca.as_deref()).map_err(|e| {
        eprintln!("{e}");
        EXIT_INVALID
    })
}

/// `sluice status`: a table of the connectors, their tasks, lag and rows per second.
pub async fn status(target: &Target, format: super::OutputFormat) -> u8 {
    let client = match client(target, true) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let answer = match client
        .get("/connectors?expand=status")
        .await
        .and_then(|a| a.ok())
    {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_FAILURE;
        }
    };
    match format {
        super::OutputFormat::Text => print!("{}", status_table(&answer.json())),
        super::OutputFormat::Json => println!("{}", answer.json()),
    }
    0
}

/// The table `sluice status` prints for `GET /connectors?expand=status`.
pub fn status_table(all: &Value) -> String {
    let mut rows = vec![[
        "CONNECTOR".to_string(),
        "STATE".into(),
        "TASKS".into(),
        "LAG".into(),
        "ROWS/S".into(),
        "WORKER".into(),
    ]];
    let mut traces = Vec::new();
    if let Some(map) = all.as_object() {
        for (name, entry) in map {
            let status = &entry["status"];
            let tasks = status["tasks"].as_array().cloned().unwrap_or_default();
            let running = tasks.iter().filter(|t| t["state"] == "RUNNING").count();
            rows.push([
                name.clone(),
                match (
                    status["connector"]["state"].as_str(),
                    status["health"].as_str(),
                ) {
                    (Some(state), Some("DEGRADED")) => format!("{state} (DEGRADED)"),
                    (state, _) => state.unwrap_or("?").to_string(),
                },
                format!("{running}/{} running", tasks.len()),
                status["lag"].as_i64().map_or("-".into(), |l| l.to_string()),
                status["rows_per_second"]
                    .as_f64()
                    .map_or("-".into(), |r| format!("{r:.0}")),
                status["connector"]["worker_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            ]);
            if let Some(trace) = status["connector"]["trace"].as_str() {
                traces.push(format!("{name}: {trace}"));
            }
            for reason in status["health_reasons"].as_array().into_iter().flatten() {
                if let Some(reason) = reason.as_str() {
                    traces.push(format!("{name}: degraded: {reason}"));
                }
            }
            for task in &tasks {
                rows.push([
                    format!("  task {}", task["id"]),
                    task["state"].as_str().unwrap_or("?").to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                    task["worker_id"].as_str().unwrap_or("").to_string(),
                ]);
                if let Some(trace) = task["trace"].as_str() {
                    let first = trace.lines().next().unwrap_or("");
                    traces.push(format!("{name} task {}: {first}", task["id"]));
                }
            }
        }
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for trace in traces {
        out.push_str(&trace);
        out.push('\n');
    }
    out
}

/// `sluice pause|resume|stop|restart NAME`.
pub async fn act(target: &Target, name: &str, action: Action) -> u8 {
    let client = match client(target, false) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let (method, path) = match action {
        Action::Pause => (Method::PUT, format!("/connectors/{name}/pause")),
        Action::Resume => (Method::PUT, format!("/connectors/{name}/resume")),
        Action::Stop => (Method::PUT, format!("/connectors/{name}/stop")),
        Action::Restart { tasks, only_failed } => (
            Method::POST,
            format!(
                "/connectors/{name}/restart{}",
                crate::admin::connect_api::restart_query(tasks, only_failed)
            ),
        ),
    };
    match client
        .request(method, &path, None)
        .await
        .and_then(|a| a.ok())
    {
        Ok(_) => {
            println!("{name}: {action:?} accepted; every process applies it within a few seconds");
            0
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            EXIT_FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::status_table;

    #[test]
    fn the_status_table_shows_states_lag_rate_and_traces() {
        let all = serde_json::json!({
            "words": {"status": {
                "connector": {"state": "RUNNING", "worker_id": "pod-a"},
                "tasks": [
                    {"id": 0, "state": "RUNNING", "worker_id": "pod-a"},
                    {"id": 1, "state": "FAILED", "worker_id": "pod-b", "trace": "sink: refused\nmore"}
                ],
                "lag": 42, "rows_per_second": 1234.4,
                "health": "DEGRADED", "health_reasons": ["task 1 of pod-b FAILED"]
            }}
        });
        let table = status_table(&all);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("CONNECTOR"), "{table}");
        assert!(
            lines[1].contains("words")
                && lines[1].contains("1/2 running")
                && lines[1].contains("42")
                && lines[1].contains("1234"),
            "{table}"
        );
        assert!(
            lines[3].contains("task 1")
                && lines[3].contains("FAILED")
                && lines[3].contains("pod-b"),
            "{table}"
        );
        assert!(table.contains("words task 1: sink: refused\n"), "{table}");
        assert!(lines[1].contains("RUNNING (DEGRADED)"), "{table}");
        assert!(
            table.contains("words: degraded: task 1 of pod-b FAILED"),
            "{table}"
        );
    }
}
