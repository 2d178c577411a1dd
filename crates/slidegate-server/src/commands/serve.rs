//! `slidegate serve`: the one place where the parts are put together:
//! the store, the rules and their reloads, the telemetry, the fronts
//! and their listeners; then serving until a signal, and a graceful stop.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use slidegate::Store;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::parts::Parts;
use crate::api;
use crate::api::envoy::headers::ResponseHeaders;
use crate::api::forward_auth::TrustedProxies;
use crate::bounds::RequestBounds;
use crate::net::grpc;
use crate::net::http1::{self, DEFAULT_SHUTDOWN_GRACE};
use crate::net::limits::Protocol;
use crate::net::streams;
use crate::net::{ConnectionLimits, GrpcLimits};
use crate::rules::xds::XdsOptions;
use crate::rules::{CurrentConfig, LiveConfig, LoadOptions};
use crate::runtime::{Home, RuntimeBounds, RuntimeLimits};
use crate::store::{Backend, StoreOptions};

/// How long the config watcher waits for a burst of file events to settle.
const RELOAD_DEBOUNCE: Duration = Duration::from_millis(200);

/// `--http-addr`'s default.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";

/// `--resp-idle-timeout`'s default: longer than HTTP's, as Redis clients
/// keep pooled connections open between commands.
pub const DEFAULT_RESP_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// `--grpc-addr`'s default.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:8081";

/// What `slidegate serve` is started with (see `slidegate serve --help`).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where spans are exported over OTLP/gRPC, if anywhere.
    pub otlp_endpoint: Option<String>,
    /// Where the HTTP API listens.
    pub http_addr: String,
    /// Where the gRPC services listen.
    pub grpc_addr: String,
    /// Where the Redis protocol port listens, if anywhere.
    pub resp_addr: Option<String>,
    /// The bounds of one RESP command.
    pub resp_frame: crate::api::resp::FrameLimits,
    /// The rule files and directories.
    pub config: Vec<PathBuf>,
    /// Merge a domain split over several files.
    pub merge_domains: bool,
    /// Accept a config with no domain, and reloads that remove domains.
    pub allow_empty_config: bool,
    /// The control plane to take rules from over xDS, if any.
    pub xds: Option<XdsOptions>,
    /// The admin token, given as such.
    pub admin_token: Option<String>,
    /// The file the admin token is read from.
    pub admin_token_file: Option<PathBuf>,
    /// The rate limit header fields of check answers.
    pub response_headers: ResponseHeaders,
    /// The most requests waiting for their turn at once.
    pub max_waiting: usize,
    /// Where the memory store keeps the runtime limits (`None`: memory).
    pub runtime_limits_file: Option<PathBuf>,
    /// How many runtime limits, and how large a write.
    pub runtime_bounds: RuntimeBounds,
    /// The proxies whose forwarding headers forward-auth believes.
    pub trusted_proxies: TrustedProxies,
    /// How much one request may ask.
    pub bounds: RequestBounds,
    /// The store.
    pub store: StoreOptions,
    /// The bounds of the listeners and of a stop.
    pub limits: ServeLimits,
}

