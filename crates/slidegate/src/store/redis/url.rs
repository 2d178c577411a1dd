//! The URLs of a Redis store that name several nodes, which redis-rs does
//! not parse: `redis+cluster://` (any nodes of a cluster) and
//! `redis+sentinel://` (the sentinels and the master's name), and how a
//! node's own URL is made from them.

use crate::error::{Error, Result};

/// A node's URL: the cluster URL's scheme, credentials and path around the
/// node's `host:port`.
#[derive(Clone, Debug)]
pub(crate) struct NodeUrl {
    pub(crate) scheme: &'static str,
    pub(crate) auth: String,
    pub(crate) path: String,
}

impl NodeUrl {
    /// The URL of `node` (`host:port`).
    pub(crate) fn of(&self, node: &str) -> String {
        format!("{}://{}{node}{}", self.scheme, self.auth, self.path)
    }
}

/// The port of a sentinel named without one.
const SENTINEL_PORT: u16 = 26_379;

/// A parsed `redis+sentinel://` (or `rediss+sentinel://`) URL.
#[derive(Clone, Debug)]
pub(crate) struct SentinelUrl {
    /// The sentinels' `host:port`.
    pub(crate) sentinels: Vec<String>,
    /// How to reach a sentinel: the scheme and the sentinels' credentials.
    pub(crate) sentinel_url: NodeUrl,
    /// How to reach the master: the scheme, the URL's credentials and
    /// database.
    pub(crate) master_url: NodeUrl,
    /// The name the sentinels monitor the master under.
    pub(crate) name: String,
}

/// The URL's form, for error messages.
const FORM: &str = "redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]\
     [?sentinel_username=USER&sentinel_password=PASSWORD]";

/// Parses a `redis+sentinel://` or `rediss+sentinel://` URL; `None` for
/// any other URL.
///
/// The user and password of the URL are the master's (and its replicas');
/// the sentinels' come from the query (`sentinel_username`,
/// `sentinel_password`), and without them the sentinels are asked without
/// `AUTH`. Both are percent-encoded as in a URL's user info. `rediss+`
/// speaks TLS to the sentinels and to the master.
pub(crate) fn sentinel_url(url: &str) -> Result<Option<SentinelUrl>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        ("redis", rest)
    } else if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
        ("rediss", rest)
    } else {
        return Ok(None);
    };
    let bad = |why: &str| Error::Config(format!("{why}: expected {FORM}"));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (auth, rest) = split_user_info(rest);
    let (hosts, path) = rest
        .split_once('/')
        .ok_or_else(|| bad("the URL names no master"))?;
    let (name, db) = match path.split_once('/') {
        Some((name, db)) => (name, db.trim_end_matches('/')),
        None => (path, ""),
    };
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(bad("the URL names no master"));
    }
    let db = if db.is_empty() {
        String::new()
    } else if db.parse::<u16>().is_ok() {
        format!("/{db}")
    } else {
        return Err(bad("the database must be a number"));
    };
    let mut sentinels = Vec::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        sentinels.push(sentinel_address(host).ok_or_else(|| bad("a sentinel is not HOST:PORT"))?);
    }
    if sentinels.is_empty() {
        return Err(bad("the URL names no sentinel"));
    }
    let (mut user, mut password) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_username", value)) => user = Some(value),
            Some(("sentinel_password", value)) => password = Some(value),
            _ => {
                let key = pair.split('=').next().unwrap_or_default();
                return Err(bad(&format!(
                    "unknown query parameter {key:?} (sentinel_username and sentinel_password are known)"
                )));
            }
        }
    }
    let sentinel_auth = match (user, password) {
        (None, None) => String::new(),
        (user, Some(password)) => format!("{}:{password}@", user.unwrap_or_default()),
        (Some(user), None) => format!("{user}@"),
    };
    Ok(Some(SentinelUrl {
        sentinels,
        sentinel_url: NodeUrl {
            scheme,
            auth: sentinel_auth,
            path: String::new(),
        },
        master_url: NodeUrl {
            scheme,
            auth,
            path: db,
        },
        name: name.to_owned(),
    }))
}

