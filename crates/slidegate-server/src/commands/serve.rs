//! `slidegate serve`: bind, serve HTTP and gRPC, reload the rules, stop
//! gracefully.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use slidegate::Store;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::api::http::{self, AppState};
use crate::cli::ServeArgs;
use crate::net::grpc;
use crate::net::listen::{Acceptor, Conn, ConnectionLimits, GrpcLimits, Protocol};
use crate::rules::{LiveConfig, LoadOptions};
use crate::store::backend::Backend;

/// How long the config watcher waits for a burst of file events to settle.
const RELOAD_DEBOUNCE: Duration = Duration::from_millis(200);

/// Runs the service until SIGTERM or Ctrl-C, then returns once the
/// requests in flight are answered (within `--shutdown-grace`), with the
/// instant the grace ends: what the process still sends on its way out
/// (the spans of `--otlp-endpoint`) is bounded by it.
pub async fn run(args: ServeArgs) -> anyhow::Result<std::time::Instant> {
    let metrics = crate::telemetry::metrics::install();
    let upkeep = tokio::spawn(crate::telemetry::metrics::upkeep(metrics.clone()));
    let backend = Backend::connect(&args.store)
        .await
        .context("cannot open the store")?;
    let live = if args.config.is_empty() {
        None
    } else {
        let options = LoadOptions {
            merge_domains: args.merge_domains,
        };
        Some(Arc::new(
            LiveConfig::open(args.config.clone(), options, args.allow_empty_config)
                .context("cannot load the rules")?,
        ))
    };
    let _watcher = match &live {
        Some(live) => Some(
            live.watch(RELOAD_DEBOUNCE)
                .context("cannot watch the rule files")?,
        ),
        None => None,
    };
    let admin_token = args.admin_token()?;
    let probe = backend.clone();
    crate::telemetry::stats::global().set_store_probe(move || probe.status());
    let mut state = AppState::new(backend.clone())
        .with_admin_token(admin_token)
        .with_bounds((&args.bounds).into())
        .with_response_headers(args.response_headers)
        .with_max_waiting(args.max_waiting)
        .with_metrics(metrics);
    if let Some(live) = &live {
        state = state.with_config(live.current());
    }
    let http_listener = TcpListener::bind(&args.http_addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.http_addr))?;
    let grpc_listener = TcpListener::bind(&args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.grpc_addr))?;
    tracing::info!(
        http_addr = %http_listener.local_addr()?,
        grpc_addr = %grpc_listener.local_addr()?,
        store = backend.kind(),
        rules = ?args.config,
        "slidegate is serving"
    );
    let limits = args.connections.limits();
    let (signalled, signal_time) = tokio::sync::oneshot::channel();
    let signal = shutdown_signal();
    let shutdown = async move {
        signal.await;
        let _ = signalled.send(std::time::Instant::now());
    };
    serve_both_with(http_listener, grpc_listener, state, limits, shutdown).await?;
    upkeep.abort();
    tracing::info!("slidegate stopped");
    let stopped_at = signal_time
        .await
        .unwrap_or_else(|_| std::time::Instant::now());
    Ok(stopped_at + limits.shutdown_grace)
}

/// How long a stop waits for the requests in flight by default
/// (`--shutdown-grace`).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The largest buffer an HTTP/1 connection keeps: a request head must fit
/// in it (a larger one gets 431), and it bounds each idle connection's
/// memory. hyper's default is about 400 KiB.
const HTTP_MAX_BUFFER_BYTES: usize = 64 * 1024;

/// The bounds of both listeners and of a stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// The HTTP listener's connections.
    pub http: ConnectionLimits,
    /// The gRPC server.
    pub grpc: GrpcLimits,
    /// How long a stop waits for the requests in flight before it closes
    /// the connections still open.
    pub shutdown_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            http: ConnectionLimits::default(),
            grpc: GrpcLimits::default(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// Serves the HTTP API and the gRPC services with the default
/// [`ServeLimits`]; see [`serve_both_with`].
pub async fn serve_both<S: Store + Clone + 'static>(
    http_listener: TcpListener,
    grpc_listener: TcpListener,
    state: AppState<S>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_both_with(
        http_listener,
        grpc_listener,
        state,
        ServeLimits::default(),
        shutdown,
    )
    .await
}

/// Serves the HTTP API and the gRPC services until `shutdown` completes;
/// then both stop accepting, answer what is in flight for at most
/// `limits.shutdown_grace`, close what is left, and return.
pub async fn serve_both_with<S: Store + Clone + 'static>(
    http_listener: TcpListener,
    grpc_listener: TcpListener,
    state: AppState<S>,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let store = (**state.store()).clone();
    let config = Arc::clone(state.config());
    let _sampler = crate::telemetry::stats::spawn_sampler(
        crate::telemetry::stats::global(),
        Arc::clone(&config),
        store.clone(),
    );
    let bounds = *state.bounds();
    let response_headers = state.response_headers();
    let grace = limits.shutdown_grace;
    let http = serve_with(
        http_listener,
        http::router(state),
        limits.http,
        grace,
        wait(stopped.clone()),
    );
    let grpc = async {
        // tonic waits for its connections without a bound: past the
        // grace, stop waiting (the process exits, which closes them).
        let serve = grpc::serve(
            grpc_listener,
            config,
            store,
            limits.grpc,
            bounds,
            response_headers,
            wait(stopped.clone()),
        );
        tokio::select! {
            result = serve => result,
            () = after_grace(wait(stopped), grace) => {
                tracing::warn!(?grace, "gRPC calls still in flight after the shutdown grace: closing their connections");
                Ok(())
            }
        }
    };
    let (http, grpc) = tokio::join!(http, grpc);
    http.context("the HTTP server failed")?;
    grpc.context("the gRPC server failed")?;
    Ok(())
}

async fn wait(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone: stop as well.
    let _ = stopped.wait_for(|stop| *stop).await;
}

async fn after_grace(stop: impl Future<Output = ()>, grace: Duration) {
    stop.await;
    tokio::time::sleep(grace).await;
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

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
///
/// The handlers are installed by this call, not when the future is first
/// polled: a signal that comes once the server answers, but before the
/// serving loop polls this future, must stop the server gracefully, not
/// kill it with the signal's default action.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let listen = |kind: SignalKind, name: &'static str| -> Option<Signal> {
            signal(kind)
                .inspect_err(|error| tracing::error!(%error, "cannot listen for {name}"))
                .ok()
        };
        let interrupt = listen(SignalKind::interrupt(), "Ctrl-C");
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        async move {
            let wait = |signal: Option<Signal>| async move {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(interrupt) => tracing::info!("Ctrl-C: finishing the requests in flight"),
                () = wait(terminate) => tracing::info!("SIGTERM: finishing the requests in flight"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
        tracing::info!("Ctrl-C: finishing the requests in flight");
    }
}
