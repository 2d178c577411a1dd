//! `slidegate serve`: bind, serve HTTP and gRPC, reload the rules, stop
//! gracefully.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use slidegate::Store;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::backend::Backend;
use crate::cli::ServeArgs;
use crate::config::{LiveConfig, LoadOptions};
use crate::grpc;
use crate::http::{self, AppState};

/// How long the config watcher waits for a burst of file events to settle.
const RELOAD_DEBOUNCE: Duration = Duration::from_millis(200);

/// Runs the service until SIGTERM or Ctrl-C, then returns once the
/// requests in flight are answered.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let metrics = crate::metrics::install();
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
            LiveConfig::load(args.config.clone(), options).context("cannot load the rules")?,
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
    let mut state = AppState::new(backend.clone())
        .with_admin_token(admin_token)
        .with_bounds((&args.bounds).into())
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
    serve_both(http_listener, grpc_listener, state, shutdown_signal()).await?;
    tracing::info!("slidegate stopped");
    Ok(())
}

/// Serves the HTTP API and the gRPC services until `shutdown` completes;
/// then both stop accepting, answer what is in flight, and return.
pub async fn serve_both<S: Store + Clone + 'static>(
    http_listener: TcpListener,
    grpc_listener: TcpListener,
    state: AppState<S>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let store = (**state.store()).clone();
    let config = Arc::clone(state.config());
    let bounds = *state.bounds();
    let http = serve(http_listener, http::router(state), wait(stopped.clone()));
    let grpc = grpc::serve(grpc_listener, config, store, bounds, wait(stopped));
    let (http, grpc) = tokio::join!(http, grpc);
    http.context("the HTTP server failed")?;
    grpc.context("the gRPC server failed")?;
    Ok(())
}

async fn wait(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone: stop as well.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Serves `app` on `listener` until `shutdown` completes; then stops
/// accepting, lets the requests in flight finish, and returns.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C: finishing the requests in flight"),
        () = terminate => tracing::info!("SIGTERM: finishing the requests in flight"),
    }
}
