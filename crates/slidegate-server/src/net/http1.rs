//! Serving HTTP/1.1 connections: each accepted within the listener's caps
//! ([`Acceptor`]), its deadlines kept by its [`Conn`], its requests
//! answered by an axum router, and a graceful stop.

use std::future::Future;
use std::io;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

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

async fn wait(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone: stop as well.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Serves `app` on `listener` with the default [`ConnectionLimits`] and
/// shutdown grace; see [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
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
/// returns. Requests carry the peer's address as axum's
/// `ConnectInfo<SocketAddr>`.
pub async fn serve_with(
    listener: TcpListener,
    app: axum::Router,
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
                connections.spawn(serve_connection(conn, app.clone(), wait(stopped.clone())));
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
async fn serve_connection(conn: Conn, app: axum::Router, stop: impl Future<Output = ()>) {
    let peer = conn.peer();
    let clock = conn.clock();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        let guard = clock.request_started();
        request.extensions_mut().insert(ConnectInfo(peer));
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
