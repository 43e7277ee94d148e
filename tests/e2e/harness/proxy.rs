//! A TCP proxy on a loopback port in front of a database or a broker, for outages on demand.
//!
//! [`Proxy::down`] resets every live connection (both sides see a reset, not a clean end)
//! and closes the listening socket, so new connections are refused, as when a server process
//! is gone. [`Proxy::up`] listens again on the same port. The proxy runs on its own runtime:
//! whatever the test does on its own threads, the proxied traffic keeps flowing.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How long `down` and `up` wait for the sockets to follow before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

pub struct Proxy {
    port: u16,
    upstream: String,
    runtime: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
    /// The accept loop: ended by `down`.
    listener: Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct Shared {
    up: AtomicBool,
    /// Bumped by `down`: connections and the accept loop end when it changes.
    generation: watch::Sender<u64>,
    /// Connections open now (accepted, not yet closed).
    live: AtomicUsize,
    /// Connections accepted since the start.
    accepted: AtomicU64,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`
    /// (`host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("proxy")
            .enable_all()
            .build()
            .expect("proxy runtime");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        let (generation, _) = watch::channel(0);
        let proxy = Proxy {
            port,
            upstream: upstream.to_string(),
            runtime: Some(runtime),
            shared: Arc::new(Shared {
                up: AtomicBool::new(true),
                generation,
                live: AtomicUsize::new(0),
                accepted: AtomicU64::new(0),
            }),
            listener: Mutex::new(None),
        };
        proxy.serve(listener);
        proxy
    }

    /// The port clients connect to; it stays the same across `down` and `up`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Connections accepted since the start.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Resets every live connection and stops listening. Returns once the port refuses
    /// connections and no proxied connection is left.
    pub fn down(&self) {
        self.shared.up.store(false, Ordering::SeqCst);
        self.shared.generation.send_modify(|g| *g += 1);
        let accept_loop = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(accept_loop) = accept_loop {
            accept_loop.join().expect("proxy accept loop");
        }
        let deadline = Instant::now() + SETTLE;
        while self.live() > 0 {
            assert!(
                Instant::now() < deadline,
                "proxy: {} connections still open {SETTLE:?} after down()",
                self.live()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Listens again on the same port.
    pub fn up(&self) {
        if self.shared.up.load(Ordering::SeqCst) {
            return;
        }
        // The port is ours until another socket takes it; SO_REUSEADDR (std sets it on Unix)
        // lets the bind pass the reset connections' leftovers. Retry a little in case
        // something else bound the port meanwhile and lets it go.
        let deadline = Instant::now() + SETTLE;
        let listener = loop {
            match std::net::TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(listener) => break listener,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("proxy: rebinding port {}: {e}; retrying", self.port);
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("proxy: cannot listen on port {} again: {e}", self.port),
            }
        };
        self.shared.up.store(true, Ordering::SeqCst);
        self.serve(listener);
    }

    /// Runs the accept loop for `listener` until the next `down`.
    fn serve(&self, listener: std::net::TcpListener) {
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let handle = self
            .runtime
            .as_ref()
            .expect("proxy runtime")
            .handle()
            .clone();
        let shared = self.shared.clone();
        let upstream = self.upstream.clone();
        let mut ended = shared.generation.subscribe();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        // A thread that blocks on the accept loop's task: `down` joins it, which proves the
        // listening socket is closed when `down` returns.
        let thread = std::thread::spawn(move || {
            handle.clone().block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                let _ = started_tx.send(());
                loop {
                    tokio::select! {
                        _ = ended.changed() => break,
                        accepted = listener.accept() => match accepted {
                            Ok((inbound, _)) => {
                                shared.accepted.fetch_add(1, Ordering::SeqCst);
                                shared.live.fetch_add(1, Ordering::SeqCst);
                                let kill = shared.generation.subscribe();
                                handle.spawn(forward(inbound, upstream.clone(), kill, shared.clone()));
                            }
                            // Out of descriptors, a connection reset before accept: keep going.
                            Err(e) => {
                                eprintln!("proxy: accept: {e}");
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        },
                    }
                }
                // The listener drops here: the port refuses connections from now on.
            })
        });
        started_rx
            .recv_timeout(SETTLE)
            .expect("proxy accept loop started");
        *self.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread);
    }
}

/// Decrements the live count when a connection ends, however it ends.
struct Live(Arc<Shared>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Copies both ways between the client and a new upstream connection until either side
/// closes or the proxy goes down; then resets both.
async fn forward(
    mut inbound: TcpStream,
    upstream: String,
    mut kill: watch::Receiver<u64>,
    shared: Arc<Shared>,
) {
    let _live = Live(shared.clone());
    // `down` flips the flag before bumping the generation; a connection accepted in between
    // subscribed after the bump, so it checks the flag.
    if !shared.up.load(Ordering::SeqCst) {
        reset(&inbound);
        return;
    }
    let mut outbound = tokio::select! {
        _ = kill.changed() => {
            reset(&inbound);
            return;
        }
        connected = TcpStream::connect(&upstream) => match connected {
            Ok(outbound) => outbound,
            // The upstream is gone too: the client sees its connection reset.
            Err(_) => {
                reset(&inbound);
                return;
            }
        },
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    tokio::select! {
        // Errors here are the clients' or the upstream's resets: the connection just ends.
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = kill.changed() => {
            reset(&inbound);
            reset(&outbound);
        }
    }
}

/// Makes the coming close a reset (RST) instead of an orderly end (FIN).
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.up.store(false, Ordering::SeqCst);
        self.shared.generation.send_modify(|g| *g += 1);
        if let Some(thread) = self
            .listener
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = thread.join();
        }
        // Dropping a runtime inside a test's async context is refused; this one is not.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// `host:port` of a database URL (`scheme://[user[:password]@]host[:port][/db]`), with the
/// scheme's default port when none is given.
pub fn url_authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.contains(':') {
        host_port.to_string()
    } else if url.starts_with("mysql") || url.starts_with("mariadb") {
        format!("{host_port}:3306")
    } else {
        format!("{host_port}:5432")
    }
}

/// The same URL with its host and port replaced by `addr`.
pub fn url_through(url: &str, addr: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let user = authority
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    format!("{scheme}://{user}{addr}{tail}")
}
