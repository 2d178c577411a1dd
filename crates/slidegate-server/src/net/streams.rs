//! Serving connections of a protocol spoken over a plain stream (the
//! Redis protocol): each accepted within the listener's caps
//! ([`Acceptor`]), its deadlines kept by its [`Conn`], handed to a
//! handler that knows the protocol, and a graceful stop.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::conn::Conn;
use super::limits::{ConnectionLimits, Protocol};
use super::listen::Acceptor;

/// The future that completes when the server stops: a handler gives up
/// its connection at it once nothing is in flight.
pub type Stop = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Serves `protocol` on `listener` within `limits` until `shutdown`
/// completes: every connection goes to `handler` with a [`Stop`]. Then
/// accepting stops, the handlers get `grace` to finish what is in flight,
/// and the connections still open are closed.
pub async fn serve_with<F, H>(
    listener: TcpListener,
    protocol: Protocol,
    limits: ConnectionLimits,
    grace: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handler: H,
) -> io::Result<()>
where
    H: Fn(Conn, Stop) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let acceptor = Acceptor::new(listener, limits, protocol);
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            conn = acceptor.accept() => {
                let mut stopped = stopped.clone();
                let stop: Stop = Box::pin(async move {
                    // An error means the sender is gone: stop as well.
                    let _ = stopped.wait_for(|stop| *stop).await;
                });
                connections.spawn(handler(conn, stop));
                while connections.try_join_next().is_some() {}
            }
        }
    }
    drop(acceptor);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            listener = protocol.name(),
            ?grace,
            connections = connections.len(),
            "connections still busy after the shutdown grace: closing them"
        );
        connections.shutdown().await;
    }
    Ok(())
}
