//! A real server on a loopback port, and two real clients: hyper for
//! well-formed requests, a raw socket for anything hyper would refuse to send.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use slidegate::store::resilient::FailurePolicy;
use slidegate::{MemoryStore, Store};
use slidegate_server::api::http::service;
use slidegate_server::commands::parts::Parts;
use slidegate_server::store::{Backend, StoreUrl};
use slidegate_server::store::{ClockMode, CoalesceMode, StoreOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub mod redis;

/// How long any test waits for an answer before failing.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The store a test's server decides with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `--store memory`
    Memory,
    /// `--store redis://…` on a fresh redis-server of the test's own.
    Redis,
}

/// A store opened as `slidegate serve --store …` opens it, and the
/// redis-server behind it, stopped on drop.
pub struct TestStore {
    pub backend: Backend,
    pub redis: Option<redis::Redis>,
}

impl StoreKind {
    /// Opens the store. A Redis store fails closed (`--on-store-error
    /// deny`) with a generous deadline, so a test that expects an
    /// admission can never pass on a decision the store did not make.
    pub async fn open(self) -> TestStore {
        let redis = match self {
            StoreKind::Memory => None,
            StoreKind::Redis => Some(redis::Redis::start()),
        };
        let backend = TestStore::backend_on(redis.as_ref()).await;
        TestStore { backend, redis }
    }
}

impl TestStore {
    /// A fresh backend on the same Redis after `FLUSHALL` (or a fresh
    /// memory store): no counter survives from earlier steps.
    pub async fn fresh(&self) -> Backend {
        if let Some(redis) = &self.redis {
            redis.text(&["FLUSHALL"]);
        }
        TestStore::backend_on(self.redis.as_ref()).await
    }

    async fn backend_on(redis: Option<&redis::Redis>) -> Backend {
        let url = match redis {
            None => StoreUrl::Memory,
            Some(redis) => StoreUrl::Redis(redis.url()),
        };
        backend(url, FailurePolicy::Deny, 5_000).await
    }
}

/// The backend `slidegate serve --store URL --on-store-error POLICY
/// --store-timeout-ms TIMEOUT_MS` decides with.
pub async fn backend(url: StoreUrl, policy: FailurePolicy, timeout_ms: u64) -> Backend {
    let args = StoreOptions {
        url,
        on_error: policy,
        timeout_ms,
        clock: ClockMode::Server,
        coalesce: CoalesceMode::On,
        expiry_margin_ms: None,
        max_keys: 1_000_000,
        max_memory_bytes: slidegate::store::memory::DEFAULT_MAX_BYTES,
        max_rules_per_key: 16,
        deny_cache_entries: 100_000,
        max_store_calls: 1024,
        max_leases: slidegate::store::DEFAULT_MAX_LEASES,
    };
    Backend::connect(&args).await.expect("the store opens")
}

/// Runs each `async fn NAME(kind: StoreKind)` twice, as the tests
/// `NAME::memory` and `NAME::redis`.
#[macro_export]
macro_rules! on_every_store {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                super::$name($crate::common::StoreKind::Memory).await;
            }

            #[tokio::test]
            async fn redis() {
                super::$name($crate::common::StoreKind::Redis).await;
            }
        }
    )+};
}

/// The router served on `127.0.0.1:0`, stopped on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    /// The gRPC listener, when started with [`TestServer::full`].
    pub grpc_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
    /// Kept alive until the server stops (a redis-server, say).
    guards: Vec<Box<dyn Send>>,
}

impl TestServer {
    pub async fn start<S: Store + 'static>(store: S) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let app = service(Parts::new(store).http());
        let task = tokio::spawn(slidegate_server::net::http1::serve(listener, app, async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            grpc_addr: None,
            stop: Some(stop),
            task,
            guards: Vec::new(),
        }
    }

