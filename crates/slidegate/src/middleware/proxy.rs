//! The client address behind reverse proxies, without trusting clients.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};

/// The header trusted proxies use to pass on the client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, HAProxy, cloud
    /// load balancers). The default.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for="[2001:db8::1]:4711"` (RFC 7239).
    Forwarded,
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// A CIDR range that is not one: see [`TrustedProxies::new`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid proxy range {0:?}: expected an address or a CIDR range such as 10.0.0.0/8 or fd00::/8"
)]
pub struct InvalidProxyRange(pub String);

/// The address ranges of the reverse proxies whose forwarding headers are
/// believed. Empty by default: then no header is believed.
///
/// List only addresses that proxies, never clients, connect from. If
/// clients share a range with the proxies (say everything in 10.0.0.0/8),
/// a client in that range can name any address in the header and choose
/// its own key.
///
/// ```
/// use slidegate::middleware::TrustedProxies;
/// let proxies = TrustedProxies::new(["10.0.0.0/8", "192.168.1.1", "fd00::/8"])?;
/// assert!(proxies.contains("10.1.2.3".parse().unwrap()));
/// assert!(proxies.contains("::ffff:10.1.2.3".parse().unwrap()));
/// assert!(!proxies.contains("192.168.1.2".parse().unwrap()));
/// # Ok::<(), slidegate::middleware::InvalidProxyRange>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<IpRange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IpRange {
    network: IpAddr,
    prefix: u8,
}

impl TrustedProxies {
    /// The proxies in `ranges`: addresses (`192.0.2.1`, `::1`) or CIDR
    /// ranges (`10.0.0.0/8`, `fd00::/8`).
    pub fn new<I, S>(ranges: I) -> Result<TrustedProxies, InvalidProxyRange>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let ranges = ranges
            .into_iter()
            .map(|range| IpRange::parse(range.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies { ranges })
    }

    /// No trusted proxy: forwarding headers are never believed.
    pub fn none() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// True when `ip` is in one of the ranges (IPv4-mapped IPv6 addresses
    /// count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.ranges.iter().any(|range| range.contains(ip))
    }
}

impl IpRange {
    fn parse(text: &str) -> Result<IpRange, InvalidProxyRange> {
        let invalid = || InvalidProxyRange(text.to_owned());
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text.trim(), None),
        };
        let network = IpAddr::from_str(addr)
            .map_err(|_| invalid())?
            .to_canonical();
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix.parse::<u8>().map_err(|_| invalid())?,
            None => max,
        };
        if prefix > max {
            return Err(invalid());
        }
        Ok(IpRange { network, prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The client address of a request from `peer`.
///
/// An untrusted peer is the client. From a trusted one, the forwarding
/// header is walked from the right (the entry the nearest proxy wrote)
/// to the left: trusted hops are skipped and the first untrusted address
/// is the client. An entry that is not an address (`unknown`, an
/// obfuscated name, garbage) stops the walk at the last address found,
/// so a header can never name an address that no trusted hop vouched for.
pub(crate) fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &TrustedProxies,
    header: ProxyHeader,
) -> IpAddr {
    if !trusted.contains(peer) {
        return peer;
    }
    let mut client = peer;
    let mut visit = |entry: &str| match parse_node(entry) {
        Some(ip) => {
            client = ip;
            trusted.contains(ip)
        }
        None => false,
    };
    match header {
        ProxyHeader::XForwardedFor => {
            'walk: for value in headers.get_all(X_FORWARDED_FOR).iter().rev() {
                let Ok(value) = value.to_str() else { break };
                for entry in value.rsplit(',') {
                    if !visit(entry) {
                        break 'walk;
                    }
                }
            }
        }
        ProxyHeader::Forwarded => {
            'walk: for value in headers.get_all(FORWARDED).iter().rev() {
                let Ok(value) = value.to_str() else { break };
                for element in split_unquoted(value, ',').into_iter().rev() {
                    let Some(node) = forwarded_for(element) else {
                        break 'walk;
                    };
                    if !visit(node) {
                        break 'walk;
                    }
                }
            }
        }
    }
    client
}

/// An address written as `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:4711`, quoted or not.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if let Ok(ip) = IpAddr::from_str(text) {
        return Some(ip.to_canonical());
    }
    if let Ok(addr) = SocketAddr::from_str(text) {
        return Some(addr.ip().to_canonical());
    }
    let inner = text.strip_prefix('[')?.strip_suffix(']')?;
    IpAddr::from_str(inner).ok().map(|ip| ip.to_canonical())
}

/// The `for=` value of one `Forwarded` element (`for=192.0.2.60;proto=http`).
fn forwarded_for(element: &str) -> Option<&str> {
    split_unquoted(element, ';').into_iter().find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim().eq_ignore_ascii_case("for").then_some(value)
    })
}

