//! Limitador's library (`limitador` 0.14.0) behind an Envoy RLS v3 server
//! written for `scripts/bench-limitador.sh`, answering `ShouldRateLimit` as
//! limitador-server does: the domain is the namespace, the descriptors are
//! bound as `descriptors` (a list of maps) in the CEL context, the call is
//! one `check_rate_limited_and_update` with `hits_addend` (0 read as 1), a
//! storage error is UNAVAILABLE and an empty domain is UNKNOWN.
//!
//! One rule, the one `scripts/bench-server.sh` gives slidegate: every value
//! of descriptor key `key` in domain `bench` has its own `--max` per
//! `--seconds` (Limitador's per-value counters: the limit's variable
//! `descriptors[0].key`).
//!
//! What differs from limitador-server: no Prometheus counters, no tracing
//! spans, no HTTP API, no limits file (the costs of the library and of
//! tonic only); and each answer carries one status per counter that
//! applied, where limitador-server leaves `statuses` empty, because the
//! load client reads an OK answer without a limit as "no rule applied".

use std::collections::HashMap;
use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use limitador::counter::Counter;
use limitador::limit::{Context, Expression, Limit};
use limitador::storage::AsyncStorage;
use limitador::storage::redis::AsyncRedisStorage;
use limitador::{AsyncRateLimiter, AsyncRateLimiterBuilder, RateLimiter, RateLimiterBuilder};
use tonic::transport::Server;
use tonic::{Request, Response, Status};

/// The domain the rule is in, as in `scripts/bench-server.sh`.
const DOMAIN: &str = "bench";
/// The rule's per-value counter: the value of entry `key` of the first
/// descriptor (the load client sends one descriptor, one entry).
const VARIABLE: &str = "descriptors[0].key";

/// The command line.
#[derive(Parser)]
#[command(about = "Limitador's library behind an Envoy RLS v3 server, for benchmarks")]
struct Args {
    /// The address gRPC is answered on.
    #[arg(long, default_value = "127.0.0.1:8081")]
    addr: SocketAddr,
    /// Keep the counters in this Redis (`redis://HOST:PORT`) through
    /// `AsyncRedisStorage`, limitador-server's `redis` storage (not
    /// `redis_cached`); in memory when not given.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Calls each value of `key` may make per window.
    #[arg(long, default_value_t = 100)]
    max: u64,
    /// The window, in seconds.
    #[arg(long, default_value_t = 1)]
    seconds: u64,
    /// Counters the in-memory storage holds at most (limitador-server's
    /// `memory CACHE_SIZE`; it guesses one from free memory when not given).
    #[arg(long, default_value_t = 1_000_000)]
    cache_size: u64,
    /// Runtime threads. 1 is a current-thread runtime: limitador-server
    /// serves gRPC on its actix system's one thread (its issue 14, "Use
    /// multiple threads for grpc requests"). More is a multi-thread one.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// The rate limiter, as limitador-server holds it: blocking over memory,
/// async over Redis.
enum Limiter {
    Blocking(RateLimiter),
    Async(AsyncRateLimiter),
}

/// The RLS service over the limiter.
struct Rls {
    limiter: Limiter,
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        if request.domain.is_empty() {
            return Ok(Response::new(RateLimitResponse {
                overall_code: Code::Unknown.into(),
                ..RateLimitResponse::default()
            }));
        }
        let namespace = request.domain.into();
        let descriptors: Vec<HashMap<String, String>> = request
            .descriptors
            .iter()
            .map(|descriptor| {
                descriptor
                    .entries
                    .iter()
                    .map(|entry| (entry.key.clone(), entry.value.clone()))
                    .collect()
            })
            .collect();
        // Optional in the protocol, meaning 1; protobuf's default reads 0.
        let hits = match request.hits_addend {
            0 => 1,
            n => u64::from(n),
        };
        let mut ctx = Context::default();
        ctx.list_binding("descriptors".to_owned(), descriptors);
        let checked = match &self.limiter {
            Limiter::Blocking(limiter) => {
                limiter.check_rate_limited_and_update(&namespace, &ctx, hits)
            }
            Limiter::Async(limiter) => {
                limiter
                    .check_rate_limited_and_update(&namespace, &ctx, hits)
                    .await
            }
        };
        // UNAVAILABLE, not UNKNOWN: Envoy lets UNKNOWN through whatever
        // its failure_mode_deny says.
        let checked = checked.map_err(|_| Status::unavailable("Service unavailable"))?;
        let code = if checked.limited {
            Code::OverLimit
        } else {
            Code::Ok
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: code.into(),
            statuses: checked
                .counters
                .iter()
                .map(|counter| status(code, counter))
                .collect(),
            ..RateLimitResponse::default()
        }))
    }
}

/// The status of one counter that applied.
fn status(code: Code, counter: &Counter) -> DescriptorStatus {
    DescriptorStatus {
        code: code.into(),
        current_limit: Some(RateLimit {
            requests_per_unit: u32::try_from(counter.max_value()).unwrap_or(u32::MAX),
            unit: unit(counter.window()).into(),
            ..RateLimit::default()
        }),
        limit_remaining: counter
            .remaining()
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        ..DescriptorStatus::default()
    }
}

/// The protocol's unit of a window that is exactly one, else unknown.
fn unit(window: Duration) -> Unit {
    match window.as_secs() {
        1 => Unit::Second,
        60 => Unit::Minute,
        3600 => Unit::Hour,
        86_400 => Unit::Day,
        _ => Unit::Unknown,
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let mut runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(args.threads);
        builder
    };
    runtime.enable_all().build()?.block_on(serve(args))
}

async fn serve(args: Args) -> Result<(), Box<dyn Error>> {
    let limit = Limit::new(
        DOMAIN,
        args.max,
        args.seconds,
        [],
        [Expression::parse(VARIABLE)?],
    );
    let limiter = match &args.redis {
        None => {
            let limiter = RateLimiterBuilder::new(args.cache_size).build();
            limiter.add_limit(limit);
            Limiter::Blocking(limiter)
        }
        Some(url) => {
            let storage = AsyncRedisStorage::new(url).await?;
            let limiter =
                AsyncRateLimiterBuilder::new(AsyncStorage::with_counter_storage(Box::new(storage)))
                    .build();
            limiter.add_limit(limit);
            Limiter::Async(limiter)
        }
    };
    eprintln!(
        "limitador-rls: {} per {}s for each value of `key` in domain `{DOMAIN}`, {} store, on {}",
        args.max,
        args.seconds,
        if args.redis.is_some() {
            "redis"
        } else {
            "memory"
        },
        args.addr
    );
    Server::builder()
        .add_service(RateLimitServiceServer::new(Rls { limiter }))
        .serve(args.addr)
        .await?;
    Ok(())
}
