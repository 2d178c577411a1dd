//! Rules from a control plane over xDS (ADS, state of the world), as
//! envoyproxy/ratelimit's xDS provider and Envoy Gateway serve them:
//! [`proto`] the messages, [`convert`] them into what a config file
//! becomes, [`client`] the subscription, [`options`] how to reach it.
//!
//! The control plane's domains stand beside the files' (a domain comes
//! from one of them, never both) and are checked by the same code.

pub mod client;
pub mod convert;
pub mod options;
pub mod proto;

pub use client::run;
pub use options::{XdsOptions, XdsTls};