/// Splits on `separator` outside quoted strings (RFC 7230 `quoted-string`,
/// with backslash escapes), so a quoted value cannot forge elements.
fn split_unquoted(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == separator && !quoted {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn headers(name: HeaderName, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn trusted() -> TrustedProxies {
        TrustedProxies::new(["10.0.0.0/8", "2001:db8:ff::/48"]).unwrap()
    }

    #[test]
    fn ranges_parse_and_match() {
        let t = TrustedProxies::new(["192.0.2.0/24", "2001:db8::/32", "198.51.100.7", "0.0.0.0/0"]);
        assert!(t.is_ok());
        let t = TrustedProxies::new(["192.0.2.0/24", "2001:db8::/32"]).unwrap();
        assert!(t.contains(ip("192.0.2.255")));
        assert!(!t.contains(ip("192.0.3.0")));
        assert!(t.contains(ip("2001:db8:1::1")));
        assert!(!t.contains(ip("2001:db9::1")));
        assert!(t.contains(ip("::ffff:192.0.2.1")));
        for bad in ["", "10.0.0.0/33", "::/129", "10.0.0/8", "x", "10.0.0.0/-1"] {
            assert!(TrustedProxies::new([bad]).is_err(), "{bad}");
        }
        assert!(
            TrustedProxies::new(["0.0.0.0/0"])
                .unwrap()
                .contains(ip("8.8.8.8"))
        );
        assert!(!TrustedProxies::none().contains(ip("127.0.0.1")));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_sends() {
        let h = headers(X_FORWARDED_FOR, &["1.2.3.4"]);
        let peer = ip("203.0.113.9");
        assert_eq!(
            client_ip(peer, &h, &trusted(), ProxyHeader::XForwardedFor),
            peer
        );
    }

    #[test]
    fn the_chain_is_walked_from_the_right_skipping_trusted_hops() {
        let h = headers(
            X_FORWARDED_FOR,
            &["6.6.6.6, 198.51.100.1", "10.0.0.2, 10.0.0.3"],
        );
        let found = client_ip(ip("10.0.0.4"), &h, &trusted(), ProxyHeader::XForwardedFor);
        assert_eq!(found, ip("198.51.100.1"));
    }

    #[test]
    fn only_trusted_hops_leave_the_leftmost_address() {
        let h = headers(X_FORWARDED_FOR, &["10.0.0.1, 10.0.0.2"]);
        let found = client_ip(ip("10.0.0.4"), &h, &trusted(), ProxyHeader::XForwardedFor);
        assert_eq!(found, ip("10.0.0.1"));
    }

    #[test]
    fn garbage_stops_the_walk_at_the_last_address() {
        let h = headers(X_FORWARDED_FOR, &["1.1.1.1, unknown, 10.0.0.2"]);
        let found = client_ip(ip("10.0.0.4"), &h, &trusted(), ProxyHeader::XForwardedFor);
        assert_eq!(found, ip("10.0.0.2"));
        let none = HeaderMap::new();
        assert_eq!(
            client_ip(
                ip("10.0.0.4"),
                &none,
                &trusted(),
                ProxyHeader::XForwardedFor
            ),
            ip("10.0.0.4")
        );
    }

    #[test]
    fn ports_brackets_and_mapped_addresses_are_understood() {
        assert_eq!(parse_node(" 192.0.2.1:8080 "), Some(ip("192.0.2.1")));
        assert_eq!(parse_node("[2001:db8::1]:4711"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("\"[2001:db8::1]\""), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("::ffff:192.0.2.1"), Some(ip("192.0.2.1")));
        assert_eq!(parse_node("_hidden"), None);
    }

    #[test]
    fn forwarded_elements_are_read_for_their_for_parameter() {
        let h = headers(
            FORWARDED,
            &[r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#],
        );
        let trusted = TrustedProxies::new(["2001:db8:cafe::/48", "10.0.0.0/8"]).unwrap();
        let found = client_ip(ip("10.0.0.1"), &h, &trusted, ProxyHeader::Forwarded);
        assert_eq!(found, ip("192.0.2.60"));
        // X-Forwarded-For is not read when Forwarded is the configured header.
        let mut both = h.clone();
        both.insert(X_FORWARDED_FOR, HeaderValue::from_static("7.7.7.7"));
        assert_eq!(
            client_ip(ip("10.0.0.1"), &both, &trusted, ProxyHeader::Forwarded),
            ip("192.0.2.60")
        );
    }

    #[test]
    fn quoted_commas_cannot_forge_forwarded_elements() {
        let h = headers(FORWARDED, &[r#"for="1.1.1.1, for=10.0.0.9", for=10.0.0.8"#]);
        let found = client_ip(ip("10.0.0.1"), &h, &trusted(), ProxyHeader::Forwarded);
        // The quoted value is one (invalid) node: the walk stops at 10.0.0.8.
        assert_eq!(found, ip("10.0.0.8"));
        let no_for = headers(FORWARDED, &["proto=https"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &no_for, &trusted(), ProxyHeader::Forwarded),
            ip("10.0.0.1")
        );
    }
}
