//! Real servers on loopback and a plain HTTP/1.1 client, for the
//! middleware tests.
#![allow(dead_code)]

use slidegate::store::memory::CompactString;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use slidegate::clock::ManualClock;
use slidegate::{Decision, Hit, MemoryStore, Rule, Store};
use tokio::net::{TcpListener, TcpSocket};

/// Serves `app` on 127.0.0.1 with the peer address available to the
/// layer (`ConnectInfo<SocketAddr>`); returns the address.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
    addr
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// The value of a header that appears once.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Every value of a header, joined as a list (`a, b`).
    pub fn list(&self, name: &str) -> String {
        self.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

/// Sends `request` over a new connection from 127.0.0.1.
pub async fn send(addr: SocketAddr, request: Request<Full<Bytes>>) -> Reply {
    send_from([127, 0, 0, 1].into(), addr, request).await
}

/// Sends `request` over a new connection from the local address `from`
/// (on Linux the whole 127.0.0.0/8 is loopback; macOS needs an alias,
/// `ifconfig lo0 alias 127.0.0.2`).
pub async fn send_from(from: IpAddr, addr: SocketAddr, request: Request<Full<Bytes>>) -> Reply {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(from, 0)).expect("bind client");
    let stream = socket.connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let response = sender.send_request(request).await.expect("response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// One HTTP/1.1 connection, kept alive across requests (for load).
pub struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Connection {
    /// Connects to `addr` from 127.0.0.1.
    pub async fn open(addr: SocketAddr) -> Connection {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        Connection { sender }
    }

    /// Sends `request` once the previous response is read.
    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> Reply {
        self.sender
            .ready()
            .await
            .expect("the connection stays open");
        let response = self.sender.send_request(request).await.expect("response");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }
}

/// A request builder with an empty body.
pub fn get(path: &str) -> http::request::Builder {
    Request::get(path).header("host", "test")
}

/// A request builder with an empty body.
pub fn post(path: &str) -> http::request::Builder {
    Request::post(path).header("host", "test")
}

/// Finishes a request without a body.
pub fn empty(builder: http::request::Builder) -> Request<Full<Bytes>> {
    builder.body(Full::new(Bytes::new())).expect("request")
}

/// A memory store on a manual clock: time moves only when told to.
pub fn manual_store() -> (MemoryStore<CompactString, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build();
    (store, clock)
}

/// A memory store that also records the key of every decision, to check
/// what the layer counts a request against.
#[derive(Clone, Default)]
pub struct Recording {
    pub store: MemoryStore,
    pub keys: Arc<Mutex<Vec<String>>>,
}

impl Recording {
    pub fn keys(&self) -> Vec<String> {
        self.keys.lock().expect("lock").clone()
    }
}

impl Store for Recording {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        self.keys.lock().expect("lock").push(key.to_owned());
        Store::acquire(&self.store, key, rules, cost).await
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        Store::acquire_batch(&self.store, hits).await
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        Store::reset(&self.store, key).await
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Ok(())
    }

    fn acquire_now(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
    ) -> Option<slidegate::Result<Decision>> {
        self.keys.lock().expect("lock").push(key.to_owned());
        self.store.acquire_now(key, rules, cost)
    }
}
