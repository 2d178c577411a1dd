//! What every RESP connection shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::frame::FrameLimits;
use crate::bounds::RequestBounds;
use crate::limiter::Limiter;

/// The limiter and the bounds of the RESP port.
pub struct RespState<S> {
    pub(super) limiter: Limiter<S>,
    pub(super) bounds: RequestBounds,
    pub(super) frame: FrameLimits,
    pub(super) admin_token: Option<Arc<str>>,
    next_id: Arc<AtomicU64>,
}

impl<S> RespState<S> {
    /// The RESP port of `limiter`: default bounds, no admin token (so
    /// `SG.RESET` is refused).
    pub fn new(limiter: Limiter<S>) -> RespState<S> {
        RespState {
            limiter,
            bounds: RequestBounds::default(),
            frame: FrameLimits::default(),
            admin_token: None,
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Refuses rules beyond `bounds`, as the HTTP API does.
    pub fn with_bounds(mut self, bounds: RequestBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Closes connections that send a command beyond `frame`.
    pub fn with_frame_limits(mut self, frame: FrameLimits) -> Self {
        self.frame = frame;
        self
    }

    /// `SG.RESET` for connections that sent `AUTH token`.
    pub fn with_admin_token(mut self, token: Option<String>) -> Self {
        self.admin_token = token.filter(|t| !t.is_empty()).map(Arc::from);
        self
    }

    /// A number for a new connection (`CLIENT ID`, `HELLO`'s `id`).
    pub(super) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

impl<S> Clone for RespState<S> {
    fn clone(&self) -> Self {
        RespState {
            limiter: self.limiter.clone(),
            bounds: self.bounds,
            frame: self.frame,
            admin_token: self.admin_token.clone(),
            next_id: Arc::clone(&self.next_id),
        }
    }
}
