//! Rate-limit keys: who (or what) a request is counted against.

use std::fmt::{self, Display};
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::extract::{ConnectInfo, MatchedPath};
use http::HeaderName;

use super::head::RequestHead;
use super::proxy::{ProxyHeader, TrustedProxies, client_ip};

mod writer;

pub use writer::KeyWriter;
pub(crate) use writer::ThreadKey;

/// Decides which bucket a request is counted in, by writing one or more
/// labelled parts into a [`KeyWriter`]: `ip=203.0.113.7`,
/// `user=42|route=POST /login`.
///
/// The built-in extractors are made by [`Key`]; combine them with
/// [`and`](KeyExtractor::and). Implement the trait for anything else, or
/// use [`Key::from_fn`].
///
/// ```
/// use slidegate::middleware::{KeyExtractor, KeyWriter, NoKey, RequestHead};
///
/// /// Counts requests per tenant, from the `x-tenant` header.
/// struct Tenant;
///
/// impl KeyExtractor for Tenant {
///     fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
///         let tenant = request.headers.get("x-tenant").ok_or(NoKey::new("no x-tenant header"))?;
///         key.part_bytes("tenant", tenant.as_bytes());
///         Ok(())
///     }
/// }
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// Writes the key of `request` into `key`, or says why there is none.
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey>;

    /// A key made of both keys: `user=42|route=POST /login`. A request
    /// has the combined key only when it has both.
    fn and<O: KeyExtractor>(self, other: O) -> And<Self, O>
    where
        Self: Sized,
    {
        And(self, other)
    }
}

/// Why a request has no key (no peer address, no user, no header).
///
/// What happens to such a request is [`MissingKey`](super::MissingKey)'s choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoKey {
    reason: &'static str,
}

impl NoKey {
    /// A missing key, with a short reason shown in the rejection's `detail`.
    pub const fn new(reason: &'static str) -> NoKey {
        NoKey { reason }
    }

    /// The reason.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl Display for NoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason)
    }
}

/// The built-in key extractors.
///
/// ```
/// use slidegate::middleware::{Key, KeyExtractor, TrustedProxies};
///
/// # #[derive(Clone)] struct UserId(u64);
/// # impl std::fmt::Display for UserId {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { self.0.fmt(f) }
/// # }
/// let per_ip = Key::peer_ip();
/// let behind_proxies = Key::client_ip(TrustedProxies::new(["10.0.0.0/8"])?);
/// let per_user_and_route = Key::extension::<UserId>("user").and(Key::route());
/// # Ok::<(), slidegate::middleware::InvalidProxyRange>(())
/// ```
#[derive(Debug)]
pub enum Key {}

