//! Forward-auth for reverse proxies (NGINX's `auth_request`, Caddy's
//! `forward_auth`, Traefik's `forwardAuth`): the proxy asks before each
//! request, and the forwarded request's headers become the Envoy-style
//! descriptors of a check of the domain in the path.
//!
//! Without a mapping a forwarded request carries three descriptors of one
//! entry each, decided all or nothing as a check is:
//!
//! | descriptor | from |
//! |---|---|
//! | `remote_address` | the client's address ([`client`]); an IPv6 client as its /64 |
//! | `method` | `X-Forwarded-Method`, else the method of the call itself |
//! | `path` | `X-Forwarded-Uri`, else `X-Original-URI`, without its query |
//!
//! and one more per header the domain maps (`forward_auth.headers` in its
//! YAML, see [`rules::forward_auth`](crate::rules::forward_auth)) when the
//! request has it. This folder reads the request; the HTTP route that
//! answers it is `api::http`'s.

pub mod client;
pub mod descriptors;
pub mod trusted;

pub use client::{ClientAddress, ForwardedError};
pub use descriptors::{MissingPath, forwarded_check};
pub use trusted::{TrustedProxies, TrustedProxiesError};
