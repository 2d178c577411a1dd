//! The `--store` URL: which store it names, and how it is shown (never
//! with its password).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// A parsed `--store` value.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory`: the in-process store.
    Memory,
    /// `redis://…`, `rediss://…`, `redis+cluster://…` or
    /// `redis+sentinel://…`: the Redis store.
    Redis(String),
}

impl fmt::Debug for StoreUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("Memory"),
            StoreUrl::Redis(url) => f.debug_tuple("Redis").field(&redact_url(url)).finish(),
        }
    }
}

/// A `--store` value that names no known store (shown without its password).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown store {:?}: expected `memory`, `redis://HOST:PORT`, `rediss://HOST:PORT`, `redis+cluster://H1:P1,H2:P2` or `redis+sentinel://H1:P1,H2:P2/MASTER_NAME`",
    redact_url(.0)
)]
pub struct UnknownStore(String);

/// A URL cut into its parts as `scheme://user_info@hosts/path?query`,
/// without validating it: a mistyped URL is cut too, so that its password
/// can be hidden. The user info ends at the last `@`.
struct UrlParts<'a> {
    scheme: Option<&'a str>,
    user_info: Option<&'a str>,
    hosts: &'a str,
    /// From the first `/` after the hosts on, without the query.
    path: &'a str,
    query: Option<&'a str>,
}

impl UrlParts<'_> {
    fn of(url: &str) -> UrlParts<'_> {
        let (url, query) = match url.split_once('?') {
            Some((url, query)) => (url, Some(query)),
            None => (url, None),
        };
        let (scheme, rest) = match url.split_once("://") {
            Some((scheme, rest)) => (Some(scheme), rest),
            None => (None, url),
        };
        let (user_info, after) = match rest.rsplit_once('@') {
            Some((user_info, after)) => (Some(user_info), after),
            None => (None, rest),
        };
        let end = after.find('/').unwrap_or(after.len());
        UrlParts {
            scheme,
            user_info,
            hosts: &after[..end],
            path: &after[end..],
            query,
        }
    }
}

/// `url` fit to be shown: whatever follows the user name in its user info
/// (`user:password@`) becomes `***`, as does its query string (Redis URLs
/// may carry `?pass=`). Works on mistyped URLs too: the password is
/// whatever stands between the first `:` after the scheme and the last `@`.
///
/// `redis://app:s3cret@10.0.0.1:6379/0` → `redis://app:***@10.0.0.1:6379/0`
pub fn redact_url(url: &str) -> Cow<'_, str> {
    let parts = UrlParts::of(url);
    if parts.user_info.is_none() && parts.query.is_none() {
        return Cow::Borrowed(url);
    }
    let mut shown = String::with_capacity(url.len());
    if let Some(scheme) = parts.scheme {
        shown.push_str(scheme);
        shown.push_str("://");
    }
    if let Some(user_info) = parts.user_info {
        match user_info.split_once(':') {
            Some((user, _)) => {
                shown.push_str(user);
                shown.push_str(":***@");
            }
            None => shown.push_str("***@"),
        }
    }
    shown.push_str(parts.hosts);
    shown.push_str(parts.path);
    if parts.query.is_some() {
        shown.push_str("?***");
    }
    Cow::Owned(shown)
}

/// The `host:port` list of a Redis URL, without user, password, database
/// or query: what the store call spans name as `node`.
pub fn redis_nodes(url: &str) -> &str {
    UrlParts::of(url).hosts
}

impl FromStr for StoreUrl {
    type Err = UnknownStore;

    fn from_str(s: &str) -> Result<StoreUrl, UnknownStore> {
        let trimmed = s.trim();
        if trimmed.eq_ignore_ascii_case("memory") || trimmed.eq_ignore_ascii_case("memory://") {
            return Ok(StoreUrl::Memory);
        }
        let scheme = UrlParts::of(trimmed).scheme.map(str::to_ascii_lowercase);
        match scheme.as_deref() {
            Some(
                "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel"
                | "rediss+sentinel",
            ) => Ok(StoreUrl::Redis(trimmed.to_owned())),
            _ => Err(UnknownStore(s.to_owned())),
        }
    }
}

impl fmt::Display for StoreUrl {
    /// The kind of store, never the URL itself (it may carry a password).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory"),
            StoreUrl::Redis(_) => f.write_str("redis"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_parse_by_scheme() {
        assert_eq!("memory".parse(), Ok(StoreUrl::Memory));
        assert_eq!(" MEMORY ".parse(), Ok(StoreUrl::Memory));
        assert_eq!(
            "redis://127.0.0.1:6379".parse(),
            Ok(StoreUrl::Redis("redis://127.0.0.1:6379".into()))
        );
        assert!(matches!(
            "redis+cluster://a:1,b:2".parse(),
            Ok(StoreUrl::Redis(_))
        ));
        for sentinel in [
            "redis+sentinel://a:26379,b:26379/mymaster",
            "rediss+sentinel://a:26379/mymaster/1",
        ] {
            assert_eq!(sentinel.parse(), Ok(StoreUrl::Redis(sentinel.into())));
        }
        for bad in ["", "mem", "http://x", "redis", "postgres://db"] {
            assert!(bad.parse::<StoreUrl>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_store_url_never_prints_its_password() {
        let url: StoreUrl = "redis://user:secret@host:6379".parse().unwrap();
        assert_eq!(url.to_string(), "redis");
        assert_eq!(format!("{url:?}"), r#"Redis("redis://user:***@host:6379")"#);
        let unknown = "redis:/user:secret@host".parse::<StoreUrl>().unwrap_err();
        assert!(!unknown.to_string().contains("secret"), "{unknown}");
    }

    #[test]
    fn redaction_hides_passwords_in_urls_well_formed_or_not() {
        for (url, shown) in [
            (
                "redis://app:s3cret@10.0.0.1:6379/0",
                "redis://app:***@10.0.0.1:6379/0",
            ),
            ("rediss://:s3cret@host", "rediss://:***@host"),
            ("redis://s3cret@host", "redis://***@host"),
            (
                "redis+cluster://u:s3cret@a:1,b:2",
                "redis+cluster://u:***@a:1,b:2",
            ),
            (
                "redis+sentinel://u:s3cret@a:1,b:2/mymaster?sentinel_password=s3cret",
                "redis+sentinel://u:***@a:1,b:2/mymaster?***",
            ),
            ("redis://u:p@ss:s3cret@host", "redis://u:***@host"),
            ("redis:/u:s3cret@host", "redis:***@host"),
            (
                "redis+unix:///tmp/r.sock?pass=s3cret",
                "redis+unix:///tmp/r.sock?***",
            ),
            ("redis://host:6379", "redis://host:6379"),
            ("memory", "memory"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn nodes_are_the_hosts_without_user_database_or_query() {
        for (url, nodes) in [
            ("redis://127.0.0.1:6379", "127.0.0.1:6379"),
            ("redis://u:p@ss@10.0.0.1:6379/2", "10.0.0.1:6379"),
            ("redis+cluster://a:1,b:2", "a:1,b:2"),
            (
                "redis+sentinel://u:p@a:26379,b:26379/mymaster/1?sentinel_password=x@y",
                "a:26379,b:26379",
            ),
        ] {
            assert_eq!(redis_nodes(url), nodes, "{url}");
        }
    }
}
