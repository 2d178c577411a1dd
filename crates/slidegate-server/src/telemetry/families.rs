//! Every metric family the server exports, with what its `# HELP` line
//! says: described once when the recorder is installed, so that Prometheus
//! and Grafana show what each series counts. The dashboard test holds
//! `docs/grafana/slidegate.json` to this list (a panel for each).

/// What kind of series a family is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets of observations, in seconds.
    Histogram,
}

/// One metric family.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// Its name, as `/metrics` shows it.
    pub name: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// Its `# HELP` text.
    pub help: &'static str,
}

const fn family(name: &'static str, kind: Kind, help: &'static str) -> Family {
    Family { name, kind, help }
}

/// Every family, the library's included (the resilient store counts deny
/// cache hits and shows each node's circuit).
pub const FAMILIES: &[Family] = &[
    family(
        "slidegate_decisions_total",
        Kind::Counter,
        "Decisions taken, by source (acquire, check), domain, rule and outcome (allowed, denied, \
         shadow_denied, quota_exceeded, unlimited, degraded).",
    ),
    family(
        "slidegate_store_call_duration_seconds",
        Kind::Histogram,
        "Duration of the calls to a Redis store, by store and operation.",
    ),
    family(
        "slidegate_store_errors_total",
        Kind::Counter,
        "Store calls that failed, by store and kind (timeout, unavailable, full).",
    ),
    family(
        "slidegate_policy_decisions_total",
        Kind::Counter,
        "Decisions taken by --on-store-error because the store failed or was full, by policy.",
    ),
    family(
        "slidegate_deny_cache_hits_total",
        Kind::Counter,
        "Denials answered by the local deny cache without a store call (a key the store denied, \
         within its retry_after).",
    ),
    family(
        "slidegate_store_circuit_open",
        Kind::Gauge,
        "1 while the circuit breaker of a store node is open (its decisions go to the policy).",
    ),
    family(
        "slidegate_config_reloads_total",
        Kind::Counter,
        "Rule reloads, by result (ok, error, refused).",
    ),
    family(
        "slidegate_requests_in_flight",
        Kind::Gauge,
        "Requests being answered now, by protocol (http, grpc).",
    ),
    family(
        "slidegate_waiting_requests",
        Kind::Gauge,
        "POST /v1/acquire requests waiting for their turn (max_wait_ms) now.",
    ),
    family(
        "slidegate_connection_timeouts_total",
        Kind::Counter,
        "Connections closed by a deadline, by listener (http, grpc) and phase (header, idle, \
         closing).",
    ),
    family(
        "slidegate_connections_refused_total",
        Kind::Counter,
        "Connections closed as soon as accepted, by listener and reason (per_ip: the client \
         address held --max-connections-per-ip).",
    ),
    family(
        "slidegate_runtime_limits_stale",
        Kind::Gauge,
        "1 while the limits set at run time cannot be read from the store (the last set read is \
         enforced), else 0.",
    ),
    family(
        "slidegate_runtime_limit_changes_total",
        Kind::Counter,
        "Limits set at run time changed through this server, by kind (key, domain) and change \
         (set, removed).",
    ),
    family(
        "slidegate_runtime_limits_version",
        Kind::Gauge,
        "The version of the limits set at run time this server holds.",
    ),
    family(
        "slidegate_runtime_limits_read_failures_total",
        Kind::Counter,
        "Reads of the limits set at run time that failed (the last set read stays in force).",
    ),
    family(
        "slidegate_xds_connected",
        Kind::Gauge,
        "1 while the xDS stream to the control plane is up (--xds-server), else 0.",
    ),
    family(
        "slidegate_xds_updates_total",
        Kind::Counter,
        "Rule updates received from the xDS control plane, by result (ack, nack).",
    ),
];

/// Gives every family its `# HELP` line in the installed recorder.
pub(super) fn describe() {
    for family in FAMILIES {
        match family.kind {
            Kind::Counter => metrics::describe_counter!(family.name, family.help),
            Kind::Gauge => metrics::describe_gauge!(family.name, family.help),
            Kind::Histogram => {
                metrics::describe_histogram!(family.name, metrics::Unit::Seconds, family.help)
            }
        }
    }
}
