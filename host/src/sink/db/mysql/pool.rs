//! MySQL's and MariaDB's connections: at READ COMMITTED where the server allows it, with
//! Nagle's algorithm off (`sink/nodelay.rs`).

use std::str::FromStr;

use sqlx::Executor;
use sqlx::MySql;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool};

use crate::config::DatabasesConfig;
use crate::sink::db::{first_connection, server_pool};
use crate::sink::nodelay;

/// Makes a pool for `url` (`mysql://` or `mariadb://`) and its first connection.
pub(in crate::sink) async fn open(
    url: &str,
    settings: &DatabasesConfig,
) -> Result<MySqlPool, sqlx::Error> {
    let url = url.replacen("mariadb://", "mysql://", 1);
    let options = MySqlConnectOptions::from_str(&url)?;
    let peers = nodelay::tcp_peers(
        options.get_socket().is_some(),
        options.get_host(),
        options.get_port(),
    )
    .await;
    Ok(server_pool::<MySql>(settings)
        // REPEATABLE READ's gap locks make writers of neighbouring keys deadlock; the
        // compare-and-set needs no more than READ COMMITTED. A server logging statements
        // (binlog_format=STATEMENT) refuses writes at READ COMMITTED (error 1665): it
        // keeps its default.
        .after_connect(move |conn, _| {
            nodelay::set_on_connections_to(&peers);
            Box::pin(async move {
                let format: Option<String> = sqlx::query_scalar("SELECT @@SESSION.binlog_format")
                    .fetch_optional(&mut *conn)
                    .await
                    .ok()
                    .flatten();
                if format.as_deref() == Some("STATEMENT") {
                    return Ok(());
                }
                conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await
                    .map(|_| ())
            })
        })
        .connect_lazy_with(first_connection(options).await?))
}
