//! Serving HTTP/1.1 connections: each accepted within the listener's caps
//! ([`Acceptor`]), its deadlines kept by its [`Conn`], its requests
//! answered by an axum router, and a graceful stop. A handler finds the
//! peer's address with [`peer`].

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::{Service, ServiceExt};

use super::conn::Conn;
use super::limits::{ConnectionLimits, Protocol};
use super::listen::Acceptor;

/// How long a stop waits for the requests in flight by default
/// (`--shutdown-grace`).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The largest buffer an HTTP/1 connection keeps: a request head must fit
/// in it (a larger one gets 431), and it bounds each idle connection's
/// memory. hyper's default is about 400 KiB.
const HTTP_MAX_BUFFER_BYTES: usize = 64 * 1024;

tokio::task_local! {
    /// The peer of the connection whose task runs: set once per
    /// connection, where axum's `ConnectInfo` is an extension inserted
    /// into every request (a map allocated per request).
    static PEER: SocketAddr;
}

/// The peer's address of the HTTP/1.1 request being answered, when it was
/// accepted by [`serve_with`] (a handler runs in its connection's task);
/// `None` elsewhere, as under another server, which may attach axum's
/// `ConnectInfo` instead.
pub fn peer() -> Option<SocketAddr> {
    PEER.try_with(|peer| *peer).ok()
}

/// What answers the requests: an axum router, or a service in front of
/// one; a clone serves each request.
pub trait App:
    Service<
        hyper::Request<Incoming>,
        Response = axum::response::Response,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<A> App for A where
    A: Service<
            hyper::Request<Incoming>,
            Response = axum::response::Response,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

async fn wait(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone: stop as well.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Serves `app` on `listener` with the default [`ConnectionLimits`] and
/// shutdown grace; see [`serve_with`].
pub async fn serve<A: App>(
    listener: TcpListener,
    app: A,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(
        listener,
        app,
        ConnectionLimits::default(),
        DEFAULT_SHUTDOWN_GRACE,
        shutdown,
    )
    .await
}

/// Serves `app` over HTTP/1.1 on `listener` within `limits` until
/// `shutdown` completes; then stops accepting, lets the requests in flight
/// finish for at most `grace`, closes the connections still open, and
/// returns. The handlers find the peer's address with [`peer`].
pub async fn serve_with<A: App>(
    listener: TcpListener,
    app: A,
    limits: ConnectionLimits,
    grace: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let acceptor = Acceptor::new(listener, limits, Protocol::Http1);
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            conn = acceptor.accept() => {
                let peer = conn.peer();
                let connection = serve_connection(conn, app.clone(), wait(stopped.clone()));
                connections.spawn(PEER.scope(peer, connection));
                while connections.try_join_next().is_some() {}
            }
        }
    }
    // Closing the listening socket refuses new connections at once.
    drop(acceptor);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            ?grace,
            connections = connections.len(),
            "HTTP connections still busy after the shutdown grace: closing them"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Serves one HTTP/1.1 connection until it closes, or until `stop`
/// completes and its request in flight (if any) is answered.
async fn serve_connection<A: App>(conn: Conn, app: A, stop: impl Future<Output = ()>) {
    let peer = conn.peer();
    let clock = conn.clock();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = clock.request_started();
        let answer = app.clone().oneshot(request);
        async move {
            let answer = answer.await;
            drop(guard);
            answer
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.max_buf_size(HTTP_MAX_BUFFER_BYTES);
    let connection = builder.serve_connection(TokioIo::new(conn), service);
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = stop => {
            // Closes an idle connection now, a busy one after its answer.
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%peer, %error, "HTTP connection closed");
    }
}
