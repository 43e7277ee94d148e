//! The targets of a test fed by a real Debezium: a database of the test's own on each
//! server (SQLite: a temporary file), read as text, and the `sluice run` process that
//! replicates into it, SIGKILLed and started again at will.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{Backend, log_dir, unique};

/// A target database of the test's own. A clone is another handle on the same database.
#[derive(Clone)]
pub(super) enum TargetDb {
    /// A database of its own on the shared server.
    Server {
        kind: Backend,
        server_url: String,
        name: String,
        url: String,
    },
    Sqlite {
        _dir: std::sync::Arc<tempfile::TempDir>,
        path: PathBuf,
        url: String,
    },
}

impl TargetDb {
    pub(super) async fn create(kind: Backend) -> TargetDb {
        match kind {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path = dir.path().join("replica.db");
                let url = format!("sqlite://{}", path.display());
                TargetDb::Sqlite {
                    _dir: std::sync::Arc::new(dir),
                    path,
                    url,
                }
            }
            kind => {
                let server_url = crate::harness::TestDb::new(kind).url;
                let name = unique("dbzrep");
                server_execute(kind, &server_url, &format!("CREATE DATABASE {name}")).await;
                let base = server_url
                    .rsplit_once('/')
                    .map_or(server_url.as_str(), |(base, _)| base);
                let url = format!("{base}/{name}");
                TargetDb::Server {
                    kind,
                    server_url,
                    name,
                    url,
                }
            }
        }
    }

    pub(super) fn kind(&self) -> Backend {
        match self {
            TargetDb::Server { kind, .. } => *kind,
            TargetDb::Sqlite { .. } => Backend::Sqlite,
        }
    }

    pub(super) fn url(&self) -> &str {
        match self {
            TargetDb::Server { url, .. } | TargetDb::Sqlite { url, .. } => url,
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self.kind() {
            Backend::Postgres => "postgres",
            Backend::MariaDb => "mariadb",
            Backend::Sqlite => "sqlite",
        }
    }

    pub(super) async fn drop_now(&self) {
        if let TargetDb::Server {
            kind,
            server_url,
            name,
            ..
        } = self
        {
            let sql = match kind {
                Backend::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                _ => format!("DROP DATABASE IF EXISTS {name}"),
            };
            server_execute(*kind, server_url, &sql).await;
        }
    }

    /// Another handle on the same database (for a task of its own).
    pub(super) fn clone_handle(&self) -> TargetDb {
        self.clone()
    }

    /// Runs `sql` (DDL of the test's own), creating a SQLite file that is not there yet.
    pub(super) async fn execute(&self, sql: &str) {
        match self {
            TargetDb::Server { kind, url, .. } => server_execute(*kind, url, sql).await,
            TargetDb::Sqlite { path, .. } => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true);
                let pool = sqlx::SqlitePool::connect_with(options)
                    .await
                    .expect("open the SQLite target");
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                    .execute(&pool)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                pool.close().await;
            }
        }
    }

    /// Runs `sql`, every column selected as text (NULL as `None`).
    pub(super) async fn query(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        use sqlx::Row;
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        macro_rules! run {
            ($pool:expr) => {{
                let pool = $pool.map_err(|e| e.to_string())?;
                let rows = sqlx::query(sql).fetch_all(&pool).await;
                pool.close().await;
                rows.map_err(|e| e.to_string())?
                    .iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| r.try_get::<Option<String>, _>(i).map_err(|e| e.to_string()))
                            .collect::<Result<Vec<_>, String>>()
                    })
                    .collect()
            }};
        }
        match self {
            TargetDb::Server {
                kind: Backend::Postgres,
                url,
                ..
            } => run!(sqlx::PgPool::connect(url).await),
            TargetDb::Server { url, .. } => run!(sqlx::MySqlPool::connect(url).await),
            TargetDb::Sqlite { path, .. } => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(false)
                    .read_only(true)
                    .busy_timeout(Duration::from_secs(10));
                run!(sqlx::SqlitePool::connect_with(options).await)
            }
        }
    }

    /// Quotes a name for this database.
    pub(super) fn quote(&self, name: &str) -> String {
        match self.kind() {
            Backend::MariaDb => format!("`{}`", name.replace('`', "``")),
            _ => format!("\"{}\"", name.replace('"', "\"\"")),
        }
    }

    /// `CAST(expr AS <text>)` in this database.
    pub(super) fn as_text(&self, expr: &str) -> String {
        match self.kind() {
            Backend::Postgres => format!("({expr})::text"),
            Backend::MariaDb => format!("CAST({expr} AS CHAR)"),
            Backend::Sqlite => format!("CAST({expr} AS TEXT)"),
        }
    }

    /// Rows of `table`; 0 while it does not exist (or cannot be read).
    pub(super) async fn count(&self, table: &str) -> i64 {
        let sql = format!(
            "SELECT {} FROM {}",
            self.as_text("COUNT(*)"),
            self.quote(table)
        );
        self.query(&sql)
            .await
            .ok()
            .and_then(|rows| rows.first().cloned())
            .and_then(|row| row.first().cloned().flatten())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// The connector's stored next offsets by topic (partition 0: Debezium's topics have
    /// one).
    pub(super) async fn stored_offsets(&self, connector: &str) -> BTreeMap<String, i64> {
        let sql = format!(
            "SELECT topic, {} FROM sluice_offsets WHERE connector = '{}'",
            self.as_text("next_offset"),
            connector.replace('\'', "''")
        );
        self.query(&sql)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter_map(|row| {
                let topic = row.first()?.clone()?;
                let next = row.get(1)?.as_ref()?.parse().ok()?;
                Some((topic, next))
            })
            .collect()
    }

    /// Every dead letter of the table `dlq` (none while it does not exist), one line each.
    pub(super) async fn dead_letters(&self, dlq: &str) -> Vec<String> {
        let sql = format!(
            "SELECT source_topic, {}, error_class, error_message FROM {} ORDER BY source_topic, source_offset",
            self.as_text("source_offset"),
            self.quote(dlq)
        );
        self.query(&sql)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|row| {
                let get = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
                let message = get(3);
                let message: String = if message.chars().count() > 300 {
                    message.chars().take(300).collect::<String>() + "…"
                } else {
                    message
                };
                format!("{}@{}: {}: {message}", get(0), get(1), get(2))
            })
            .collect()
    }
}