impl Key {
    /// The address of the TCP peer, from axum's `ConnectInfo<SocketAddr>`
    /// (serve with `into_make_service_with_connect_info::<SocketAddr>()`)
    /// or, with the feature `tonic`, from the `TcpConnectInfo` a tonic
    /// server adds (plain TCP; not behind tonic's own TLS).
    /// Part: `ip=203.0.113.7`.
    ///
    /// IPv6 clients are counted per /64 network by default, not per
    /// address: see [`PeerIp::ipv6_prefix`].
    ///
    /// Behind a reverse proxy every request has the proxy's address: use
    /// [`Key::client_ip`] there.
    pub fn peer_ip() -> PeerIp {
        PeerIp {
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// The client's address behind reverse proxies: the peer address, or,
    /// when the peer is one of the `trusted` proxies, the address that
    /// `X-Forwarded-For` (or `Forwarded`, see [`ClientIp::header`]) names,
    /// walking the list from the right and skipping trusted hops.
    /// Part: `ip=203.0.113.7`.
    ///
    /// A header sent by an untrusted peer is ignored, so clients cannot
    /// choose their own key. With no trusted proxies this is
    /// [`Key::peer_ip`]. IPv6 clients are counted per /64 network by
    /// default, as there: see [`ClientIp::ipv6_prefix`].
    pub fn client_ip(trusted: TrustedProxies) -> ClientIp {
        ClientIp {
            trusted,
            header: ProxyHeader::XForwardedFor,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// The first value of a request header (an API key, a tenant id).
    /// Part: `x-api-key=...`. A request without it, or with an empty
    /// value, has no key.
    pub fn header(name: HeaderName) -> HeaderKey {
        HeaderKey { name }
    }

    /// The method and the route pattern that axum matched (`MatchedPath`):
    /// `route=POST /users/%7Bid%7D` for every `/users/{id}`, so one client
    /// cannot spread over many keys by varying the path. Available inside
    /// an axum `Router` (`layer` or `route_layer`); a request without a
    /// matched route has no key.
    pub fn route() -> Route {
        Route
    }

    /// The method and the request path as sent: `path=POST /a/b`. Meant
    /// for gRPC, whose paths name the method (`/pkg.Service/Method`); on
    /// HTTP routes with parameters prefer [`Key::route`], which keeps one
    /// key per route.
    pub fn path() -> PathKey {
        PathKey
    }

    /// A value the application put in the request's extensions, such as
    /// the authenticated user inserted by an auth middleware that runs
    /// before the limiter. Part: `label=value` (`user=42`). A request
    /// without one has no key.
    pub fn extension<T>(label: &'static str) -> ExtensionKey<T>
    where
        T: Display + Send + Sync + 'static,
    {
        ExtensionKey {
            label,
            _type: PhantomData,
        }
    }

    /// One key for every request: a global limit. Part: `global`.
    pub fn global() -> Global {
        Global
    }

    /// A key from a closure. Part: `label=value`; `None` means no key.
    ///
    /// ```
    /// use slidegate::middleware::Key;
    /// let by_host = Key::from_fn("host", |req| req.uri.host().map(str::to_owned));
    /// ```
    pub fn from_fn<F, V>(label: &'static str, f: F) -> FromFn<F>
    where
        F: Fn(&RequestHead<'_>) -> Option<V> + Send + Sync + 'static,
        V: Display,
    {
        FromFn { label, f }
    }
}

/// The IPv6 network IP keys count by default: a /64.
///
/// A /64 is the smallest network an IPv6 subscriber is given (RFC 6177
/// recommends more), and every host on it picks its own addresses in it
/// (SLAAC, privacy addresses that change daily), so one client may send
/// each request from a new address. Counted per address, such a client is
/// never limited, and its 2^64 addresses fill any store with keys.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// See [`Key::peer_ip`].
#[derive(Debug, Clone, Copy)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

impl PeerIp {
    /// Counts IPv6 clients per network of `prefix` bits (default
    /// [`DEFAULT_IPV6_PREFIX`], 64: why is told there). `128` counts each
    /// address on its own, for networks where an address is known to be
    /// one client; a shorter prefix (`56`, `48`) counts a whole site or
    /// subscriber as one. IPv4 addresses (and IPv4-mapped IPv6 ones) are
    /// always counted whole. The key shows the network address:
    /// `ip=2001:db8:1:2::`.
    pub fn ipv6_prefix(mut self, prefix: u8) -> PeerIp {
        self.ipv6_prefix = prefix.min(128);
        self
    }
}

/// The peer address of a request, from axum's `ConnectInfo<SocketAddr>`
/// or (feature `tonic`) tonic's `TcpConnectInfo`.
pub(crate) fn peer_addr(request: &RequestHead<'_>) -> Option<IpAddr> {
    if let Some(ConnectInfo(addr)) = request.extensions.get::<ConnectInfo<SocketAddr>>() {
        return Some(addr.ip().to_canonical());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = request
        .extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr.ip().to_canonical());
    }
    None
}

const NO_PEER: NoKey = NoKey::new(
    "the peer address is unknown (serve with into_make_service_with_connect_info::<SocketAddr>())",
);

impl KeyExtractor for PeerIp {
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        let ip = peer_addr(request).ok_or(NO_PEER)?;
        key.part_ip("ip", mask(ip, self.ipv6_prefix));
        Ok(())
    }
}

/// See [`Key::client_ip`].
#[derive(Debug, Clone)]
pub struct ClientIp {
    trusted: TrustedProxies,
    header: ProxyHeader,
    ipv6_prefix: u8,
}

impl ClientIp {
    /// Which header the trusted proxies write: `X-Forwarded-For` (the
    /// default) or `Forwarded` (RFC 7239). Only that one is read: a client
    /// could send the other one through a proxy that does not touch it.
    pub fn header(mut self, header: ProxyHeader) -> ClientIp {
        self.header = header;
        self
    }

    /// As [`PeerIp::ipv6_prefix`] (default [`DEFAULT_IPV6_PREFIX`], 64).
    pub fn ipv6_prefix(mut self, prefix: u8) -> ClientIp {
        self.ipv6_prefix = prefix.min(128);
        self
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        let peer = peer_addr(request).ok_or(NO_PEER)?;
        let ip = client_ip(peer, request.headers, &self.trusted, self.header);
        key.part_ip("ip", mask(ip, self.ipv6_prefix));
        Ok(())
    }
}

/// Keeps the first `prefix` bits of an IPv6 address; IPv4 is unchanged.
fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if prefix < 128 => {
            let bits =
                u128::from(v6) & (u128::MAX.checked_shl(u32::from(128 - prefix)).unwrap_or(0));
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        other => other,
    }
}

/// See [`Key::header`].
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        match request.headers.get(&self.name) {
            Some(value) if !value.is_empty() => {
                key.part_bytes(self.name.as_str(), value.as_bytes());
                Ok(())
            }
            _ => Err(NoKey::new("the request lacks the key header")),
        }
    }
}

/// See [`Key::route`].
#[derive(Debug, Clone, Copy)]
pub struct Route;

impl KeyExtractor for Route {
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        let path = request
            .extensions
            .get::<MatchedPath>()
            .ok_or(NoKey::new("no route matched the request"))?;
        key.part_display(
            "route",
            format_args!("{} {}", request.method, path.as_str()),
        );
        Ok(())
    }
}

/// See [`Key::path`].
#[derive(Debug, Clone, Copy)]
pub struct PathKey;

impl KeyExtractor for PathKey {
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        key.part_display(
            "path",
            format_args!("{} {}", request.method, request.uri.path()),
        );
        Ok(())
    }
}

