//! PostgreSQL's connections: named `sluice` at the server unless the URL names them, with
//! Nagle's algorithm off (`sink/nodelay.rs`).

use std::str::FromStr;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool};

use crate::config::DatabasesConfig;
use crate::sink::db::{first_connection, server_pool};
use crate::sink::nodelay;

/// The name sluice's connections carry at PostgreSQL (`pg_stat_activity.application_name`)
/// unless the URL gives one.
const APPLICATION_NAME: &str = "sluice";

/// Makes a pool for `url` and its first connection.
pub(in crate::sink) async fn open(
    url: &str,
    settings: &DatabasesConfig,
) -> Result<PgPool, sqlx::Error> {
    let mut options = PgConnectOptions::from_str(url)?;
    if options.get_application_name().is_none() {
        options = options.application_name(APPLICATION_NAME);
    }
    let peers = nodelay::tcp_peers(
        options.get_socket().is_some(),
        options.get_host(),
        options.get_port(),
    )
    .await;
    Ok(server_pool::<Postgres>(settings)
        .after_connect(move |_, _| {
            nodelay::set_on_connections_to(&peers);
            Box::pin(async { Ok(()) })
        })
        .connect_lazy_with(first_connection(options).await?))
}
