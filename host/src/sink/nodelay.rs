//! Nagle's algorithm off on the sink's database connections.
//!
//! sqlx 0.9.0 opens its TCP connections without `TCP_NODELAY` (sqlx issue 4335: earlier
//! versions set it, 0.9.0 lost it, the fix is merged but not released). With Nagle on, a
//! write that ends in a small segment while the one before is unacknowledged waits for
//! the server's delayed ACK: about 40 ms on Linux. A batch's `COPY` (its data, then
//! `CopyDone`) or a large `UNNEST` bind hits that once per batch, and a task that writes
//! 5,000 rows in 6 ms spent 46 ms waiting: measured, 98k rows/s over TCP against 233k over
//! PostgreSQL's Unix socket, same run (docs/performance.md).
//!
//! sqlx gives no access to its socket, so each new connection (the pool's
//! `after_connect`) sets the option on the process's TCP sockets whose peer is the
//! database server, found in `/proc/self/fd`. Setting it twice, or on another connection
//! of the same pool, is harmless. Elsewhere than Linux this does nothing. Remove it once
//! sqlx sets the option itself.

use std::net::SocketAddr;

/// The addresses a pool's connections go to: none over a Unix socket (which has no Nagle
/// to turn off), else those `host:port` resolves to.
pub(super) async fn tcp_peers(unix_socket: bool, host: &str, port: u16) -> Vec<SocketAddr> {
    if unix_socket {
        return Vec::new();
    }
    server_addresses(host, port).await
}

/// The addresses `host:port` resolves to.
async fn server_addresses(host: &str, port: u16) -> Vec<SocketAddr> {
    let host = host.trim_matches(['[', ']']);
    match tokio::net::lookup_host((host, port)).await {
        Ok(found) => found.collect(),
        Err(error) => {
            tracing::debug!(host, port, %error, "cannot resolve the database host: Nagle's algorithm stays on");
            Vec::new()
        }
    }
}

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to one of `peers`;
/// returns how many it changed.
#[cfg(target_os = "linux")]
pub(super) fn set_on_connections_to(peers: &[SocketAddr]) -> usize {
    use std::os::fd::{BorrowedFd, RawFd};

    if peers.is_empty() {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut changed = 0;
    for entry in entries.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<RawFd>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // SAFETY: the descriptor is only borrowed for the calls below. If it was closed
        // since it was listed, they fail (EBADF); if its number was reused meanwhile, they
        // fail on anything but a socket, and a socket to the same server is one of ours.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        let Some(peer) = socket.peer_addr().ok().and_then(|a| a.as_socket()) else {
            continue;
        };
        if peers.contains(&peer)
            && socket.tcp_nodelay().ok() == Some(false)
            && socket.set_tcp_nodelay(true).is_ok()
        {
            changed += 1;
        }
    }
    changed
}

#[cfg(not(target_os = "linux"))]
pub(super) fn set_on_connections_to(_peers: &[SocketAddr]) -> usize {
    0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn connections_to_the_server_get_nodelay_and_others_do_not() {
        let server = TcpListener::bind("127.0.0.1:0").expect("listen");
        let other = TcpListener::bind("127.0.0.1:0").expect("listen");
        let to_server = TcpStream::connect(server.local_addr().expect("addr")).expect("connect");
        let to_other = TcpStream::connect(other.local_addr().expect("addr")).expect("connect");
        assert!(!to_server.nodelay().expect("nodelay"));
        let changed = set_on_connections_to(&[server.local_addr().expect("addr")]);
        assert_eq!(changed, 1);
        assert!(to_server.nodelay().expect("nodelay"));
        assert!(!to_other.nodelay().expect("nodelay"));
        // Once set, nothing more to change.
        assert_eq!(
            set_on_connections_to(&[server.local_addr().expect("addr")]),
            0
        );
    }

    #[tokio::test]
    async fn a_host_name_resolves_to_its_addresses() {
        let found = server_addresses("localhost", 5432).await;
        assert!(
            found
                .iter()
                .any(|a| a.ip().is_loopback() && a.port() == 5432),
            "{found:?}"
        );
        assert!(
            server_addresses("[::1]", 1)
                .await
                .iter()
                .all(|a| a.port() == 1)
        );
    }
}
