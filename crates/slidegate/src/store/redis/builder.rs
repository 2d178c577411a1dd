//! [`RedisStoreBuilder`]: the options of a [`RedisStore`], its URL, and the
//! connections it opens (one multiplexed connection to a single Redis; to
//! a cluster, redis-rs' cluster connection and one connection per master;
//! through Sentinel, one per sentinel and one to the master in use).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::calls::{Calls, Coalesce};
use super::changes::{Feed, Source};
use super::coalesce::Lane;
use super::errors::describe;
use super::inner::{Connection, Inner};
use super::sentinel::Sentinel;
use super::store::RedisStore;
use super::topology::Topology;
use super::url::{NodeUrl, cluster_nodes, sentinel_url};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::contract::Store;
use crate::store::lease::DEFAULT_MAX_LEASES;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "slidegate";
/// The default deadline of one store call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// The default deadline of one connection attempt.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much longer than needed Redis keeps an idle key by default, on
/// Redis' clock: absorbs the rounding to Redis' millisecond expiry.
pub const DEFAULT_EXPIRY_MARGIN: Duration = Duration::from_millis(1);
/// The default expiry margin with a client clock: covers a skew of up to
/// a second between the clocks of the processes sharing the limits.
pub const DEFAULT_CLIENT_CLOCK_EXPIRY_MARGIN: Duration = Duration::from_secs(1);
/// Requests the multiplexed connection buffers before it applies
/// backpressure (redis-rs' default of 50 throttles concurrent decisions).
const PIPELINE_BUFFER: usize = 1024;
/// Longest pause between two reconnection attempts. redis-rs doubles its
/// pause from 100 ms without a cap, and every call waits for the pending
/// reconnection: after a 5 s outage the store came back 5 s late.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(250);

impl RedisStore {
    /// A builder for the Redis (or Redis Cluster) at `url`:
    ///
    /// - `redis://[user:password@]host[:port][/db]`
    /// - `rediss://...` for TLS (rustls, the system's root certificates)
    /// - `redis+cluster://[user:password@]host1:port1,host2:port2` (or
    ///   `rediss+cluster://`) for a cluster: any reachable nodes; the rest
    ///   is discovered.
    /// - `redis+sentinel://[user:password@]host1:port1,host2:port2/MASTER_NAME[/db]`
    ///   (or `rediss+sentinel://`, TLS to the sentinels and the master) for
    ///   a master that Redis Sentinel fails over: the sentinels are asked
    ///   which node is the master, and asked again when calls fail and once
    ///   a second, so that the store follows a failover. A node is followed
    ///   only when a majority of the URL's sentinels name it. The user and
    ///   password are the master's; the sentinels' go in the query:
    ///   `?sentinel_username=USER&sentinel_password=PASSWORD`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url.into())
    }
}

/// Configures a [`RedisStore`].
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    clock: Option<Arc<dyn Clock>>,
    margin: Option<Duration>,
    coalesce: Coalesce,
    max_leases: usize,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: not printed.
        f.debug_struct("RedisStoreBuilder")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field(
                "clock",
                &if self.clock.is_some() {
                    "client"
                } else {
                    "server"
                },
            )
            .field("expiry_margin", &self.expiry_margin_or_default())
            .field("coalesce", &self.coalesce)
            .field("max_leases", &self.max_leases)
            .finish_non_exhaustive()
    }
}

