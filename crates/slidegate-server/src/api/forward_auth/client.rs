//! Who the client of a forwarded request is.
//!
//! The peer of the connection is the client, unless it is a trusted proxy
//! (`--trusted-proxies`); then, in this order:
//!
//! 1. `X-Forwarded-For`: read from the right, the first address that is
//!    not a trusted proxy (each proxy appends the address it saw, so
//!    everything left of that one was written by the client and is never
//!    read); the leftmost when every one is trusted;
//! 2. `X-Real-IP`;
//! 3. `Forwarded: for=` (RFC 7239), read from the right as
//!    `X-Forwarded-For`;
//! 4. the peer.
//!
//! A forwarding header that a trusted proxy sent and that does not parse
//! is an error (the proxy is misconfigured), never a guess.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::HeaderMap;

use super::trusted::TrustedProxies;

/// A forwarding header of a trusted proxy that names no address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{header} has {what}, which is not an IP address")]
pub struct ForwardedError {
    /// The header's name.
    pub header: &'static str,
    /// What it holds, shortened.
    pub what: String,
}

/// The client of a forwarded request: its address as decided, and the
/// text that is its descriptor value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

impl ClientAddress {
    /// The client of a request from `peer` with `headers`.
    pub fn of(
        peer: IpAddr,
        headers: &HeaderMap,
        trusted: &TrustedProxies,
    ) -> Result<ClientAddress, ForwardedError> {
        let peer = peer.to_canonical();
        if !trusted.contains(peer) {
            return Ok(ClientAddress(peer));
        }
        let forwarded_for = values(headers, "x-forwarded-for");
        if forwarded_for.iter().any(|v| !v.trim().is_empty()) {
            let nodes = forwarded_for.iter().flat_map(|v| v.split(','));
            return rightmost_untrusted(nodes, trusted, "X-Forwarded-For").map(ClientAddress);
        }
        if let Some(real) = values(headers, "x-real-ip")
            .into_iter()
            .rfind(|v| !v.trim().is_empty())
        {
            return parse_node(&real)
                .map(ClientAddress)
                .ok_or_else(|| invalid("X-Real-IP", &real));
        }
        let forwarded = values(headers, "forwarded");
        let nodes: Vec<&str> = forwarded
            .iter()
            .flat_map(|v| v.split(','))
            .filter_map(for_parameter)
            .collect();
        if !nodes.is_empty() {
            return rightmost_untrusted(nodes.into_iter(), trusted, "Forwarded").map(ClientAddress);
        }
        Ok(ClientAddress(peer))
    }

    /// The value of the `remote_address` descriptor: the IPv4 address, or
    /// the /64 of an IPv6 one (`2001:db8:1:2::/64`), which one client
    /// usually holds whole and could otherwise walk through.
    pub fn descriptor_value(self) -> String {
        match self.0 {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => {
                let network = Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX));
                format!("{network}/64")
            }
        }
    }
}

/// Every value of the header `name`, as text (bytes that are not UTF-8
/// replaced: they cannot make an address).
fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

/// The first node from the right that is not a trusted proxy, or the
/// leftmost when all are.
fn rightmost_untrusted<'a>(
    nodes: impl DoubleEndedIterator<Item = &'a str>,
    trusted: &TrustedProxies,
    header: &'static str,
) -> Result<IpAddr, ForwardedError> {
    let mut leftmost = None;
    for node in nodes.rev() {
        if node.trim().is_empty() {
            continue;
        }
        let ip = parse_node(node).ok_or_else(|| invalid(header, node))?;
        if !trusted.contains(ip) {
            return Ok(ip);
        }
        leftmost = Some(ip);
    }
    leftmost.ok_or_else(|| invalid(header, ""))
}

/// The `for=` value of one `Forwarded` element, if it has one.
fn for_parameter(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })
}

