//! `--trusted-proxies`: the addresses whose forwarding headers are
//! believed.

use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// The networks of the proxies whose `X-Forwarded-For`, `X-Real-IP` and
/// `Forwarded` headers are read. Empty by default: then every client is
/// the peer of its connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
}

/// A `--trusted-proxies` item that is neither an address nor a CIDR.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IP address or a CIDR network (e.g. 10.0.0.0/8, 127.0.0.1, ::1/128)")]
pub struct TrustedProxiesError(String);

impl TrustedProxies {
    /// Trusts `networks`.
    pub fn new(networks: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies { networks }
    }

    /// True when `ip` (an IPv4-mapped IPv6 address as its IPv4 one) is in
    /// one of the networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.networks.iter().any(|net| net.contains(&ip))
    }

    /// True when no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }
}

/// One network: `10.0.0.0/8`, or a bare address as its own network.
pub fn parse_network(text: &str) -> Result<IpNet, TrustedProxiesError> {
    let text = text.trim();
    IpNet::from_str(text)
        .or_else(|_| IpAddr::from_str(text).map(IpNet::from))
        .map(|net| net.trunc())
        .map_err(|_| TrustedProxiesError(text.chars().take(64).collect()))
}

impl FromStr for TrustedProxies {
    type Err = TrustedProxiesError;

    /// A comma-separated list of networks.
    fn from_str(text: &str) -> Result<TrustedProxies, TrustedProxiesError> {
        let networks = text
            .split(',')
            .filter(|item| !item.trim().is_empty())
            .map(parse_network)
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies { networks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_and_bare_addresses_are_trusted_and_nothing_else() {
        let trusted: TrustedProxies = "10.0.0.0/8, 127.0.0.1,::1".parse().unwrap();
        for ip in ["10.1.2.3", "127.0.0.1", "::1", "::ffff:10.9.9.9"] {
            assert!(trusted.contains(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["11.0.0.1", "127.0.0.2", "::2", "2001:db8::1"] {
            assert!(!trusted.contains(ip.parse().unwrap()), "{ip}");
        }
        assert!(TrustedProxies::default().is_empty());
        assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
        assert!("proxy.local".parse::<TrustedProxies>().is_err());
    }
}
