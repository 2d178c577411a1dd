//! The gRPC listener: the gRPC routes (Envoy's rate limit service and the
//! standard health service, see [`api::grpc`](crate::api::grpc)), served
//! on each accepted connection (see [`listen`](crate::net::listen) for the
//! caps and deadlines) by a tonic server of its own, so that one
//! connection can be sent away (HTTP/2 GOAWAY) when it has been idle for
//! the idle timeout or reaches its maximum age: tonic has no other way to
//! send one connection away.

use tokio::net::TcpListener;
use tonic::service::Routes;

use super::conn::{Conn, ConnectionClock, GoAway};
use super::grpc_calls::TrackRequests;
use super::grpc_direct::Direct;
use super::limits::{GRPC_MAX_HEADER_LIST_BYTES, GrpcLimits, Protocol as ListenerProtocol};
use super::listen::Acceptor;

/// The gRPC services with the layers of every call.
type Router = tonic::transport::server::Router<
    tower::layer::util::Stack<
        Direct,
        tower::layer::util::Stack<TrackRequests, tower::layer::util::Identity>,
    >,
>;

/// `routes` within `limits`, as every connection serves them, the
/// `direct` method's calls answered ahead of the routes' router (see
/// [`Direct`]).
///
/// Only what a call needs is paid per call. No `max_connection_age`: each
/// connection's own task sends it away at that age (tonic's, with a grace,
/// closes without GOAWAY). No concurrency limit per connection: h2 already
/// refuses a stream past `max_concurrent_streams` (`REFUSED_STREAM`), and
/// counts a stream until its answer is sent, where tonic's limit took a
/// semaphore permit per call to bound the same number again. No HTTP/2
/// keepalive: hyper's locks a mutex and reads the clock on every frame
/// read and every poll of the connection (1,500 instructions a call);
/// dead peers are found by the socket's TCP keepalive instead (see
/// [`Conn`]).
fn router(routes: Routes, direct: Direct, limits: &GrpcLimits) -> Router {
    tonic::transport::Server::builder()
        .timeout(limits.request_timeout)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .http2_max_header_list_size(GRPC_MAX_HEADER_LIST_BYTES)
        .layer(TrackRequests)
        .layer(direct)
        .add_routes(routes)
}

/// Serves `routes` (and `direct` ahead of them) on `listener` within
/// `limits` until `shutdown`
/// completes; then stops accepting, sends every connection GOAWAY, and
/// returns once they have closed.
///
/// Each connection is served by a tonic server of its own, whose shutdown
/// is that connection's GOAWAY: tonic has no other way to send one
/// connection away, and one must go when it has been idle for the idle
/// timeout (or reaches its maximum age), so that idle clients cannot hold
/// the listener's connections.
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    direct: Direct,
    limits: GrpcLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let router = router(routes, direct, &limits);
    let acceptor = Acceptor::new(listener, limits.connections, ListenerProtocol::Grpc);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            conn = acceptor.accept() => {
                let stop = stopped.clone();
                connections.spawn(serve_connection(router.clone(), conn, limits, stop));
                while connections.try_join_next().is_some() {}
            }
        }
    }
    // Closing the listening socket refuses new connections at once.
    drop(acceptor);
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Serves one connection until it closes: sent away (GOAWAY) when the
/// server stops, when it has been idle for the idle timeout, or at its
/// maximum age; in the last two cases it must close within the request
/// timeout (its calls in flight have that long), or its socket fails.
/// Returns once the connection is gone, however it went: its tonic server
/// would otherwise wait for a shutdown that nothing brings.
async fn serve_connection(
    router: Router,
    conn: Conn,
    limits: GrpcLimits,
    stopped: tokio::sync::watch::Receiver<bool>,
) {
    let peer = conn.peer();
    // Why the connection must go is watched by a task of its own: tonic
    // polls the shutdown future it is given each time the connection's
    // task wakes, several times a call, where a one-shot receiver costs a
    // load. The watcher ends at the latest when the socket goes, which
    // dropping this future brings too.
    let (go, go_away) = tokio::sync::oneshot::channel();
    tokio::spawn(watch_go_away(conn.clock(), limits, stopped, go));
    // The one connection, then nothing: the server runs until `go_away`.
    let incoming = futures_util::StreamExt::chain(
        futures_util::stream::iter([Ok::<_, std::io::Error>(conn)]),
        futures_util::stream::pending(),
    );
    let go_away = async move {
        // A dropped sender (the watcher is gone) is a reason to stop too.
        let _ = go_away.await;
    };
    if let Err(error) = router.serve_with_incoming_shutdown(incoming, go_away).await {
        tracing::debug!(%peer, %error, "gRPC connection closed");
    }
}