/// An address as forwarding headers write it: `192.0.2.1`,
/// `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`, quoted or not.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port_ok = after.is_empty()
            || after
                .strip_prefix(':')
                .is_some_and(|port| port.parse::<u16>().is_ok());
        return port_ok
            .then(|| inside.parse::<Ipv6Addr>().ok())
            .flatten()
            .map(|ip| IpAddr::V6(ip).to_canonical());
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn invalid(header: &'static str, text: &str) -> ForwardedError {
    let text = text.trim();
    let what = if text.is_empty() {
        "no address".to_owned()
    } else if text.len() <= 64 && text.bytes().all(|b| b.is_ascii_graphic()) {
        format!("{text:?}")
    } else {
        format!("a value of {} bytes", text.len())
    };
    ForwardedError { header, what }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn client(peer: &str, pairs: &[(&'static str, &str)]) -> Result<String, ForwardedError> {
        let trusted: TrustedProxies = "127.0.0.1,10.0.0.0/8".parse().unwrap();
        ClientAddress::of(peer.parse().unwrap(), &headers(pairs), &trusted)
            .map(|c| c.descriptor_value())
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let spoofed = [
            ("x-forwarded-for", "1.2.3.4"),
            ("x-real-ip", "1.2.3.4"),
            ("forwarded", "for=1.2.3.4"),
        ];
        assert_eq!(client("192.0.2.7", &spoofed).unwrap(), "192.0.2.7");
    }

    #[test]
    fn the_rightmost_untrusted_forwarded_address_is_the_client() {
        // The client wrote 6.6.6.6; the proxies appended what they saw.
        let xff = [("x-forwarded-for", "6.6.6.6, 192.0.2.7, 10.0.0.2")];
        assert_eq!(client("127.0.0.1", &xff).unwrap(), "192.0.2.7");
        let split = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "192.0.2.8:5555,10.0.0.2"),
        ];
        assert_eq!(client("127.0.0.1", &split).unwrap(), "192.0.2.8");
        let all_trusted = [("x-forwarded-for", "10.0.0.9, 10.0.0.2")];
        assert_eq!(client("127.0.0.1", &all_trusted).unwrap(), "10.0.0.9");
    }

    #[test]
    fn x_real_ip_then_forwarded_then_the_peer() {
        let both = [("x-real-ip", "192.0.2.1"), ("forwarded", "for=192.0.2.2")];
        assert_eq!(client("127.0.0.1", &both).unwrap(), "192.0.2.1");
        let forwarded = [(
            "forwarded",
            r#"for=6.6.6.6;proto=http, For="[2001:db8:1:2::17]:4711";by=10.0.0.1, for=10.0.0.3"#,
        )];
        assert_eq!(
            client("127.0.0.1", &forwarded).unwrap(),
            "2001:db8:1:2::/64"
        );
        assert_eq!(client("127.0.0.1", &[]).unwrap(), "127.0.0.1");
        assert_eq!(
            client("::ffff:127.0.0.1", &[("x-real-ip", "192.0.2.1")]).unwrap(),
            "192.0.2.1"
        );
    }

    #[test]
    fn a_forwarding_header_that_names_no_address_is_an_error() {
        for pairs in [
            [("x-forwarded-for", "192.0.2.1, proxy.internal")],
            [("x-forwarded-for", " , ")],
            [("x-real-ip", "nobody")],
            [("forwarded", "for=unknown")],
            [("forwarded", "for=\"[2001:db8::1]:99999\"")],
        ] {
            let error = client("127.0.0.1", &pairs).unwrap_err();
            assert!(error.to_string().contains("not an IP address"), "{error}");
        }
    }

    #[test]
    fn an_ipv6_client_counts_as_its_64() {
        let a = client("127.0.0.1", &[("x-real-ip", "2001:db8:1:2:aaaa::1")]).unwrap();
        let b = client("127.0.0.1", &[("x-real-ip", "2001:db8:1:2:bbbb::2")]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, "2001:db8:1:2::/64");
    }
}