/// `host:port` of a sentinel (the default port when none is given), or
/// `None` when the port is not a number.
fn sentinel_address(host: &str) -> Option<String> {
    let bracketed = host.starts_with('[');
    match host.rsplit_once(':') {
        Some((name, port)) if !bracketed || name.ends_with(']') => {
            let port: u16 = port.parse().ok()?;
            (!name.is_empty()).then(|| format!("{name}:{port}"))
        }
        _ => Some(format!("{host}:{SENTINEL_PORT}")),
    }
}

/// The way to a node of a `redis+cluster://` (or `rediss+cluster://`) URL
/// and its nodes (`host:port`), or `None` for a single node's URL.
pub(crate) fn cluster_nodes(url: &str) -> Result<Option<(NodeUrl, Vec<String>)>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else if let Some(rest) = url.strip_prefix("rediss+cluster://") {
        ("rediss", rest)
    } else {
        return Ok(None);
    };
    let (auth, hosts) = split_user_info(rest);
    let (hosts, path) = match hosts.split_once('/') {
        Some((hosts, path)) => (hosts, format!("/{path}")),
        None => (hosts, String::new()),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect();
    if hosts.is_empty() {
        return Err(Error::Config(
            "a redis+cluster:// URL needs at least one host:port".into(),
        ));
    }
    Ok(Some((NodeUrl { scheme, auth, path }, hosts)))
}

/// The user info of what follows a URL's `scheme://` (`user:password@`,
/// kept with its `@` to be put back as is in a node's URL, or empty), and
/// the rest. The last `@` ends it: a password may hold one.
fn split_user_info(rest: &str) -> (String, &str) {
    match rest.rsplit_once('@') {
        Some((auth, rest)) => (format!("{auth}@"), rest),
        None => (String::new(), rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_urls(url: &str) -> Option<Vec<String>> {
        let (template, hosts) = cluster_nodes(url).ok()??;
        Some(hosts.iter().map(|h| template.of(h)).collect())
    }

    #[test]
    fn cluster_urls_list_every_node_with_the_credentials() {
        assert_eq!(
            node_urls("redis+cluster://u:p@h1:7000,h2:7001"),
            Some(vec![
                "redis://u:p@h1:7000".to_owned(),
                "redis://u:p@h2:7001".to_owned()
            ])
        );
        assert_eq!(
            node_urls("rediss+cluster://h1:7000/"),
            Some(vec!["rediss://h1:7000/".to_owned()])
        );
        assert!(matches!(cluster_nodes("redis://h1:6379"), Ok(None)));
        assert!(matches!(
            cluster_nodes("redis+cluster://"),
            Err(Error::Config(_))
        ));
    }

    fn parsed(url: &str) -> SentinelUrl {
        sentinel_url(url)
            .expect("a valid URL")
            .expect("a sentinel URL")
    }

    #[test]
    fn the_url_names_sentinels_master_credentials_and_database() {
        let url = parsed(
            "redis+sentinel://app:s3cret@10.0.0.1:26379,10.0.0.2,[::1]:5000/mymaster/2?sentinel_password=p",
        );
        assert_eq!(
            url.sentinels,
            ["10.0.0.1:26379", "10.0.0.2:26379", "[::1]:5000"]
        );
        assert_eq!(url.name, "mymaster");
        assert_eq!(
            url.master_url.of("10.0.0.9:6379"),
            "redis://app:s3cret@10.0.0.9:6379/2"
        );
        assert_eq!(
            url.sentinel_url.of("10.0.0.1:26379"),
            "redis://:p@10.0.0.1:26379"
        );
        let tls = parsed("rediss+sentinel://h:1/m?sentinel_username=u&sentinel_password=p");
        assert_eq!(tls.master_url.of("x:1"), "rediss://x:1");
        assert_eq!(tls.sentinel_url.of("h:1"), "rediss://u:p@h:1");
        assert!(matches!(sentinel_url("redis://h:6379"), Ok(None)));
    }

    #[test]
    fn a_url_without_master_or_sentinel_is_a_config_error() {
        for bad in [
            "redis+sentinel://h:26379",
            "redis+sentinel://h:26379/",
            "redis+sentinel:///mymaster",
            "redis+sentinel://h:port/mymaster",
            "redis+sentinel://h:1/mymaster/db",
            "redis+sentinel://h:1/mymaster?password=x",
        ] {
            match sentinel_url(bad) {
                Err(Error::Config(message)) => {
                    assert!(message.contains("redis+sentinel://"), "{message}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
