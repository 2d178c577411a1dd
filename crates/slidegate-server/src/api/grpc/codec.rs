//! The codec of `ShouldRateLimit`: the request read from its bytes
//! straight into the limiter's check (see [`decode_check`]), refused with
//! the status tonic's generated server gives what prost cannot decode
//! (`INTERNAL`) or the service gives an invalid check
//! (`INVALID_ARGUMENT`); the answer already written as protobuf bytes by
//! the service (see
//! [`encode_answer`](crate::api::envoy::answer::encode_answer)), copied
//! into the call's frame as it is.

use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::api::envoy::decode::{Refused, decode_check};
use crate::bounds::RequestBounds;
use crate::limiter::check::CheckRequest;

/// The protobuf bytes of a `RateLimitResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodedAnswer(Vec<u8>);

impl EncodedAnswer {
    /// The answer of `bytes`, a whole `RateLimitResponse` message.
    pub fn new(bytes: Vec<u8>) -> Self {
        EncodedAnswer(bytes)
    }

    /// The message's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Decodes `RateLimitRequest`s into checks within its bounds, encodes
/// [`EncodedAnswer`]s.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnswerCodec {
    bounds: RequestBounds,
}

impl AnswerCodec {
    /// A codec refusing requests beyond `bounds`.
    pub fn new(bounds: RequestBounds) -> Self {
        AnswerCodec { bounds }
    }
}

impl Codec for AnswerCodec {
    type Encode = EncodedAnswer;
    type Decode = CheckRequest;
    type Encoder = AnswerEncoder;
    type Decoder = CheckDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        AnswerEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        CheckDecoder {
            bounds: self.bounds,
        }
    }
}

/// Reads a `RateLimitRequest`'s bytes into a [`CheckRequest`].
#[derive(Clone, Copy, Debug)]
pub struct CheckDecoder {
    bounds: RequestBounds,
}

impl Decoder for CheckDecoder {
    type Item = CheckRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<CheckRequest>, Status> {
        let len = buf.remaining();
        // tonic hands over one whole message in one buffer; read it in
        // place, and copy it out only if it ever comes in pieces.
        let decoded = match buf.chunk() {
            whole if whole.len() == len => {
                let decoded = decode_check(whole, &self.bounds);
                buf.advance(len);
                decoded
            }
            _ => decode_check(&buf.copy_to_bytes(len), &self.bounds),
        };
        decoded.map(Some).map_err(status_of_refusal)
    }
}

/// `INTERNAL` for bytes that are no `RateLimitRequest`, as tonic's prost
/// decoder answers them; `INVALID_ARGUMENT` for a request that is no
/// valid check.
pub fn status_of_refusal(refused: Refused) -> Status {
    match refused {
        Refused::Malformed(_) => Status::internal(refused.to_string()),
        Refused::Invalid(invalid) => Status::invalid_argument(invalid.0),
    }
}

/// Copies an [`EncodedAnswer`]'s bytes into the frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnswerEncoder;

impl Encoder for AnswerEncoder {
    type Item = EncodedAnswer;
    type Error = Status;

    fn encode(&mut self, item: EncodedAnswer, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        prost::bytes::BufMut::put_slice(dst, item.as_bytes());
        Ok(())
    }
}
