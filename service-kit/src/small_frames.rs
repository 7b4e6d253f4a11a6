//! Message bodies handed to h2 in pieces it copies into its write buffer,
//! so a message of a few KiB leaves in the same write as its trailers and
//! as the other streams' frames of the moment.
//!
//! Why: h2 copies a DATA frame into its write buffer only below 1 KiB (its
//! `CHAIN_THRESHOLD_WITHOUT_VECTORED_IO`; [`crate::coalesced_writes`] makes
//! it use that threshold). A larger payload is kept aside to be written as
//! is, and the next frame — at least the trailers that end every gRPC
//! reply, or a request's end of stream — first needs that payload written:
//! h2 then writes the buffer, the payload, and later the rest, in separate
//! writes. Every write is a syscall, a TCP segment and a wake-up and read
//! on the other side (on loopback the sender's syscall also runs the
//! receiver's TCP input). A saga's `CreateOrder` reply with `wait` crosses
//! 1 KiB at three steps (~1.1 KB against ~0.9 KB at two); measured at
//! concurrency 64, the orchestrator's writes per saga went from 1.45 at
//! two steps to 3.88 at three — most of what the third step cost it. The
//! same held for batch requests to participants over 1 KiB.
//!
//! Here a data frame of up to [`SPLIT_UP_TO`] bytes is passed on in pieces
//! of at most [`PIECE`] bytes (views of the same bytes, nothing copied
//! here; h2 copies each into its buffer, a memcpy against a syscall) and
//! h2 writes what it buffered in one write per round, up to its 16 KiB
//! buffer. A larger frame passes as is: past h2's buffer it costs its own
//! writes either way, and leaving it whole spares the copy.
//!
//! Used on every server's replies ([`crate::server`]) and on the client
//! channel's requests ([`crate::channel`]).

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tonic::codegen::http;

/// The largest piece: below h2's 1 KiB copy threshold, with room for the
/// frame's 9-byte head.
pub const PIECE: usize = 1_000;

/// The largest data frame that is split: h2's default (and smallest
/// allowed) frame size, the most its 16 KiB write buffer takes at once.
pub const SPLIT_UP_TO: usize = 16 * 1024;

/// `B` with its data frames of up to [`SPLIT_UP_TO`] bytes passed on in
/// pieces of at most [`PIECE`] bytes (see the module docs).
#[derive(Debug)]
pub struct SmallFrames<B> {
    inner: B,
    /// What is left of the frame being passed on.
    rest: Bytes,
}

impl<B> SmallFrames<B> {
    /// `inner`, its frames passed on in pieces.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            rest: Bytes::new(),
        }
    }
}

impl<B> Body for SmallFrames<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if self.rest.is_empty() {
            let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                other => return Poll::Ready(other),
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            };
            if data.len() <= PIECE || data.len() > SPLIT_UP_TO {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            self.rest = data;
        }
        let take = self.rest.len().min(PIECE);
        let piece = self.rest.split_to(take);
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        !self.rest.has_remaining() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.len() as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

/// A server's replies through [`SmallFrames`]: the layer of
/// [`crate::server::GrpcServer`].
#[derive(Clone, Debug)]
pub struct SmallReplyFrames<S>(pub S);

impl<S, Request, B> tower_service::Service<Request> for SmallReplyFrames<S>
where
    S: tower_service::Service<Request, Response = http::Response<B>>,
{
    type Response = http::Response<SmallFrames<B>>;
    type Error = S::Error;
    type Future = futures::future::MapOk<S::Future, fn(http::Response<B>) -> Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        use futures::TryFutureExt;
        self.0
            .call(request)
            .map_ok(|reply| reply.map(SmallFrames::new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    type Frames = Vec<Result<Frame<Bytes>, std::convert::Infallible>>;

    async fn pieces(frames: Frames) -> (Vec<usize>, Vec<u8>, bool) {
        let body = StreamBody::new(futures::stream::iter(frames));
        let mut body = SmallFrames::new(body);
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        let mut trailers = false;
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap();
            if let Some(data) = frame.data_ref() {
                sizes.push(data.len());
                all.extend_from_slice(data);
            } else {
                trailers = frame.is_trailers();
            }
        }
        (sizes, all, trailers)
    }

    fn bytes(n: usize) -> Bytes {
        (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
    }

    #[tokio::test]
    async fn a_frame_over_a_piece_is_passed_on_in_pieces_with_the_same_bytes() {
        let data = bytes(2_345);
        let (sizes, all, trailers) = pieces(vec![
            Ok(Frame::data(data.clone())),
            Ok(Frame::trailers(http::HeaderMap::new())),
        ])
        .await;
        assert_eq!(sizes, [1_000, 1_000, 345]);
        assert_eq!(all, data);
        assert!(trailers, "the trailers follow the last piece");
    }

    #[tokio::test]
    async fn small_and_very_large_frames_pass_as_they_are() {
        let small = bytes(PIECE);
        let large = bytes(SPLIT_UP_TO + 1);
        let (sizes, all, _) = pieces(vec![
            Ok(Frame::data(small.clone())),
            Ok(Frame::data(large.clone())),
        ])
        .await;
        assert_eq!(sizes, [PIECE, SPLIT_UP_TO + 1]);
        assert_eq!(all, [small, large].concat());
    }

    #[tokio::test]
    async fn the_body_ends_only_after_its_last_piece() {
        let full = http_body_util::Full::new(bytes(1_500));
        let mut body = SmallFrames::new(full);
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(1_500));
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.data_ref().map(Bytes::len), Some(1_000));
        assert!(!body.is_end_stream(), "500 bytes are still to come");
        assert_eq!(body.size_hint().exact(), Some(500));
        let second = body.frame().await.unwrap().unwrap();
        assert_eq!(second.data_ref().map(Bytes::len), Some(500));
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
    }
}
