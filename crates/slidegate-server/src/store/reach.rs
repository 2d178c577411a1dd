//! Why a Redis store does not answer: its client reconnects by itself and
//! keeps the cause to itself, so a store that is not ready says only that
//! it "did not answer within 50ms". [`unreachable`] asks the network
//! directly, name then port, and says what an operator can act on
//! (`connection refused`, a name that does not resolve).

use std::time::Duration;

use tokio::net::{TcpStream, lookup_host};

/// How long each node's name and connection may take to answer.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(1);

/// The first of `nodes` (`host:port,host:port`, as a store URL lists them)
/// that cannot be resolved or connected to, and why; `None` when every node
/// takes a connection (the store then fails above TCP: TLS, AUTH, a stall).
pub async fn unreachable(nodes: &str) -> Option<String> {
    for node in nodes.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if let Some(why) = reach(node).await {
            return Some(format!("{node}: {why}"));
        }
    }
    None
}

async fn reach(node: &str) -> Option<String> {
    let addrs = match tokio::time::timeout(REACH_TIMEOUT, lookup_host(node)).await {
        Ok(Ok(addrs)) => addrs.collect::<Vec<_>>(),
        Ok(Err(error)) => return Some(format!("cannot resolve: {error}")),
        Err(_) => return Some(format!("cannot resolve within {REACH_TIMEOUT:?}")),
    };
    let mut last = None;
    for addr in addrs {
        match tokio::time::timeout(REACH_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(_)) => return None,
            // The address only when the node is a name: "127.0.0.1:1:
            // cannot connect to 127.0.0.1:1" says it twice.
            Ok(Err(error)) if addr.to_string() == node => {
                last = Some(format!("cannot connect: {error}"));
            }
            Ok(Err(error)) => last = Some(format!("cannot connect to {addr}: {error}")),
            Err(_) => {
                last = Some(format!(
                    "{addr} took no connection within {REACH_TIMEOUT:?}"
                ))
            }
        }
    }
    Some(last.unwrap_or_else(|| "resolves to no address".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_refused_and_an_open_one_is_reachable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        assert_eq!(unreachable(&open).await, None);
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let why = unreachable(&format!("{open},{closed}")).await.unwrap();
        assert!(
            why.starts_with(&format!("{closed}: cannot connect")),
            "{why}"
        );
        assert!(why.to_lowercase().contains("refused"), "{why}");
    }
}
