//! Serving the admin API's connections, bounded so that the network it is on cannot
//! exhaust the process: HTTP/1.1 through hyper with a timer (without one hyper keeps no
//! time at all, and a client that never finishes its headers holds its connection
//! forever), over TLS when `admin.tls` asks for it.
//!
//! - [`HEADER_READ_TIMEOUT`]: a request's headers (and, over TLS, the handshake) must
//!   arrive within 10 s of the connection's first byte or of the previous answer;
//! - [`IDLE_TIMEOUT`]: a connection that moves no byte for 60 s while no request is being
//!   answered is closed, and a request body that sends no byte for 60 s fails;
//! - [`MAX_CONNECTIONS`]: at most 256 connections are served at once; more wait in the
//!   listen backlog until one closes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot, watch};
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

/// Longest wait for a request's headers (and the TLS handshake).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no byte moved this long, and no request in progress, is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a stop waits for the requests in progress before it closes their connections.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a connection's watcher sees: when a byte last moved, and how many requests are
/// being answered.
struct Activity {
    since: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            since: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.since.elapsed().saturating_sub(last)
    }
}

/// A request being answered, for as long as it lives.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A stream that records when bytes move.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that fails when no byte of it arrives for [`IDLE_TIMEOUT`]: while a
/// handler waits for it the request is in progress, so the connection's own idle check
/// does not apply.
struct IdleBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl IdleBody {
    fn new(inner: Incoming) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(IDLE_TIMEOUT)),
        }
    }
}

impl hyper::body::Body for IdleBody {
    type Data = hyper::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.deadline
                    .as_mut()
                    .reset(tokio::time::Instant::now() + IDLE_TIMEOUT);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                    "no byte of the request body arrived within {IDLE_TIMEOUT:?}"
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// How a stop reaches the connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    No,
    /// Finish the request in progress, then close.
    Gracefully,
    /// Close now.
    Now,
}

/// Serves `app` on `listener` until `stop`: then the listener closes at once (its address
/// is free for a new server), the requests in progress get [`STOP_GRACE`] to finish.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    mut stop: oneshot::Receiver<()>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let (stopping, watch_stop) = watch::channel(Stopping::No);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = &mut stop => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    // Out of file descriptors, a connection reset before it was taken:
                    // the listener stays; a pause keeps an exhausted process from spinning.
                    tracing::warn!(%error, "admin API: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let (app, tls, watch_stop) = (app.clone(), tls.clone(), watch_stop.clone());
        tokio::spawn(async move {
            connection(stream, app, tls, watch_stop).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = stopping.send(Stopping::Gracefully);
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    if tokio::time::timeout(STOP_GRACE, permits.acquire_many(all))
        .await
        .is_err()
    {
        let _ = stopping.send(Stopping::Now);
    }
}

async fn connection(
    stream: TcpStream,
    app: Router,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<Stopping>,
) {
    let activity = Activity::new();
    let stream = Watched {
        inner: stream,
        activity: activity.clone(),
    };
    match tls {
        None => http(stream, app, activity, stop).await,
        Some(acceptor) => {
            match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => http(stream, app, activity, stop).await,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "admin API: TLS handshake failed");
                }
                Err(_) => tracing::debug!("admin API: TLS handshake timed out"),
            }
        }
    }
}

async fn http<S>(
    stream: S,
    app: Router,
    activity: Arc<Activity>,
    mut stop: watch::Receiver<Stopping>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut app = app.clone();
        let in_flight = InFlight::new(&requests);
        async move {
            let request = request.map(|body| axum::body::Body::new(IdleBody::new(body)));
            let response = app.call(request).await;
            drop(in_flight);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut closing = false;
    let check = Duration::from_secs(1);
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(error) = served {
                    tracing::debug!(%error, "admin API: connection ended");
                }
                return;
            }
            () = tokio::time::sleep(check), if !closing => {
                if activity.in_flight.load(Ordering::Relaxed) == 0
                    && activity.idle_for() >= IDLE_TIMEOUT
                {
                    tracing::debug!("admin API: closing an idle connection");
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
            changed = stop.changed() => {
                match (changed, *stop.borrow_and_update()) {
                    (Err(_), _) | (_, Stopping::Now) => return,
                    (_, Stopping::Gracefully) if !closing => {
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    _ => {}
                }
            }
        }
    }
}
