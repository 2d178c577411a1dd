//! A decision as JSON: the body of `POST /v1/acquire` and `GET
//! /v1/keys/{key}`, and what `slidegate check` prints.

use serde::Serialize;
use slidegate::Decision;

/// A decision as JSON:
/// `{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":60000,"retry_after_ms":0}`,
/// plus `"degraded":true` only when a failure policy decided instead of the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DecisionBody {
    /// The request may pass.
    pub allowed: bool,
    /// The limit of the deciding rule.
    pub limit: u64,
    /// Units left in its window.
    pub remaining: u64,
    /// Milliseconds until the full quota is back, rounded up.
    pub reset_after_ms: u64,
    /// Milliseconds until the same request would pass, rounded up; 0 when allowed.
    pub retry_after_ms: u64,
    /// Decided by a failure policy, not by the store.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
}

impl DecisionBody {
    /// The body as JSON, written field by field: the same text as
    /// `serde_json::to_string` (checked in the tests), without the
    /// serializer's machinery on every `/v1/acquire`. Its capacity is its
    /// length, so the answer's `Bytes` takes the buffer as it is instead
    /// of allocating a shared header for the unused rest.
    pub fn to_json(&self) -> String {
        let head = if self.allowed {
            "{\"allowed\":true,\"limit\":"
        } else {
            "{\"allowed\":false,\"limit\":"
        };
        let tail = if self.degraded {
            ",\"degraded\":true}"
        } else {
            "}"
        };
        let (mut limit, mut remaining, mut reset, mut retry) = (
            itoa::Buffer::new(),
            itoa::Buffer::new(),
            itoa::Buffer::new(),
            itoa::Buffer::new(),
        );
        let parts = [
            head,
            limit.format(self.limit),
            ",\"remaining\":",
            remaining.format(self.remaining),
            ",\"reset_after_ms\":",
            reset.format(self.reset_after_ms),
            ",\"retry_after_ms\":",
            retry.format(self.retry_after_ms),
            tail,
        ];
        parts.concat()
    }
}

impl From<&Decision> for DecisionBody {
    fn from(d: &Decision) -> DecisionBody {
        DecisionBody {
            allowed: d.allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            reset_after_ms: d.reset_after_ms(),
            retry_after_ms: d.retry_after_ms(),
            degraded: d.degraded(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_exactly_the_documented_fields() {
        let d = Decision::from_parts(true, 100, 99, 0, 59_999_001);
        let json = serde_json::to_string(&DecisionBody::from(&d)).unwrap();
        assert_eq!(
            json,
            r#"{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":60000,"retry_after_ms":0}"#
        );
        let degraded = DecisionBody::from(&d.into_degraded());
        let json = serde_json::to_value(&degraded).unwrap();
        assert_eq!(json["degraded"], true);
    }

    #[test]
    fn the_body_written_by_hand_is_what_serde_writes() {
        for d in [
            Decision::from_parts(true, 100, 99, 0, 59_999_001),
            Decision::from_parts(false, 5, 0, 1_500_000, 60_000_000),
            Decision::from_parts(true, u64::MAX, u64::MAX - 1, 0, 0).into_degraded(),
            Decision::from_parts(false, 1, 0, 999, 1).into_degraded(),
        ] {
            let body = DecisionBody::from(&d);
            assert_eq!(body.to_json(), serde_json::to_string(&body).unwrap());
        }
    }
}