impl ServeOptions {
    /// The admin token, given or read from its file (a trailing newline
    /// is ignored). The error never shows the token.
    pub fn admin_token(&self) -> anyhow::Result<Option<String>> {
        let Some(path) = &self.admin_token_file else {
            return Ok(self.admin_token.clone());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the admin token file {}", path.display()))?;
        let token = text.trim_end_matches(['\r', '\n']);
        anyhow::ensure!(
            !token.is_empty(),
            "the admin token file {} is empty",
            path.display()
        );
        Ok(Some(token.to_owned()))
    }
}

/// Runs the service until SIGTERM or Ctrl-C, then returns once the
/// requests in flight are answered (within `--shutdown-grace`), with the
/// instant the grace ends: what the process still sends on its way out
/// (the spans of `--otlp-endpoint`) is bounded by it.
pub async fn run(args: ServeOptions) -> anyhow::Result<std::time::Instant> {
    let metrics = crate::telemetry::metrics::install();
    let upkeep = tokio::spawn(crate::telemetry::metrics::upkeep(metrics.clone()));
    let backend = Backend::connect(&args.store)
        .await
        .context("cannot open the store")?;
    let options = LoadOptions {
        merge_domains: args.merge_domains,
    };
    let live = match (&args.xds, args.config.is_empty()) {
        (None, true) => None,
        (None, false) => Some(
            LiveConfig::open(args.config.clone(), options, args.allow_empty_config)
                .context("cannot load the rules")?,
        ),
        (Some(_), _) => Some(
            LiveConfig::open_for_xds(args.config.clone(), options, args.allow_empty_config)
                .context("cannot load the rules")?,
        ),
    }
    .map(Arc::new);
    let _xds = match (&args.xds, &live) {
        (Some(xds), Some(live)) => {
            tracing::info!(server = %xds.server, node = %xds.node_id, "taking rules from the control plane over xDS");
            Some(AbortOnDrop(tokio::spawn(crate::rules::xds::run(
                xds.clone(),
                Arc::clone(live),
            ))))
        }
        _ => None,
    };
    let _watcher = match &live {
        Some(live) => Some(
            live.watch(RELOAD_DEBOUNCE)
                .context("cannot watch the rule files")?,
        ),
        None => None,
    };
    let admin_token = args.admin_token()?;
    let kind = backend.kind();
    let address = backend.address().to_owned();
    let probe = backend.clone();
    let redis = backend.redis();
    let mut parts = Parts::new(backend)
        .with_admin_token(admin_token)
        .with_bounds(args.bounds)
        .with_response_headers(args.response_headers)
        .with_max_waiting(args.max_waiting)
        .with_trusted_proxies(args.trusted_proxies.clone())
        .with_resp_frame_limits(args.resp_frame)
        .with_metrics(metrics);
    parts
        .telemetry()
        .stats()
        .set_store_probe(move || probe.status());
    let current = match &live {
        Some(live) => live.current(),
        None => CurrentConfig::default(),
    };
    parts = parts.with_config(current.clone());
    let home = match (redis, &args.runtime_limits_file) {
        (Some(_), Some(_)) => anyhow::bail!(
            "--runtime-limits-file is for the memory store: with Redis, the runtime limits live in Redis"
        ),
        (Some(redis), None) => Home::Redis(redis),
        (None, Some(path)) => Home::File(path.clone()),
        (None, None) => Home::Memory,
    };
    let runtime = RuntimeLimits::open(home, current, args.runtime_bounds)
        .await
        .map_err(|e| anyhow::anyhow!("cannot load the runtime limits: {e}"))?;
    let _reader = runtime.spawn_reader(parts.limiter().store());
    parts = parts.with_runtime(runtime);
    let http_listener = TcpListener::bind(&args.http_addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.http_addr))?;
    let grpc_listener = TcpListener::bind(&args.grpc_addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.grpc_addr))?;
    let resp_listener = match &args.resp_addr {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?,
        ),
        None => None,
    };
    let resp_addr = resp_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?
        .map(|addr| addr.to_string());
    tracing::info!(
        http_addr = %http_listener.local_addr()?,
        grpc_addr = %grpc_listener.local_addr()?,
        resp_addr,
        store = kind,
        store_address = %address,
        rules = ?args.config,
        "slidegate is serving"
    );
    let limits = args.limits;
    let (signalled, signal_time) = tokio::sync::oneshot::channel();
    let signal = shutdown_signal();
    let shutdown = async move {
        signal.await;
        let _ = signalled.send(std::time::Instant::now());
    };
    let listeners = Listeners {
        http: http_listener,
        grpc: grpc_listener,
        resp: resp_listener,
    };
    serve_listeners(listeners, parts, limits, shutdown).await?;
    upkeep.abort();
    tracing::info!("slidegate stopped");
    let stopped_at = signal_time
        .await
        .unwrap_or_else(|_| std::time::Instant::now());
    Ok(stopped_at + limits.shutdown_grace)
}

