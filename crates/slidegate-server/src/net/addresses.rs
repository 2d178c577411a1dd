//! The connections open per client address, for the cap on one
//! address's connections (`--max-connections-per-ip`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

/// The connections open per client address, at most `max` each. At most
/// one entry per open connection: an address leaves with its last one.
#[derive(Debug)]
pub(super) struct Addresses {
    pub(super) max: usize,
    pub(super) open: Mutex<HashMap<IpAddr, usize>>,
}

impl Addresses {
    /// A place for one more connection of `ip`, if its address has room.
    pub(super) fn admit(this: &Arc<Addresses>, ip: IpAddr) -> Option<AddressSlot> {
        let address = client_address(ip);
        let mut open = this.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if *count >= this.max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            addresses: Arc::clone(this),
            address,
        })
    }
}

/// What counts as one client: an IPv4 address (an IPv4-mapped IPv6 one
/// too), or the /64 of an IPv6 address (a client is given a whole /64, and
/// would otherwise have 2^64 addresses to spread its connections over).
fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

/// One connection's place in its address's count, given back on drop.
#[derive(Debug)]
pub(super) struct AddressSlot {
    addresses: Arc<Addresses>,
    address: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self
            .addresses
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_counts_as_its_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            client_address(ip("2001:db8:1:2:aaaa::1")),
            client_address(ip("2001:db8:1:2:bbbb::2"))
        );
        assert_ne!(
            client_address(ip("2001:db8:1:2::1")),
            client_address(ip("2001:db8:1:3::1"))
        );
        assert_eq!(client_address(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        assert_ne!(
            client_address(ip("10.0.0.1")),
            client_address(ip("10.0.0.2"))
        );
    }

    #[test]
    fn an_address_holds_at_most_its_cap_and_gives_places_back() {
        let addresses = Arc::new(Addresses {
            max: 2,
            open: Mutex::new(HashMap::new()),
        });
        let ip = "10.0.0.1".parse().unwrap();
        let first = Addresses::admit(&addresses, ip).unwrap();
        let _second = Addresses::admit(&addresses, ip).unwrap();
        assert!(Addresses::admit(&addresses, ip).is_none());
        assert!(Addresses::admit(&addresses, "10.0.0.2".parse().unwrap()).is_some());
        drop(first);
        assert!(Addresses::admit(&addresses, ip).is_some());
        drop(_second);
        assert!(
            addresses.open.lock().unwrap().is_empty(),
            "an address leaves with its last connection"
        );
    }
}
