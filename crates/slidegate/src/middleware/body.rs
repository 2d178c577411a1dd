//! Response bodies: the layer answers with the inner service's body type
//! ([`RejectionBody`]), or with [`ResponseBody`] around it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::hold::{HeldBody, Holding};

/// A response body type the layer can make its own answers in (a
/// rejection's problem+json; nothing, for gRPC). The layer's responses
/// have the inner service's body type: a passed request's response goes
/// out as the inner service made it, not wrapped, and not boxed again by
/// the framework.
///
/// Implemented for axum's and (feature `tonic`) tonic's bodies, `String`,
/// and [`ResponseBody`]. For an inner service with another body type, map
/// its responses into a [`ResponseBody`] first:
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Empty;
/// use slidegate::MemoryStore;
/// use slidegate::middleware::{Key, RateLimitLayer, ResponseBody};
/// use tower::{Service, ServiceBuilder, service_fn};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A service whose body type the layer cannot make answers in.
/// let inner = service_fn(|_: http::Request<()>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(Empty::<Bytes>::new()))
/// });
/// let limit = RateLimitLayer::builder(MemoryStore::new(), Key::global())
///     .rule("10/s")
///     .build()?;
/// let service = ServiceBuilder::new()
///     .layer(limit)
///     .map_response(|response: http::Response<Empty<Bytes>>| response.map(ResponseBody::inner))
///     .service(inner);
/// fn answers_with<S: Service<http::Request<()>, Response = http::Response<ResponseBody<Empty<Bytes>>>>>(_: &S) {}
/// answers_with(&service);
/// # Ok(())
/// # }
/// ```
pub trait RejectionBody: Sized {
    /// A body holding `bytes` (empty for gRPC answers).
    fn from_rejection(bytes: Bytes) -> Self;

    /// This body, keeping `holding` (a place in flight, a reserved
    /// budget) until it ends or is dropped. The bodies of axum, tonic and
    /// [`ResponseBody`] do so; by default `holding` is let go at once,
    /// which suits a body made whole before the response (`String`).
    fn hold(self, holding: Holding) -> Self {
        drop(holding);
        self
    }
}

impl RejectionBody for axum::body::Body {
    fn from_rejection(bytes: Bytes) -> Self {
        if bytes.is_empty() {
            axum::body::Body::empty()
        } else {
            axum::body::Body::from(bytes)
        }
    }

    fn hold(self, holding: Holding) -> Self {
        axum::body::Body::new(HeldBody::new(self, holding))
    }
}

#[cfg(feature = "tonic")]
impl RejectionBody for tonic::body::Body {
    fn from_rejection(bytes: Bytes) -> Self {
        if bytes.is_empty() {
            tonic::body::Body::empty()
        } else {
            tonic::body::Body::new(ResponseBody::<String>::rejection(bytes))
        }
    }

    fn hold(self, holding: Holding) -> Self {
        tonic::body::Body::new(HeldBody::new(self, holding))
    }
}

impl RejectionBody for String {
    fn from_rejection(bytes: Bytes) -> Self {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl<B> RejectionBody for ResponseBody<B> {
    fn from_rejection(bytes: Bytes) -> Self {
        ResponseBody::rejection(bytes)
    }

    fn hold(mut self, holding: Holding) -> Self {
        self.holding = Some(holding);
        self
    }
}

pin_project! {
    /// A response body that is either another body or the bytes of one of
    /// the layer's answers: for inner services whose body type is not a
    /// [`RejectionBody`] (see there).
    ///
    /// Any framework that accepts a `http_body::Body<Data = Bytes>` takes it
    /// (axum, tonic's `Server::layer`, hyper).
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        // Kept until the body ends or is dropped.
        holding: Option<Holding>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
        },
        Rejection {
            data: Option<Bytes>,
        },
    }
}

impl<B> ResponseBody<B> {
    /// The body `body`.
    pub fn inner(body: B) -> Self {
        ResponseBody {
            kind: Kind::Inner { body },
            holding: None,
        }
    }

    /// A body holding `data`.
    pub fn rejection(data: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Rejection {
                data: (!data.is_empty()).then_some(data),
            },
            holding: None,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let frame = match this.kind.project() {
            KindProj::Inner { body } => std::task::ready!(body.poll_frame(cx)),
            KindProj::Rejection { data } => data.take().map(|d| Ok(Frame::data(d))),
        };
        if frame.is_none() {
            // Ended: what it held is settled now.
            this.holding.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Rejection { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Rejection { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("ResponseBody::Inner"),
            Kind::Rejection { data } => f
                .debug_tuple("ResponseBody::Rejection")
                .field(&data.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}
