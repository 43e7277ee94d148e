//! SQLite's one connection: one writer at a time is all SQLite allows; WAL lets readers
//! (inspect, the demo's checks) go on; FULL sync, so a commit survives power loss.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// How long a writer waits for the connection: longer than on the servers, since it is
/// shared by every writer of the file.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(60);

/// Opens the database file of `url` (made if missing) as a pool of one connection.
pub(in crate::sink) async fn open(url: &str) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(30));
    SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options)
        .await
}
