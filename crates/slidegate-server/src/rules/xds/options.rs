//! How to reach the control plane (`slidegate serve --xds-*`).

use std::path::PathBuf;
use std::time::Duration;

/// `--xds-backoff-initial`'s default: the first wait before reconnecting.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// `--xds-backoff-max`'s default: the longest wait before reconnecting.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// `--xds-max-message-bytes`'s default: the largest update taken (4 MiB,
/// the most a config file may hold).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;
/// `--xds-node-id`'s default (envoyproxy/ratelimit's).
pub const DEFAULT_NODE_ID: &str = "default";
/// The control plane's address when xDS is asked for by
/// `CONFIG_TYPE=GRPC_XDS_SOTW` alone (envoyproxy/ratelimit's default).
pub const DEFAULT_SERVER: &str = "localhost:18000";

/// Where the control plane is and who this server is to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdsOptions {
    /// `http://host:port`, `https://host:port`, or `host:port`.
    pub server: String,
    /// The node id the control plane keys its snapshots by.
    pub node_id: String,
    /// The node's cluster.
    pub cluster: String,
    /// The node's metadata: string fields.
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent with the stream (an authorization, say).
    pub headers: Vec<(String, String)>,
    /// TLS to the control plane, if any (always for an `https://` URL).
    pub tls: Option<XdsTls>,
    /// The first wait before reconnecting, doubled on each failure.
    pub backoff_initial: Duration,
    /// The longest wait before reconnecting.
    pub backoff_max: Duration,
    /// The largest message taken from the control plane.
    pub max_message_bytes: usize,
}

impl XdsOptions {
    /// Options for `server` with every default.
    pub fn new(server: impl Into<String>) -> XdsOptions {
        XdsOptions {
            server: server.into(),
            node_id: DEFAULT_NODE_ID.to_owned(),
            cluster: String::new(),
            node_metadata: Vec::new(),
            headers: Vec::new(),
            tls: None,
            backoff_initial: DEFAULT_BACKOFF_INITIAL,
            backoff_max: DEFAULT_BACKOFF_MAX,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// TLS to the control plane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XdsTls {
    /// PEM CA certificates to trust; the system's roots when unset.
    pub ca: Option<PathBuf>,
    /// This server's certificate (PEM), for mutual TLS.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// The name the control plane's certificate must carry, when not the
    /// URL's host.
    pub server_name: Option<String>,
}

/// Pairs written `k1:v1,k2=v2` (envoyproxy/ratelimit's
/// `CONFIG_GRPC_XDS_NODE_METADATA`, and its map settings): `:` or `=`
/// between a key and its value.
pub fn parse_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once([':', '=']) {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok((key.trim().to_owned(), value.trim().to_owned()))
            }
            _ => Err(format!("{pair:?} is not KEY:VALUE or KEY=VALUE")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_take_either_separator_and_refuse_a_pair_without_a_key() {
        assert_eq!(
            parse_pairs("a:1, b=2,,c:x=y").unwrap(),
            [("a", "1"), ("b", "2"), ("c", "x=y")].map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert!(parse_pairs("a").is_err());
        assert!(parse_pairs(":1").is_err());
        assert_eq!(parse_pairs("").unwrap(), []);
    }
}