    /// HTTP and gRPC, as `slidegate serve` runs them, made of `parts`.
    pub async fn full<S: Store + 'static>(parts: Parts<S>) -> TestServer {
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, grpc_addr) = (http.local_addr().unwrap(), grpc.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            slidegate_server::commands::serve::serve_both(http, grpc, parts, async {
                let _ = stopped.await;
            })
            .await
            .map_err(std::io::Error::other)
        });
        TestServer {
            addr,
            grpc_addr: Some(grpc_addr),
            stop: Some(stop),
            task,
            guards: Vec::new(),
        }
    }

    pub async fn memory() -> TestServer {
        TestServer::start(MemoryStore::new()).await
    }

    /// The HTTP API on a fresh store of `kind`.
    pub async fn on(kind: StoreKind) -> TestServer {
        let store = kind.open().await;
        TestServer::start(store.backend).await.keeping(store.redis)
    }

    /// Keeps `guard` alive until the server has stopped.
    pub fn keeping(mut self, guard: impl Send + 'static) -> TestServer {
        self.guards.push(Box::new(guard));
        self
    }

    pub async fn post_json(&self, path: &str, body: &str) -> Reply {
        self.request(
            Method::POST,
            path,
            &[("content-type", "application/json")],
            body.as_bytes().to_vec(),
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.request(Method::GET, path, &[], Vec::new()).await
    }

    /// One request on a fresh connection, with hyper's HTTP/1.1 client.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        request_to(self.addr, method, path, headers, body).await
    }

    /// Writes `request` as is on a fresh connection (without closing the
    /// sending side) and reads one response.
    pub async fn raw(&self, request: &[u8]) -> Reply {
        let exchange = async {
            let mut stream = TcpStream::connect(self.addr).await.unwrap();
            stream.write_all(request).await.unwrap();
            read_response(&mut stream).await
        };
        tokio::time::timeout(DEADLINE, exchange)
            .await
            .expect("the server did not answer in time")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// One request to `addr` on a fresh connection, with hyper's HTTP/1.1 client.
pub async fn request_to(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    request_from(None, addr, method, path, headers, body).await
}

/// [`request_to`] from the local address `from` (any of 127.0.0.0/8 on
/// Linux), so that one test can be many clients.
pub async fn request_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let exchange = async {
        let stream = match from {
            None => TcpStream::connect(addr).await.unwrap(),
            Some(ip) => {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind(SocketAddr::new(ip, 0)).unwrap();
                socket.connect(addr).await.unwrap()
            }
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let response = sender.send_request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    };
    tokio::time::timeout(DEADLINE, exchange)
        .await
        .expect("the server did not answer in time")
}

/// `GET path` from `addr`.
pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    request_to(addr, Method::GET, path, &[], Vec::new()).await
}

/// An answer: status, headers, body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The `code` of a JSON error body, after checking the body's shape.
    pub fn error_code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        let json = self.json();
        let error = json["error"].as_object().unwrap_or_else(|| {
            panic!("no error object in {json}");
        });
        assert_eq!(error.len(), 2, "{json}");
        let message = error["message"].as_str().unwrap();
        assert!(!message.is_empty(), "{json}");
        error["code"].as_str().unwrap().to_owned()
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length` body.
pub async fn read_response(stream: &mut TcpStream) -> Reply {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(reply) = parse_response(&buffer) {
            return reply;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(
            n > 0,
            "connection closed before a full response: {:?}",
            String::from_utf8_lossy(&buffer)
        );
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Parses a complete response from `bytes`, or `None` when more are needed.
pub fn parse_response(bytes: &[u8]) -> Option<Reply> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&bytes[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers.append(
            http::HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
            value.trim().parse().unwrap(),
        );
    }
    let length: usize = headers
        .get("content-length")
        .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
    let body = bytes.get(end + 4..end + 4 + length)?;
    Some(Reply {
        status: StatusCode::from_u16(status).unwrap(),
        headers,
        body: Bytes::copy_from_slice(body),
    })
}
