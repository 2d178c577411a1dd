//! A token budget for an LLM gateway: each API key may use 10,000 tokens
//! a minute and run at most 4 completions at once. A completion's cost is
//! known only once it is generated, so the layer reserves the most it may
//! cost (its `x-max-tokens`) before the handler runs, and commits what
//! the handler reports, token by token while it streams, when the
//! response ends. Ten concurrent calls of 4,000 on a budget of 10,000 get
//! two passes, not ten; a call that used 12 tokens gives the other 3,988
//! back.
//!
//! ```text
//! cargo run -p slidegate --example llm_budget --features tower
//! curl -N localhost:3000/v1/completions -H 'x-api-key: k1' -H 'x-max-tokens: 4000' -d 'say something short'
//! ```

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Extension;
use axum::http::{HeaderMap, HeaderName};
use axum::routing::post;
use bytes::Bytes;
use http_body::Frame;
use slidegate::middleware::{BuildError, Key, RateLimitLayer, ReportedCost};
use slidegate::{MemoryStore, Store};

/// The budget per API key, in tokens.
pub const BUDGET: &str = "10000/1m";

/// What a call may use when it does not say (`x-max-tokens`).
pub const DEFAULT_MAX_TOKENS: u64 = 1000;

/// The gateway: `POST /v1/completions` with the prompt as its body.
pub fn app<S: Store + Clone + 'static>(store: S) -> Result<Router, BuildError> {
    let limit = RateLimitLayer::builder(store, Key::header(HeaderName::from_static("x-api-key")))
        .policy("tokens", BUDGET)
        .cost(|request| max_tokens(request.headers))
        // Reserved for at most the window: a gateway that dies mid-call
        // is charged the estimate when the lease runs out.
        .reserve_and_commit(Duration::from_secs(60))
        .max_in_flight(4)
        .headers_on_success(true)
        .build()?;
    Ok(Router::new()
        .route("/v1/completions", post(complete))
        .layer(limit))
}

/// The most tokens a call may use: its `x-max-tokens`, what the layer
/// reserves.
fn max_tokens(headers: &HeaderMap) -> u64 {
    headers
        .get("x-max-tokens")
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(DEFAULT_MAX_TOKENS)
}

/// The "model": streams the prompt back a word (a token) at a time, at
/// most `x-max-tokens` of them, reporting each as it goes out.
async fn complete(
    Extension(cost): Extension<ReportedCost>,
    headers: HeaderMap,
    prompt: String,
) -> Body {
    let limit = usize::try_from(max_tokens(&headers)).unwrap_or(usize::MAX);
    let words: Vec<String> = prompt
        .split_whitespace()
        .take(limit)
        .map(|word| format!("{word} "))
        .collect();
    // Nothing generated yet: a client that leaves now pays nothing.
    cost.set(0);
    Body::new(Tokens {
        words: words.into_iter(),
        cost,
    })
}

/// A streamed completion: each token reported as it is sent.
struct Tokens {
    words: std::vec::IntoIter<String>,
    cost: ReportedCost,
}

impl http_body::Body for Tokens {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.words.next().map(|word| {
            self.cost.add(1);
            Ok(Frame::data(Bytes::from(word)))
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, app(MemoryStore::new())?).await?;
    Ok(())
}
