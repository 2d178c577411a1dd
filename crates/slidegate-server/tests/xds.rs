//! Rules over xDS, with the built binary and a control plane written here
//! (a tonic ADS server on a free port, state of the world): the first
//! config is put in force and ACKed, an update changes a limit under load
//! without one failed request, a bad config is NACKed with its error while
//! the rules in force stay, and a control plane that goes away and comes
//! back is followed again, the last good rules kept meanwhile.

mod common;
#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use http::StatusCode;
use process::Slidegate;
use prost::Message;
use serde_json::json;
use slidegate_server::rules::xds::proto::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit, TYPE_URL,
};
use tokio::sync::{mpsc, watch};
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// How long the server may take to act on the control plane.
const WITHIN: Duration = Duration::from_secs(10);

/// The control plane's state of the world: a version and its configs.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    version: String,
    configs: Vec<RateLimitConfig>,
}

/// The ADS service: every stream gets the snapshot in force, then each
/// new one; every request a client sends is kept for the test to read.
#[derive(Clone)]
struct Ads {
    snapshot: watch::Receiver<Snapshot>,
    requests: Arc<Mutex<Vec<DiscoveryRequest>>>,
    /// The `authorization` metadata of each stream.
    authorizations: Arc<Mutex<Vec<String>>>,
    nonces: Arc<AtomicU64>,
    stopping: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        self.authorizations.lock().unwrap().push(authorization);
        let mut incoming = request.into_inner();
        let (send, receive) = mpsc::channel(16);
        let ads = self.clone();
        tokio::spawn(async move {
            let mut snapshot = ads.snapshot.clone();
            let mut stopping = ads.stopping.clone();
            // A client subscribes first; only then does it get configs.
            let Ok(Some(first)) = incoming.message().await else {
                return;
            };
            ads.requests.lock().unwrap().push(first);
            let requests = Arc::clone(&ads.requests);
            let reader = tokio::spawn(async move {
                while let Ok(Some(request)) = incoming.message().await {
                    requests.lock().unwrap().push(request);
                }
            });
            snapshot.mark_changed();
            loop {
                tokio::select! {
                    changed = snapshot.changed() => if changed.is_err() { break },
                    _ = stopping.changed() => break,
                }
                let current = snapshot.borrow_and_update().clone();
                if current.version.is_empty() {
                    continue;
                }
                let nonce = ads.nonces.fetch_add(1, Ordering::Relaxed);
                let response = DiscoveryResponse {
                    version_info: current.version.clone(),
                    resources: current
                        .configs
                        .iter()
                        .map(|config| Any {
                            type_url: TYPE_URL.to_owned(),
                            value: config.encode_to_vec(),
                        })
                        .collect(),
                    type_url: TYPE_URL.to_owned(),
                    nonce: format!("{}-{nonce}", current.version),
                    ..DiscoveryResponse::default()
                };
                if send.send(Ok(response)).await.is_err() {
                    break;
                }
            }
            // Dropping `send` ends the stream, so the server can stop.
            reader.abort();
        });
        Ok(Response::new(ReceiverStream::new(receive)))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}

