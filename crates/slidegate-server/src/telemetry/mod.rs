//! What the service says about itself: metrics, the status page's
//! statistics, logs.

pub mod logging;
pub mod metrics;
pub mod stats;