impl RedisStoreBuilder {
    pub(super) fn new(url: String) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            clock: None,
            margin: None,
            coalesce: Coalesce::on(),
            max_leases: DEFAULT_MAX_LEASES,
        }
    }

    /// The prefix of every key (default `slidegate`). No braces: the hash
    /// tag belongs to the user's key.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The deadline of one store call (default 50 ms), as redis-rs'
    /// response timeout and around the whole call. A call that times out
    /// fails with [`Error::Timeout`] and is not retried (Redis may have
    /// applied it).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The deadline of one connection attempt (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Decide on Redis' clock (`TIME` inside the script): the default.
    pub fn server_clock(mut self) -> Self {
        self.clock = None;
        self
    }

    /// Decide on this clock instead of Redis' (for deployments that forbid
    /// `TIME` in scripts). Every process sharing the limits must then use
    /// the same time base: [`SystemClock`](crate::clock::SystemClock) in
    /// production, a [`ManualClock`](crate::clock::ManualClock) in tests.
    pub fn client_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// How much longer than needed Redis keeps an idle key: default
    /// [`DEFAULT_EXPIRY_MARGIN`] (1 ms, the rounding to Redis' millisecond
    /// expiry) on Redis' clock, [`DEFAULT_CLIENT_CLOCK_EXPIRY_MARGIN`] (1 s)
    /// with a client clock. A key's expiry is measured on the clock of the
    /// process that last moved it: with a client clock, a process whose
    /// clock is ahead sets it early for one whose clock lags, by the skew.
    /// The margin must cover the largest skew between the processes that
    /// share the limits, or a key can expire while a lagging process still
    /// counts its records.
    pub fn expiry_margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// How decisions go to Redis (default [`Coalesce::on`]): decisions that
    /// arrive while calls to the same node are out wait and go together in
    /// one script call, each decided exactly as alone; [`Coalesce::off`]
    /// sends one script call per decision. See [`Coalesce`].
    pub fn coalesce(mut self, coalesce: Coalesce) -> Self {
        self.coalesce = coalesce;
        self
    }

    /// The most leases open at once in this Redis, for every process that
    /// shares it ([`DEFAULT_MAX_LEASES`] by default): one more is refused
    /// with [`Error::TooManyLeases`], nothing recorded. A lease stops
    /// counting once settled or expired. On a cluster the open leases are
    /// counted in one slot, by a call of their own before the lease's.
    pub fn max_leases(mut self, max_leases: usize) -> Self {
        self.max_leases = max_leases;
        self
    }

    /// Connects (within the connect timeout) and checks that Redis answers.
    pub async fn build(self) -> Result<RedisStore> {
        let store = self.build_lazy()?;
        store.ready().await?;
        Ok(store)
    }

    /// Builds the store without waiting for Redis: it connects on first use
    /// (a single Redis reconnects on its own; so does a cluster), and calls
    /// fail with [`Error::Store`] or [`Error::Timeout`] until it answers.
    pub fn build_lazy(self) -> Result<RedisStore> {
        if self.prefix.contains(['{', '}']) {
            return Err(Error::Config(format!(
                "the key prefix {:?} must not contain braces: the hash tag belongs to the key",
                self.prefix
            )));
        }
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::Config("timeouts must be longer than zero".into()));
        }
        let margin_ms =
            u64::try_from(self.expiry_margin_or_default().as_millis()).unwrap_or(u64::MAX);
        let calls = Arc::new(Calls {
            clock: self.clock.clone(),
            margin_ms,
            timeout: self.timeout,
            coalesce: self.coalesce,
        });
        let (connection, topology, source) =
            match (cluster_nodes(&self.url)?, sentinel_url(&self.url)?) {
                (Some((url, hosts)), _) => {
                    let connection = self.cluster(&url, &hosts)?;
                    let connect_timeout = self.connect_timeout;
                    let calls = Arc::clone(&calls);
                    let topology = Topology::new(
                        hosts.iter().map(|h| h.as_str().into()).collect(),
                        url,
                        Box::new(move |node_url| {
                            let connection = manager(node_url, connect_timeout)?;
                            Ok(Arc::new(Lane::new(connection, Arc::clone(&calls), true)))
                        }),
                    );
                    let source = Source::Cluster(Arc::clone(&topology));
                    (connection, Some(topology), source)
                }
                (None, Some(url)) => {
                    if let Some(first) = url.sentinels.first() {
                        install_tls_provider(&url.sentinel_url.of(first));
                    }
                    let connect_timeout = self.connect_timeout;
                    let calls = Arc::clone(&calls);
                    let sentinel = Sentinel::new(
                        url,
                        |url| manager(url, connect_timeout),
                        Box::new(move |node_url| {
                            let connection = manager(node_url, connect_timeout)?;
                            Ok(Arc::new(Lane::new(connection, Arc::clone(&calls), false)))
                        }),
                    )?;
                    let source = Source::Sentinel(Arc::clone(&sentinel));
                    (Connection::Sentinel(sentinel), None, source)
                }
                (None, None) => {
                    let connection = self.node()?;
                    (
                        Connection::Node(Arc::new(Lane::new(
                            connection,
                            Arc::clone(&calls),
                            false,
                        ))),
                        None,
                        Source::Node(self.url.clone()),
                    )
                }
            };
        let feed = Feed::new(&self.prefix, source, self.connect_timeout);
        Ok(RedisStore {
            inner: Arc::new(Inner {
                feed,
                topology,
                connection,
                prefix: self.prefix,
                timeout: self.timeout,
                connect_timeout: self.connect_timeout,
                calls,
                max_leases: self.max_leases,
                turns: Arc::default(),
            }),
        })
    }

    /// The margin set, or the default for the clock.
    fn expiry_margin_or_default(&self) -> Duration {
        self.margin.unwrap_or(if self.clock.is_some() {
            DEFAULT_CLIENT_CLOCK_EXPIRY_MARGIN
        } else {
            DEFAULT_EXPIRY_MARGIN
        })
    }

    fn node(&self) -> Result<ConnectionManager> {
        if !self.url.starts_with("redis://") && !self.url.starts_with("rediss://") {
            return Err(Error::Config(
                "expected a redis://, rediss://, redis+cluster:// or redis+sentinel:// URL".into(),
            ));
        }
        manager(&self.url, self.connect_timeout)
    }

    fn cluster(&self, url: &NodeUrl, hosts: &[String]) -> Result<Connection> {
        let nodes: Vec<String> = hosts.iter().map(|h| url.of(h)).collect();
        if let Some(first) = nodes.first() {
            install_tls_provider(first);
        }
        let client = redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.timeout)
            .build()
            .map_err(config_error)?;
        let connection =
            client.get_pending_async_connection_with_config(redis::cluster::ClusterConfig::new());
        Ok(Connection::Cluster(connection))
    }
}

/// A connection to one node that reconnects by itself: a single Redis, or
/// one master of a cluster.
fn manager(url: &str, connect_timeout: Duration) -> Result<ConnectionManager> {
    install_tls_provider(url);
    let client = redis::Client::open(url).map_err(config_error)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        // `Inner::within` bounds every call, reconnection included; a
        // second timer per call inside redis-rs would only cost time.
        .set_response_timeout(None)
        .set_pipeline_buffer_size(PIPELINE_BUFFER)
        .set_max_delay(RECONNECT_MAX_DELAY);
    ConnectionManager::new_lazy_with_config(client, config).map_err(config_error)
}

/// redis-rs builds its rustls configuration with the process' default
/// crypto provider: make it ring unless the application chose one.
fn install_tls_provider(url: &str) {
    if url.starts_with("rediss") {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn config_error(e: redis::RedisError) -> Error {
    Error::Config(describe(&e))
}
