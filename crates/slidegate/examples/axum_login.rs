//! A login endpoint limited per user *and* client address (5 a minute),
//! plus 100 a second on the route for everyone together.
//!
//! This is the Spring `@RateLimit` aspect that limits a method per user id
//! and method name, done right: the window is exact (no request more than
//! 5 in any minute, not just per calendar minute), a rejected attempt is
//! not counted, the user name is normalised so `Alice` and `alice ` are one
//! account, a user under attack from one address can still log in from
//! another, and the client is told when to come back.
//!
//! ```text
//! cargo run -p slidegate --example axum_login --features tower
//! curl -i localhost:3000/login -H 'content-type: application/json' \
//!      -d '{"user":"alice","password":"wonderland"}'
//! ```
//!
//! To share the limits between several instances, pass a Redis store to
//! [`app`] instead of the memory store: nothing else changes
//! (`axum_redis.rs` does just that).

use std::error::Error;
use std::fmt;
use std::net::SocketAddr;

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{Next, from_fn};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use slidegate::middleware::{BuildError, Key, KeyExtractor, RateLimitLayer};
use slidegate::{MemoryStore, Store};

/// The account a login attempt is for, normalised, as read from the body
/// before the limiter runs.
#[derive(Clone, Debug)]
pub struct LoginUser(String);

impl fmt::Display for LoginUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(serde::Deserialize)]
struct Credentials {
    user: String,
    password: String,
}

/// The largest login body read.
const MAX_BODY: usize = 4 * 1024;

/// The application: `POST /login`, limited in `store`.
pub fn app<St>(store: St) -> Result<Router, BuildError>
where
    St: Store + Clone + 'static,
{
    // Every attempt at one account from one address: 5 a minute.
    let per_user = RateLimitLayer::builder(
        store.clone(),
        Key::extension::<LoginUser>("user").and(Key::peer_ip()),
    )
    .prefix("login")
    .policy("per-user", "5/m")
    .headers_on_success(true)
    .build()?;
    // Every attempt on the route: 100 a second.
    let per_route = RateLimitLayer::builder(store, Key::route())
        .prefix("login")
        .policy("route", "100/s")
        .headers_on_success(true)
        .build()?;

    // route_layer wraps from the inside out: `read_login_user` runs first,
    // then the per-user limit, then the route's.
    Ok(Router::new()
        .route("/login", post(login))
        .route_layer(per_route)
        .route_layer(per_user)
        .route_layer(from_fn(read_login_user)))
}

/// Puts the attempted account in the request's extensions, so the limiter
/// can key on it. A body without one gets no key: the limiter rejects it
/// with 400.
async fn read_login_user(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_BODY).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    if let Ok(credentials) = serde_json::from_slice::<Credentials>(&bytes) {
        let user = credentials.user.trim().to_lowercase();
        if !user.is_empty() {
            parts.extensions.insert(LoginUser(user));
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

async fn login(Json(credentials): Json<Credentials>) -> Response {
    // A real application checks a password hash here.
    let valid = credentials.user.trim().eq_ignore_ascii_case("alice")
        && credentials.password == "wonderland";
    if valid {
        Json(serde_json::json!({ "token": "a session token" })).into_response()
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    let app = app(MemoryStore::new())?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
