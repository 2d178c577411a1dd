//! `slidegate serve`: bind, serve, stop gracefully.

use std::future::Future;
use std::io;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::backend::Backend;
use crate::cli::ServeArgs;
use crate::http::{self, AppState};

/// Runs the service until SIGTERM or Ctrl-C, then returns once the
/// requests in flight are answered.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let backend = Backend::connect(&args.store.url)
        .await
        .context("cannot open the store")?;
    let listener = TcpListener::bind(&args.http_addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.http_addr))?;
    let addr = listener.local_addr()?;
    tracing::info!(http_addr = %addr, store = backend.kind(), "slidegate is serving");
    serve(
        listener,
        http::router(AppState::new(backend)),
        shutdown_signal(),
    )
    .await
    .context("the HTTP server failed")?;
    tracing::info!("slidegate stopped");
    Ok(())
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
