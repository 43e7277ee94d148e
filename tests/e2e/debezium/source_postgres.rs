//! A PostgreSQL cluster of the test's own, with logical decoding on, for Debezium to read.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::harness::free_port;

use super::path_str;

/// The database the cluster's connector reads.
pub const DATABASE: &str = "test";

/// The `bin` directory of the newest PostgreSQL installed under `/usr/lib/postgresql`
/// (Debian's layout), `SLUICE_TEST_PG_BIN`, or `pg_config --bindir`.
fn postgres_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("SLUICE_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let output = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("no PostgreSQL under /usr/lib/postgresql and no pg_config: set SLUICE_TEST_PG_BIN");
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// Whether this process runs as root: `initdb` refuses root, so the cluster then runs as
/// the `postgres` user.
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// A PostgreSQL cluster of the test's own, with `wal_level=logical`, in a temporary
/// directory on a free loopback port, trust authentication, superuser `postgres`, and the
/// database [`DATABASE`]. Stopped (`pg_ctl stop -m immediate`) and removed when dropped.
pub struct LogicalPostgres {
    pub port: u16,
    bin: PathBuf,
    /// `runuser -u postgres --` when the test runs as root.
    as_postgres: bool,
    dir: tempfile::TempDir,
    pool: sqlx::PgPool,
}

impl LogicalPostgres {
    /// `initdb`, `pg_ctl start` and `CREATE DATABASE test`: about a second.
    pub async fn start() -> LogicalPostgres {
        let bin = postgres_bin();
        let as_postgres = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("sluice-logical-pg")
            .tempdir()
            .expect("temp dir");
        if as_postgres {
            let uid = user_id("postgres");
            std::os::unix::fs::chown(dir.path(), Some(uid.0), Some(uid.1))
                .expect("chown the cluster's directory to postgres");
        }
        let data = dir.path().join("data");
        let port = free_port();
        let mut cluster = LogicalPostgres {
            port,
            bin,
            as_postgres,
            dir,
            // Replaced below, once the server is up (a lazy pool connects on first use).
            pool: sqlx::PgPool::connect_lazy("postgres://postgres@127.0.0.1:1/postgres")
                .expect("lazy pool"),
        };
        cluster.run_tool(
            "initdb",
            &[
                "-D",
                path_str(&data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c wal_level=logical \
             -c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            path_str(cluster.dir.path())
        );
        let log = cluster.dir.path().join("server.log");
        cluster.run_tool(
            "pg_ctl",
            &[
                "-D",
                path_str(&data),
                "-l",
                path_str(&log),
                "-o",
                &options,
                "-w",
                "-t",
                "30",
                "start",
            ],
        );
        let admin =
            sqlx::PgPool::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
                .await
                .expect("connect to the logical cluster");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
            .execute(&admin)
            .await
            .expect("create database");
        admin.close().await;
        cluster.pool = sqlx::PgPool::connect(&cluster.url())
            .await
            .expect("connect to the logical cluster's database");
        cluster
    }

    /// `postgres://postgres@127.0.0.1:PORT/test`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// Runs `sql` (one statement or several, separated by `;`, in the simple protocol).
    pub async fn execute(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("logical PostgreSQL: {e}\n{sql}"));
    }

    /// A pool on the database, for queries of the test's own.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    /// The server's log, for a failure's message.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A command running PostgreSQL's `tool`, as the `postgres` user when we are root
    /// (initdb and the server refuse root).
    fn command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        }
    }

    fn run_tool(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let output = self
            .command(tool)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        assert!(
            output.status.success(),
            "{tool} failed ({}):\n{}{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.server_log()
        );
    }
}

impl Drop for LogicalPostgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = self
            .command("pg_ctl")
            .args(["-D", path_str(&data), "-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // The TempDir removes the directory after this.
    }
}

/// The uid and gid of `user`, from `id`.
fn user_id(user: &str) -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let output = Command::new("id")
            .args([flag, user])
            .output()
            .unwrap_or_else(|e| panic!("id {flag} {user}: {e}"));
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| {
                panic!("no user {user}: the test runs as root, and initdb needs another user")
            })
    };
    (id("-u"), id("-g"))
}
