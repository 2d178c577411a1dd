//! The ADS client: one state-of-the-world subscription to
//! [`TYPE_URL`] over
//! `envoy.service.discovery.v3.AggregatedDiscoveryService`.
//!
//! Each response is the control plane's whole state: it is decoded,
//! converted and checked by the code that checks config files, then put
//! in force beside the files (`LiveConfig::apply_xds`) and ACKed (the
//! request carries its version and nonce), or refused and NACKed (the
//! version in force, the nonce, and the error in `error_detail`), the
//! rules in force unchanged. A stream that fails or ends is opened again
//! after a backoff (doubled from `--xds-backoff-initial` up to
//! `--xds-backoff-max`, with jitter, back to the start once a response
//! came); meanwhile the last good rules stay in force.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status;
use prost::Message;
use tokio::sync::mpsc;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::super::reload::LiveConfig;
use super::super::yaml::FileSpec;
use super::convert::{source_name, to_spec};
use super::options::{XdsOptions, XdsTls};
use super::proto::{RateLimitConfig, TYPE_URL};

/// `google.rpc.Code.INVALID_ARGUMENT`: what a NACK's status says.
const INVALID_ARGUMENT: i32 = 3;
/// How long connecting to the control plane may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Follows the control plane until the process ends, keeping `live`'s
/// rules in step with it.
pub async fn run(options: XdsOptions, live: Arc<LiveConfig>) {
    let mut session = Session::default();
    let mut backoff = Backoff::new(options.backoff_initial, options.backoff_max);
    loop {
        let answered_before = session.responses;
        match follow(&options, &live, &mut session).await {
            Ok(()) => tracing::warn!(
                server = %options.server,
                "the control plane closed the xDS stream; the rules in force stay"
            ),
            Err(error) => tracing::warn!(
                server = %options.server,
                %error,
                "the xDS stream failed; the rules in force stay"
            ),
        }
        metrics::gauge!("slidegate_xds_connected").set(0.0);
        if session.responses > answered_before {
            backoff.reset();
        }
        let wait = backoff.next();
        tracing::info!(?wait, "reconnecting to the control plane");
        tokio::time::sleep(wait).await;
    }
}

/// What lasts across streams: the version in force (sent again on a new
/// stream, as Envoy does) and how many responses came.
#[derive(Debug, Default)]
struct Session {
    version: String,
    responses: u64,
}

/// One stream, from connecting to its end.
async fn follow(
    options: &XdsOptions,
    live: &LiveConfig,
    session: &mut Session,
) -> anyhow::Result<()> {
    let channel = connect(options).await?;
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(options.max_message_bytes);
    let (send, receive) = mpsc::channel::<DiscoveryRequest>(4);
    send.send(DiscoveryRequest {
        version_info: session.version.clone(),
        node: Some(node(options)),
        type_url: TYPE_URL.to_owned(),
        ..DiscoveryRequest::default()
    })
    .await?;
    let requests = futures_util::stream::unfold(receive, |mut receive| async move {
        receive.recv().await.map(|request| (request, receive))
    });
    let mut request = tonic::Request::new(requests);
    for (key, value) in &options.headers {
        let key = MetadataKey::from_bytes(key.as_bytes())
            .map_err(|_| anyhow::anyhow!("the xDS header name {key:?} is not valid"))?;
        let value = MetadataValue::try_from(value.as_str())
            .map_err(|_| anyhow::anyhow!("the value of the xDS header {key} is not valid"))?;
        request.metadata_mut().insert(key, value);
    }
    let mut responses = client
        .stream_aggregated_resources(request)
        .await?
        .into_inner();
    metrics::gauge!("slidegate_xds_connected").set(1.0);
    tracing::info!(server = %options.server, node = %options.node_id, "subscribed to the control plane");
    while let Some(response) = responses.message().await? {
        session.responses += 1;
        let answer = answer(live, &session.version, response);
        if answer.error_detail.is_none() {
            session.version.clone_from(&answer.version_info);
        }
        send.send(answer).await?;
    }
    Ok(())
}

/// The ACK or NACK of `response`, its rules put in force if good.
fn answer(live: &LiveConfig, in_force: &str, response: DiscoveryResponse) -> DiscoveryRequest {
    let applied = if response.type_url == TYPE_URL {
        decode(&response).and_then(|specs| {
            live.apply_xds(&response.version_info, specs)
                .map_err(|e| e.to_string())
        })
    } else {
        Err(format!(
            "resources of type {:?} were not asked for (only {TYPE_URL})",
            response.type_url
        ))
    };
    let (version_info, error_detail) = match applied {
        Ok(()) => {
            metrics::counter!("slidegate_xds_updates_total", "result" => "ack").increment(1);
            (response.version_info, None)
        }
        Err(message) => {
            metrics::counter!("slidegate_xds_updates_total", "result" => "nack").increment(1);
            tracing::warn!(version = %response.version_info, error = %message, "NACK sent to the control plane");
            let status = Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            };
            (in_force.to_owned(), Some(status))
        }
    };
    DiscoveryRequest {
        version_info,
        type_url: TYPE_URL.to_owned(),
        response_nonce: response.nonce,
        error_detail,
        ..DiscoveryRequest::default()
    }
}