/// A task that ends with its handle: the xDS subscription stops with the
/// server.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The bounds of the listeners and of a stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// The HTTP listener's connections.
    pub http: ConnectionLimits,
    /// The gRPC server.
    pub grpc: GrpcLimits,
    /// The RESP listener's connections (its idle timeout is
    /// `--resp-idle-timeout`, its header timeout bounds a partial command).
    pub resp: ConnectionLimits,
    /// How long a stop waits for the requests in flight before it closes
    /// the connections still open.
    pub shutdown_grace: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            http: ConnectionLimits::default(),
            grpc: GrpcLimits::default(),
            resp: ConnectionLimits {
                idle_timeout: Some(DEFAULT_RESP_IDLE_TIMEOUT),
                ..ConnectionLimits::default()
            },
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// Serves the HTTP API and the gRPC services of `parts` with the default
/// [`ServeLimits`]; see [`serve_both_with`].
pub async fn serve_both<S: Store + 'static>(
    http_listener: TcpListener,
    grpc_listener: TcpListener,
    parts: Parts<S>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_both_with(
        http_listener,
        grpc_listener,
        parts,
        ServeLimits::default(),
        shutdown,
    )
    .await
}

/// Serves the HTTP API and the gRPC services of `parts` until `shutdown`
/// completes (see [`serve_listeners`]), with no RESP port.
pub async fn serve_both_with<S: Store + 'static>(
    http_listener: TcpListener,
    grpc_listener: TcpListener,
    parts: Parts<S>,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listeners = Listeners {
        http: http_listener,
        grpc: grpc_listener,
        resp: None,
    };
    serve_listeners(listeners, parts, limits, shutdown).await
}

/// The sockets `slidegate serve` listens on.
#[derive(Debug)]
pub struct Listeners {
    /// The HTTP API.
    pub http: TcpListener,
    /// The gRPC services.
    pub grpc: TcpListener,
    /// The Redis protocol port, when on (`--resp-addr`).
    pub resp: Option<TcpListener>,
}

/// Serves the HTTP API, the gRPC services and, when given its listener,
/// the RESP port of `parts` until `shutdown` completes; then all stop
/// accepting, answer what is in flight for at most
/// `limits.shutdown_grace`, close what is left, and return. The status
/// page's sampler and the gRPC health prober run meanwhile.
pub async fn serve_listeners<S: Store + 'static>(
    listeners: Listeners,
    parts: Parts<S>,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Listeners {
        http: http_listener,
        grpc: grpc_listener,
        resp: resp_listener,
    } = listeners;
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let store = Arc::clone(parts.limiter().store());
    let _sampler = parts
        .telemetry()
        .spawn_sampler(parts.limiter().config().clone(), Arc::clone(&store));
    let (health, prober) = api::grpc::health_service(store, stopped.clone());
    let (routes, direct) = api::grpc::routes(parts.grpc(), health, limits.grpc.max_message_bytes);
    let grace = limits.shutdown_grace;
    let http = http1::serve_with(
        http_listener,
        api::http::service(parts.http()),
        limits.http,
        grace,
        wait(stopped.clone()),
    );
    let resp_stop = wait(stopped.clone());
    let resp = async {
        let Some(listener) = resp_listener else {
            return Ok(());
        };
        let state = parts.resp();
        streams::serve_with(
            listener,
            Protocol::Resp,
            limits.resp,
            grace,
            resp_stop,
            move |conn, stop| {
                let clock = conn.clock();
                let begun = conn.clock();
                api::resp::serve_connection(
                    conn,
                    state.clone(),
                    move || clock.request_started(),
                    move || begun.request_begun(),
                    stop,
                )
            },
        )
        .await
    };
    let grpc = async {
        // tonic waits for its connections without a bound: past the
        // grace, stop waiting (the process exits, which closes them).
        let serve = grpc::serve(
            grpc_listener,
            routes,
            direct,
            limits.grpc,
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
    let (http, grpc, resp) = tokio::join!(http, grpc, resp);
    let _ = prober.await;
    http.context("the HTTP server failed")?;
    grpc.context("the gRPC server failed")?;
    resp.context("the RESP server failed")?;
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