/// A control plane serving on `addr` until stopped.
struct ControlPlane {
    addr: SocketAddr,
    snapshot: watch::Sender<Snapshot>,
    requests: Arc<Mutex<Vec<DiscoveryRequest>>>,
    authorizations: Arc<Mutex<Vec<String>>>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ControlPlane {
    async fn start(addr: SocketAddr, first: Snapshot) -> ControlPlane {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("the control plane's port is free");
        let addr = listener.local_addr().expect("a local address");
        let (snapshot, receiver) = watch::channel(first);
        let (stop, stopping) = watch::channel(false);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let ads = Ads {
            snapshot: receiver,
            requests: Arc::clone(&requests),
            authorizations: Arc::clone(&authorizations),
            nonces: Arc::new(AtomicU64::new(1)),
            stopping: stopping.clone(),
        };
        let mut stopped = stopping;
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(AggregatedDiscoveryServiceServer::new(ads))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async move {
                        let _ = stopped.changed().await;
                    },
                )
                .await
                .expect("the control plane serves");
        });
        ControlPlane {
            addr,
            snapshot,
            requests,
            authorizations,
            stop,
            task,
        }
    }

    fn publish(&self, version: &str, configs: Vec<RateLimitConfig>) {
        self.snapshot.send_replace(Snapshot {
            version: version.to_owned(),
            configs,
        });
    }

    /// The request answering the response of `version`, once it came.
    async fn answer_to(&self, version: &str) -> DiscoveryRequest {
        let prefix = format!("{version}-");
        let start = Instant::now();
        loop {
            let found = self
                .requests
                .lock()
                .unwrap()
                .iter()
                .find(|r| r.response_nonce.starts_with(&prefix))
                .cloned();
            if let Some(request) = found {
                return request;
            }
            assert!(
                start.elapsed() < WITHIN,
                "no answer to version {version}; requests: {:?}",
                self.requests.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn requests(&self) -> Vec<DiscoveryRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Stops serving, ending every stream, and frees the port.
    async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(WITHIN, self.task)
            .await
            .expect("the control plane stops")
            .expect("its task ends");
    }
}

fn limit(unit: RateLimitUnit, requests_per_unit: u32) -> Option<RateLimitPolicy> {
    Some(RateLimitPolicy {
        unit: unit as i32,
        requests_per_unit,
        ..RateLimitPolicy::default()
    })
}

fn tenant(value: &str, rate_limit: Option<RateLimitPolicy>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: "tenant".into(),
        value: value.into(),
        rate_limit,
        ..RateLimitDescriptor::default()
    }
}

/// The domain `apps` with `probe` at `probe` a minute and `load` at
/// `load` a second.
fn apps(probe: u32, load: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: "apps".into(),
        domain: "apps".into(),
        descriptors: vec![
            tenant("probe", limit(RateLimitUnit::Minute, probe)),
            tenant("load", limit(RateLimitUnit::Second, load)),
        ],
    }
}