/// Tells `go` once the connection must go: the server stops, the socket is
/// gone, it has been idle for the idle timeout or reached its maximum age
/// (the last two sent GOAWAY: it must then close within the request
/// timeout).
async fn watch_go_away(
    clock: std::sync::Arc<ConnectionClock>,
    limits: GrpcLimits,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    go: tokio::sync::oneshot::Sender<()>,
) {
    let why = tokio::select! {
        _ = stopped.wait_for(|stop| *stop) => None,
        () = clock.closed() => None,
        () = clock.idle_expired() => Some(GoAway::Idle),
        () = tokio::time::sleep(limits.max_connection_age) => Some(GoAway::Age),
    };
    if let Some(why) = why {
        clock.going_away(why, limits.request_timeout);
    }
    // The server may have ended already (the connection failed).
    let _ = go.send(());
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::net::limits::ConnectionLimits;

    /// The `grpc-status` of a call to a method that never answers, sent
    /// with `grpc_timeout` (if any) to a connection served within
    /// `limits`, and how long it took to be answered.
    async fn never_answered(limits: GrpcLimits, grpc_timeout: Option<&str>) -> (String, Duration) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = Acceptor::new(listener, limits.connections, ListenerProtocol::Grpc);
        let direct = Direct::new(
            "/pkg.Service/Never",
            std::sync::Arc::new(|_| Box::pin(std::future::pending())),
        );
        let router = router(Routes::default(), direct, &limits);
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let conn = acceptor.accept().await;
        tokio::spawn(serve_connection(router, conn, limits, stopped));
        let (client, connection) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(connection);
        let mut client = client.ready().await.unwrap();
        let mut call = http::Request::post(format!("http://{addr}/pkg.Service/Never"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(timeout) = grpc_timeout {
            call = call.header("grpc-timeout", timeout);
        }
        let start = std::time::Instant::now();
        let (answer, _body) = client.send_request(call.body(()).unwrap(), true).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(20), answer)
            .await
            .expect("the call is never answered")
            .unwrap();
        let status = answer.headers()["grpc-status"].to_str().unwrap().to_owned();
        (status, start.elapsed())
    }

    /// A call that waits is answered CANCELLED at the request timeout, or
    /// at the client's `grpc-timeout` when that is shorter.
    #[tokio::test]
    async fn a_waiting_call_ends_at_its_deadline() {
        let cancelled = (tonic::Code::Cancelled as i32).to_string();
        let deadline = Duration::from_millis(300);
        // Generous above: the property is the end, not its promptness.
        let late = deadline + Duration::from_secs(5);
        let server_timeout = GrpcLimits {
            request_timeout: deadline,
            ..GrpcLimits::default()
        };
        let (status, took) = never_answered(server_timeout, None).await;
        assert_eq!(status, cancelled);
        assert!(took >= deadline && took < late, "ended after {took:?}");
        let (status, took) = never_answered(GrpcLimits::default(), Some("300m")).await;
        assert_eq!(status, cancelled);
        assert!(took >= deadline && took < late, "ended after {took:?}");
    }

    /// A connection that goes before its first call (a port scan, a client
    /// that gives up) ends its task at once, not at its maximum age: the
    /// task of each such connection would otherwise stay 30 minutes.
    #[tokio::test]
    async fn a_connection_that_goes_ends_its_task() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = GrpcLimits::default();
        let acceptor = Acceptor::new(
            listener,
            ConnectionLimits {
                header_timeout: Duration::from_secs(600),
                ..limits.connections
            },
            ListenerProtocol::Grpc,
        );
        let direct = Direct::new(
            "/none",
            std::sync::Arc::new(|_| {
                Box::pin(std::future::ready(Ok(http::Response::new(
                    tonic::body::Body::default(),
                ))))
            }),
        );
        let router = router(Routes::default(), direct, &limits);
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let conn = acceptor.accept().await;
        let task = tokio::spawn(serve_connection(router, conn, limits, stopped));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!task.is_finished(), "the connection is served while open");
        drop(client);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the task of a closed connection still runs")
            .unwrap();
    }
}