/// Every resource of `response` as a file's spec, named `xds:NAME`.
fn decode(response: &DiscoveryResponse) -> Result<Vec<(String, FileSpec)>, String> {
    response
        .resources
        .iter()
        .map(|any| {
            if any.type_url != TYPE_URL {
                return Err(format!(
                    "a resource of type {:?} in a response of {TYPE_URL}",
                    any.type_url
                ));
            }
            let config = RateLimitConfig::decode(any.value.as_slice())
                .map_err(|e| format!("a resource is not a RateLimitConfig: {e}"))?;
            Ok((source_name(&config), to_spec(&config)))
        })
        .collect()
}

/// This server as the control plane knows it.
fn node(options: &XdsOptions) -> Node {
    let fields = options
        .node_metadata
        .iter()
        .map(|(key, value)| {
            let value = Value {
                kind: Some(Kind::StringValue(value.clone())),
            };
            (key.clone(), value)
        })
        .collect();
    Node {
        id: options.node_id.clone(),
        cluster: options.cluster.clone(),
        metadata: (!options.node_metadata.is_empty()).then_some(Struct { fields }),
        user_agent_name: "slidegate".to_owned(),
        ..Node::default()
    }
}

async fn connect(options: &XdsOptions) -> anyhow::Result<Channel> {
    let (url, tls) = endpoint_url(&options.server, options.tls.as_ref());
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| anyhow::anyhow!("the control plane's address {url:?} is not valid: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls_config(&tls)?)?;
    }
    Ok(endpoint.connect().await?)
}

/// The URL to connect to, and its TLS: `host:port` is `http://` (or
/// `https://` when TLS is asked for), and `https://` always has TLS.
fn endpoint_url(server: &str, tls: Option<&XdsTls>) -> (String, Option<XdsTls>) {
    if server.starts_with("https://") {
        return (server.to_owned(), Some(tls.cloned().unwrap_or_default()));
    }
    if server.starts_with("http://") {
        return (server.to_owned(), tls.cloned());
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    (format!("{scheme}://{server}"), tls.cloned())
}

fn tls_config(tls: &XdsTls) -> anyhow::Result<ClientTlsConfig> {
    let read = |path: &std::path::PathBuf, what: &str| {
        std::fs::read(path)
            .map_err(|e| anyhow::anyhow!("cannot read the xDS TLS {what} {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca, "CA certificate")?)),
        None => config.with_native_roots(),
    };
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            config = config.identity(Identity::from_pem(
                read(cert, "certificate")?,
                read(key, "key")?,
            ));
        }
        (None, None) => {}
        _ => anyhow::bail!("xDS mutual TLS needs both a certificate and its key"),
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// Exponential backoff with jitter: each wait is drawn between half and
/// all of a bound that doubles from `initial` up to `max`.
#[derive(Debug)]
struct Backoff {
    initial: Duration,
    max: Duration,
    bound: Duration,
    seed: u64,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Backoff {
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0x9E37_79B9_7F4A_7C15, |d| d.as_nanos() as u64)
            | 1;
        Backoff {
            initial,
            max: max.max(initial),
            bound: initial,
            seed,
        }
    }

    fn reset(&mut self) {
        self.bound = self.initial;
    }

    fn next(&mut self) -> Duration {
        // xorshift: enough to spread the servers of a fleet apart.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let fraction = 0.5 + (self.seed >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
        let wait = self.bound.mul_f64(fraction);
        self.bound = (self.bound * 2).min(self.max);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_bound_with_jitter_and_starts_again() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<Duration> = (0..5).map(|_| backoff.next()).collect();
        for (wait, bound) in waits.iter().zip([100, 200, 350, 350, 350]) {
            let bound = Duration::from_millis(bound);
            assert!(
                *wait >= bound / 2 && *wait <= bound,
                "{wait:?} for {bound:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next() <= Duration::from_millis(100));
    }

    #[test]
    fn a_bare_address_is_http_unless_tls_is_asked_for() {
        let tls = XdsTls::default();
        assert_eq!(
            endpoint_url("cp:18000", None),
            ("http://cp:18000".into(), None)
        );
        assert_eq!(
            endpoint_url("cp:18000", Some(&tls)),
            ("https://cp:18000".into(), Some(tls.clone()))
        );
        assert_eq!(
            endpoint_url("https://cp:443", None),
            ("https://cp:443".into(), Some(tls))
        );
    }
}
