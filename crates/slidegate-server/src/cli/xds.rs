//! The flags of `slidegate serve` that subscribe to a control plane over
//! xDS. Their environment variables are envoyproxy/ratelimit's, so that
//! its settings work unchanged (`CONFIG_TYPE=GRPC_XDS_SOTW`,
//! `CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::values::{ShownDuration, positive_duration};
use crate::rules::xds::options::{
    DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_NODE_ID,
    DEFAULT_SERVER, parse_pairs,
};
use crate::rules::xds::{XdsOptions, XdsTls};

/// Where rules come from besides the files (envoyproxy/ratelimit's
/// `CONFIG_TYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConfigType {
    /// Files only (`--config`), unless --xds-server is given.
    #[value(name = "FILE", alias = "file")]
    File,
    /// A control plane too, over ADS state of the world.
    #[value(name = "GRPC_XDS_SOTW", alias = "grpc_xds_sotw")]
    GrpcXdsSotw,
}

/// Flags of `slidegate serve` for rules over xDS.
#[derive(Debug, Args)]
pub struct XdsArgs {
    /// `GRPC_XDS_SOTW` subscribes to the control plane at --xds-server
    /// (`localhost:18000` unless given); `FILE` never does, even with
    /// --xds-server set in the environment. Unset: xDS when --xds-server
    /// is given.
    #[arg(long, value_name = "TYPE", env = "CONFIG_TYPE", value_enum)]
    pub config_type: Option<ConfigType>,

    /// Subscribe to the rate limit configs
    /// (`ratelimit.config.ratelimit.v3.RateLimitConfig`) of this control
    /// plane over ADS, state of the world, as envoyproxy/ratelimit and
    /// Envoy Gateway do: `host:port`, `http://host:port` or
    /// `https://host:port`. Its domains stand beside the files' (a domain
    /// in both is refused); a bad update is NACKed and the rules in force
    /// stay, also while the control plane is away.
    #[arg(long, value_name = "URL", env = "CONFIG_GRPC_XDS_SERVER_URL")]
    pub xds_server: Option<String>,

    /// The node id the control plane keys this server's snapshot by.
    #[arg(long, value_name = "ID", env = "CONFIG_GRPC_XDS_NODE_ID", default_value = DEFAULT_NODE_ID)]
    pub xds_node_id: String,

    /// The node's cluster.
    #[arg(
        long,
        value_name = "NAME",
        env = "SLIDEGATE_XDS_CLUSTER",
        default_value = ""
    )]
    pub xds_cluster: String,

    /// The node's metadata, `key:value` (or `key=value`) pairs separated
    /// by commas.
    #[arg(
        long,
        value_name = "PAIRS",
        env = "CONFIG_GRPC_XDS_NODE_METADATA",
        value_parser = pairs
    )]
    pub xds_node_metadata: Option<Pairs>,

    /// gRPC metadata sent with the subscription, `name:value` pairs
    /// separated by commas (an authorization, say).
    #[arg(
        long,
        value_name = "PAIRS",
        env = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        value_parser = pairs
    )]
    pub xds_headers: Option<Pairs>,

    /// Connect to the control plane over TLS (always for an `https://`
    /// URL), trusting the system's roots unless --xds-tls-ca is given.
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_USE_TLS")]
    pub xds_tls: bool,

    /// PEM CA certificates the control plane's certificate must chain to.
    #[arg(long, value_name = "PATH", env = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")]
    pub xds_tls_ca: Option<PathBuf>,

    /// This server's PEM certificate, for mutual TLS (with --xds-tls-key).
    #[arg(
        long,
        value_name = "PATH",
        env = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        requires = "xds_tls_key"
    )]
    pub xds_tls_cert: Option<PathBuf>,

    /// The PEM private key of --xds-tls-cert.
    #[arg(
        long,
        value_name = "PATH",
        env = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        requires = "xds_tls_cert"
    )]
    pub xds_tls_key: Option<PathBuf>,

    /// The name the control plane's certificate must carry, when it is not
    /// the URL's host.
    #[arg(long, value_name = "NAME", env = "CONFIG_GRPC_XDS_SERVER_TLS_SAN")]
    pub xds_tls_san: Option<String>,

    /// The first wait before reconnecting to the control plane; doubled
    /// after each failed attempt, with jitter, up to --xds-backoff-max.
    #[arg(
        long,
        value_name = "DURATION",
        env = "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        default_value_t = ShownDuration(DEFAULT_BACKOFF_INITIAL),
        value_parser = positive_duration
    )]
    pub xds_backoff_initial: ShownDuration,

    /// The longest wait before reconnecting to the control plane.
    #[arg(
        long,
        value_name = "DURATION",
        env = "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        default_value_t = ShownDuration(DEFAULT_BACKOFF_MAX),
        value_parser = positive_duration
    )]
    pub xds_backoff_max: ShownDuration,

    /// The largest message taken from the control plane, in bytes.
    #[arg(
        long,
        value_name = "BYTES",
        env = "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        default_value_t = DEFAULT_MAX_MESSAGE_BYTES,
        value_parser = clap::value_parser!(usize)
    )]
    pub xds_max_message_bytes: usize,
}

/// `key:value` pairs, as one flag's value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs(pub Vec<(String, String)>);

fn pairs(text: &str) -> Result<Pairs, String> {
    parse_pairs(text).map(Pairs)
}

impl XdsArgs {
    /// The subscription these flags ask for, if any.
    pub fn options(&self) -> Option<XdsOptions> {
        let server = match (self.config_type, &self.xds_server) {
            (Some(ConfigType::File), _) => return None,
            (Some(ConfigType::GrpcXdsSotw), None) => DEFAULT_SERVER.to_owned(),
            (_, Some(server)) => server.clone(),
            (None, None) => return None,
        };
        let tls = (self.xds_tls
            || self.xds_tls_ca.is_some()
            || self.xds_tls_cert.is_some()
            || self.xds_tls_san.is_some())
        .then(|| XdsTls {
            ca: self.xds_tls_ca.clone(),
            cert: self.xds_tls_cert.clone(),
            key: self.xds_tls_key.clone(),
            server_name: self.xds_tls_san.clone(),
        });
        Some(XdsOptions {
            server,
            node_id: self.xds_node_id.clone(),
            cluster: self.xds_cluster.clone(),
            node_metadata: self.xds_node_metadata.clone().unwrap_or_default().0,
            headers: self.xds_headers.clone().unwrap_or_default().0,
            tls,
            backoff_initial: self.xds_backoff_initial.0,
            backoff_max: self.xds_backoff_max.0.max(self.xds_backoff_initial.0),
            max_message_bytes: self.xds_max_message_bytes,
        })
    }
}