/// `POST /v1/check` for `tenant=value` in `domain`: its status, overall
/// code, and the requests per unit of the limit that decided it, if any.
async fn check(server: SocketAddr, domain: &str, value: &str) -> (StatusCode, String, Option<u64>) {
    let body = json!({
        "domain": domain,
        "descriptors": [{"entries": [{"key": "tenant", "value": value}]}],
    });
    let reply = common::request_to(
        server,
        http::Method::POST,
        "/v1/check",
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await;
    let json = reply.json();
    let code = json["overallCode"].as_str().unwrap_or_default().to_owned();
    let limit = json["statuses"][0]["currentLimit"]["requestsPerUnit"].as_u64();
    (reply.status, code, limit)
}

/// How many of `tries` checks of `tenant=value` pass before the first
/// refusal.
async fn passes(server: SocketAddr, domain: &str, value: &str, tries: usize) -> usize {
    for n in 0..tries {
        let (status, code, _) = check(server, domain, value).await;
        if code == "OVER_LIMIT" {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
            return n;
        }
        assert_eq!((status, code.as_str()), (StatusCode::OK, "OK"));
    }
    tries
}

/// A rules file with the domain `files`.
fn files_config(dir: &std::path::Path) -> String {
    let path = dir.join("files.yaml");
    std::fs::write(
        &path,
        "domain: files\ndescriptors:\n  - key: tenant\n    value: probe\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n",
    )
    .expect("write the rules file");
    path.display().to_string()
}

fn start_server(control_plane: SocketAddr, config: &str) -> Slidegate {
    Slidegate::start(&[
        "--config",
        config,
        "--xds-server",
        &format!("http://{control_plane}"),
        "--xds-node-id",
        "test-node",
        "--xds-cluster",
        "test-cluster",
        "--xds-backoff-initial",
        "100ms",
        "--xds-backoff-max",
        "400ms",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_follow_the_control_plane_acked_nacked_and_kept_while_it_is_away() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = files_config(dir.path());
    let plane = ControlPlane::start(
        "127.0.0.1:0".parse().unwrap(),
        Snapshot {
            version: "v1".into(),
            configs: vec![apps(3, 1_000_000)],
        },
    )
    .await;
    let server = start_server(plane.addr, &config);

    // The initial config: subscribed as this node, put in force, ACKed.
    let ack = plane.answer_to("v1").await;
    assert_eq!(
        ack.version_info, "v1",
        "an ACK carries the version: {ack:?}"
    );
    assert_eq!(ack.error_detail, None, "{ack:?}");
    let subscription = &plane.requests()[0];
    assert_eq!(subscription.type_url, TYPE_URL);
    let node = subscription.node.as_ref().expect("the node is named");
    assert_eq!(
        (node.id.as_str(), node.cluster.as_str()),
        ("test-node", "test-cluster")
    );
    assert_eq!(passes(server.http, "apps", "probe", 10).await, 3);
    let config = common::get(server.http, "/v1/config").await;
    let shown = String::from_utf8_lossy(&config.body).into_owned();
    assert!(
        shown.contains("xds:apps") && shown.contains("files.yaml"),
        "/v1/config names each domain's source: {shown}"
    );
    assert_eq!(
        passes(server.http, "files", "probe", 10).await,
        2,
        "the files' rules stand beside"
    );

    // An update that changes limits under load: no request fails.
    let failures = Arc::new(Mutex::new(Vec::new()));
    let running = Arc::new(AtomicBool::new(true));
    let answered = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let load = {
        let (failures, running, answered, seen) = (
            Arc::clone(&failures),
            Arc::clone(&running),
            Arc::clone(&answered),
            Arc::clone(&seen),
        );
        let http = server.http;
        tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                // Decided by the old limit or the new one, never by none.
                let answer = check(http, "apps", "load").await;
                match answer {
                    (StatusCode::OK, code, Some(limit)) if code == "OK" => {
                        seen.lock().unwrap().insert(limit);
                    }
                    _ => failures.lock().unwrap().push(answer),
                }
                answered.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Enough answers on each side of the update, however loaded the
    // machine.
    let at_least = |n: u64| {
        let answered = Arc::clone(&answered);
        async move {
            let start = Instant::now();
            while answered.load(Ordering::Relaxed) < n {
                assert!(start.elapsed() < WITHIN, "the load is stuck");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    at_least(20).await;
    let before = answered.load(Ordering::Relaxed);
    plane.publish("v2", vec![apps(6, 2_000_000)]);
    let ack = plane.answer_to("v2").await;
    assert_eq!(
        (ack.version_info.as_str(), ack.error_detail.as_ref()),
        ("v2", None)
    );
    at_least(answered.load(Ordering::Relaxed) + 20).await;
    running.store(false, Ordering::Relaxed);
    load.await.expect("the load runs");
    let during = answered.load(Ordering::Relaxed) - before;
    assert!(during > 0, "the load went on through the update");
    assert_eq!(
        *failures.lock().unwrap(),
        [],
        "no request failed across the update"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [1_000_000, 2_000_000].into(),
        "the load was decided by the old limit, then the new one"
    );
    // The probe's new limit is in force, and what the probe used under
    // the old one (3 of 3 a minute) still counts: 3 of 6 left.
    assert_eq!(passes(server.http, "apps", "probe", 10).await, 3);

    // A bad config: NACKed with the validation error, the rules stay.
    let mut bad = apps(100, 100);
    bad.descriptors[0].rate_limit = Some(RateLimitPolicy {
        unit: 42,
        requests_per_unit: 100,
        ..RateLimitPolicy::default()
    });
    plane.publish("v3", vec![bad]);
    let nack = plane.answer_to("v3").await;
    assert_eq!(
        nack.version_info, "v2",
        "a NACK names the version in force: {nack:?}"
    );
    let error = nack.error_detail.expect("a NACK carries the error");
    assert_eq!(error.code, 3, "INVALID_ARGUMENT");
    assert!(
        error.message.contains("xds:apps") && error.message.contains("42"),
        "the error names the resource and the bad unit: {}",
        error.message
    );
    assert_eq!(
        passes(server.http, "apps", "probe", 10).await,
        0,
        "v2's limit of 6 still in force"
    );

    // A domain a file defines is refused too.
    let mut clash = apps(100, 100);
    clash.name = "clash".into();
    clash.domain = "files".into();
    plane.publish("v4", vec![apps(6, 2_000_000), clash]);
    let nack = plane.answer_to("v4").await;
    let error = nack.error_detail.expect("a NACK for a domain of the files");
    assert!(error.message.contains("files"), "{}", error.message);
    assert_eq!(nack.version_info, "v2");
    assert_eq!(
        passes(server.http, "files", "probe", 10).await,
        0,
        "the file's limit of 2 still in force"
    );

    // The metrics say so: connected, two updates refused, each described.
    let metrics = common::get(server.http, "/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics.body).into_owned();
    let value = |series: &str| -> Option<f64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    };
    assert_eq!(value("slidegate_xds_connected"), Some(1.0), "{metrics}");
    assert_eq!(
        value("slidegate_xds_updates_total{result=\"nack\"}"),
        Some(2.0),
        "{metrics}"
    );
    assert!(value("slidegate_xds_updates_total{result=\"ack\"}").is_some_and(|acks| acks >= 2.0));
    for family in ["slidegate_xds_connected", "slidegate_xds_updates_total"] {
        assert!(
            metrics.contains(&format!("# HELP {family} ")),
            "{family} has a HELP line"
        );
    }

    // The control plane goes away: the rules in force stay.
    let addr = plane.addr;
    plane.stop().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(check(server.http, "apps", "probe").await.1, "OVER_LIMIT");
    assert_eq!(
        check(server.http, "apps", "load").await,
        (StatusCode::OK, "OK".to_owned(), Some(2_000_000))
    );

    // It comes back on the same address: the server subscribes again,
    // naming the version it holds, and follows the new state.
    let plane = ControlPlane::start(
        addr,
        Snapshot {
            version: "v5".into(),
            configs: vec![apps(20, 2_000_000)],
        },
    )
    .await;
    let ack = plane.answer_to("v5").await;
    assert_eq!(
        (ack.version_info.as_str(), ack.error_detail.as_ref()),
        ("v5", None)
    );
    assert_eq!(
        plane.requests()[0].version_info,
        "v2",
        "the version held is sent again"
    );
    // 20 a minute now, of which the probe used 6 under v2's 6.
    assert_eq!(passes(server.http, "apps", "probe", 30).await, 14);
    assert!(server.panics().is_empty(), "{:?}", server.panics());
    plane.stop().await;
}

/// envoyproxy/ratelimit's settings, unchanged, subscribe a server with no
/// rule file: `CONFIG_TYPE=GRPC_XDS_SOTW` and the `CONFIG_GRPC_XDS_*`
/// variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoyproxy_ratelimits_environment_subscribes_a_server_without_files() {
    // A control plane with nothing to send yet.
    let plane = ControlPlane::start("127.0.0.1:0".parse().unwrap(), Snapshot::default()).await;
    let url = plane.addr.to_string();
    let server = Slidegate::start_with_env(
        &[],
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &url),
            ("CONFIG_GRPC_XDS_NODE_ID", "gateway-ratelimit"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone:a,tier=gold"),
            (
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                "authorization:Bearer t0k",
            ),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms"),
        ],
    );
    // Not ready until its rules come: no traffic to a server whose limits
    // are unknown.
    let start = Instant::now();
    while plane.requests().is_empty() {
        assert!(start.elapsed() < WITHIN, "the server never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = common::get(server.http, "/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.json()["error"]["code"], "rules_pending");
    plane.publish("e1", vec![apps(2, 1_000)]);
    let ack = plane.answer_to("e1").await;
    assert_eq!(
        (ack.version_info.as_str(), ack.error_detail.as_ref()),
        ("e1", None)
    );
    assert_eq!(
        common::get(server.http, "/readyz").await.status,
        StatusCode::OK
    );
    let node = plane.requests()[0].node.clone().expect("the node is named");
    assert_eq!(node.id, "gateway-ratelimit");
    let metadata = node.metadata.expect("the node's metadata");
    let field = |name: &str| match metadata.fields.get(name).and_then(|v| v.kind.clone()) {
        Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(s)) => s,
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!((field("zone"), field("tier")), ("a".into(), "gold".into()));
    assert_eq!(*plane.authorizations.lock().unwrap(), ["Bearer t0k"]);
    assert_eq!(passes(server.http, "apps", "probe", 10).await, 2);
    plane.stop().await;
}