/// See [`Key::extension`].
pub struct ExtensionKey<T> {
    label: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for ExtensionKey<T> {
    fn clone(&self) -> Self {
        ExtensionKey {
            label: self.label,
            _type: PhantomData,
        }
    }
}

impl<T> fmt::Debug for ExtensionKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionKey")
            .field("label", &self.label)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

impl<T: Display + Send + Sync + 'static> KeyExtractor for ExtensionKey<T> {
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        let value = request
            .extensions
            .get::<T>()
            .ok_or(NoKey::new("the request lacks the key extension"))?;
        key.part_display(self.label, value);
        Ok(())
    }
}

/// See [`Key::global`].
#[derive(Debug, Clone, Copy)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        key.push_word("global");
        Ok(())
    }
}

/// See [`Key::from_fn`].
#[derive(Clone)]
pub struct FromFn<F> {
    label: &'static str,
    f: F,
}

impl<F> fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FromFn")
            .field("label", &self.label)
            .finish()
    }
}

impl<F, V> KeyExtractor for FromFn<F>
where
    F: Fn(&RequestHead<'_>) -> Option<V> + Send + Sync + 'static,
    V: Display,
{
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        let value = (self.f)(request).ok_or(NoKey::new("the key function found no key"))?;
        key.part_display(self.label, value);
        Ok(())
    }
}

/// Two keys in one: see [`KeyExtractor::and`].
#[derive(Debug, Clone, Copy)]
pub struct And<A, B>(A, B);

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for And<A, B> {
    fn extract(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Result<(), NoKey> {
        self.0.extract(request, key)?;
        self.1.extract(request, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_keys_count_ipv6_per_64_by_default() {
        let trusted = TrustedProxies::none();
        assert_eq!(Key::peer_ip().ipv6_prefix, 64);
        assert_eq!(Key::client_ip(trusted.clone()).ipv6_prefix, 64);
        assert_eq!(Key::peer_ip().ipv6_prefix(128).ipv6_prefix, 128);
        assert_eq!(Key::client_ip(trusted).ipv6_prefix(200).ipv6_prefix, 128);
    }

    #[test]
    fn ipv6_prefix_masks_the_interface_bits() {
        let ip: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        assert_eq!(mask(ip, 64).to_string(), "2001:db8:1:2::");
        assert_eq!(mask(ip, 0).to_string(), "::");
        assert_eq!(mask(ip, 128), ip);
        let v4 = IpAddr::from([1, 2, 3, 4]);
        assert_eq!(mask(v4, 64), v4);
    }
}
