//! Operating slidegate, with the built binary: the logs (colour only on a
//! terminal, the fields of reload and breaker lines), the Grafana
//! dashboard against a running server's `/metrics`, the deployment
//! recipes (compose, Envoy, Dockerfile health check, systemd unit) and the
//! migration guide's example configs.
//!
//! `SLIDEGATE_BINARY` runs them against another build (`scripts/check-deploy.sh`
//! points it at the binary the Dockerfile's build command makes).

mod common;
#[path = "common/process.rs"]
mod process;

#[path = "ops/dashboard.rs"]
mod dashboard;
#[path = "ops/deploy.rs"]
mod deploy;
#[path = "ops/logs.rs"]
mod logs;
#[path = "ops/migrating.rs"]
mod migrating;
#[path = "ops/support.rs"]
mod support;
