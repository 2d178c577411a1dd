//! [`RequestHead`]: what the layer's callbacks see of a request.

use http::request::Parts;
use http::{Extensions, HeaderMap, Method, Request, Uri, Version};

/// The head of a request, borrowed from it: what key extractors, the cost
/// function and the rejection hook see.
///
/// The layer reads the request in place rather than taking it apart into
/// [`Parts`] and putting it back together, which would move the whole head
/// twice per request. The fields are references with the names of
/// [`Parts`]' fields, so code written against `&Parts` reads the same:
/// `request.headers.get("x-tenant")`, `request.uri.path()`.
///
/// ```
/// use slidegate::middleware::RequestHead;
/// let request = http::Request::get("/a?b=c").header("x-tenant", "acme").body(())?;
/// let head = RequestHead::from(&request);
/// assert_eq!(head.uri.path(), "/a");
/// assert_eq!(head.headers["x-tenant"], "acme");
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestHead<'a> {
    /// The request method.
    pub method: &'a Method,
    /// The request target.
    pub uri: &'a Uri,
    /// The HTTP version.
    pub version: Version,
    /// The header fields (gRPC: the metadata).
    pub headers: &'a HeaderMap,
    /// What earlier layers attached: `ConnectInfo`, `MatchedPath`, an
    /// authenticated user.
    pub extensions: &'a Extensions,
}

impl<'a, B> From<&'a Request<B>> for RequestHead<'a> {
    #[inline]
    fn from(request: &'a Request<B>) -> Self {
        RequestHead {
            method: request.method(),
            uri: request.uri(),
            version: request.version(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }
}

impl<'a> From<&'a Parts> for RequestHead<'a> {
    fn from(parts: &'a Parts) -> Self {
        RequestHead {
            method: &parts.method,
            uri: &parts.uri,
            version: parts.version,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }
}