pub(super) async fn server_execute(kind: Backend, url: &str, sql: &str) {
    use sqlx::Connection;
    let statement = sqlx::AssertSqlSafe(sql.to_string());
    match kind {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            sqlx::raw_sql(statement)
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        Backend::MariaDb => {
            let mut conn = sqlx::MySqlConnection::connect(url).await.expect("connect");
            sqlx::raw_sql(statement)
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        Backend::Sqlite => unreachable!("SQLite needs no database of its own"),
    }
}

/// One target: its database, connector and `sluice run` process.
pub(super) struct Replica {
    pub(super) db: TargetDb,
    pub(super) connector: String,
    pub(super) dlq: String,
    config: PathBuf,
    process: Option<Child>,
    logs: Vec<PathBuf>,
}

impl Replica {
    /// A replica of `connector` (its dead letters in the table `dlq`) into `db`, run with
    /// the configuration `text`, written into `dir`.
    pub(super) fn new(
        db: TargetDb,
        connector: String,
        dlq: String,
        text: &str,
        dir: &Path,
    ) -> Replica {
        let config = dir.join(format!("{connector}.yaml"));
        std::fs::write(&config, text).expect("write connectors.yaml");
        Replica {
            db,
            connector,
            dlq,
            config,
            process: None,
            logs: Vec::new(),
        }
    }

    pub(super) fn start(&mut self) {
        assert!(self.process.is_none(), "a second process for one replica");
        let log = log_dir().join(format!("{}-{}.log", self.connector, self.logs.len()));
        eprintln!("sluice log ({}): {}", self.db.name(), log.display());
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--config"])
            .arg(&self.config)
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start sluice");
        self.process = Some(child);
        self.logs.push(log);
    }

    /// SIGKILL.
    pub(super) fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether its process has exited by itself.
    pub(super) fn exited(&mut self) -> bool {
        match self.process.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(Some(_))),
            None => false,
        }
    }

    /// ` (exited: STATUS)` when the process has exited, else nothing.
    pub(super) fn exit_note(&mut self) -> String {
        match self.process.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => format!(" (its process exited: {status})"),
            _ => String::new(),
        }
    }

    /// The last `lines` lines of its current log.
    pub(super) fn log_tail(&self, lines: usize) -> String {
        let Some(path) = self.logs.last() else {
            return String::new();
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        format!(
            "--- last lines of {}\n{}",
            path.display(),
            all[all.len().saturating_sub(lines)..].join("\n")
        )
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}
