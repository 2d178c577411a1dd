//! The codec of `ShouldRateLimit`: the request decoded by prost, as
//! tonic's generated server decodes it; the answer already written as
//! protobuf bytes by the service (see
//! [`encode_answer`](crate::api::envoy::answer::encode_answer)), copied
//! into the call's frame as it is.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

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

/// Decodes `RateLimitRequest`s with prost, encodes [`EncodedAnswer`]s.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnswerCodec;

impl Codec for AnswerCodec {
    type Encode = EncodedAnswer;
    type Decode = RateLimitRequest;
    type Encoder = AnswerEncoder;
    type Decoder = ProstDecoder<RateLimitRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        AnswerEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
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
