//! A connection that makes h2 send a small gRPC message and what follows
//! it (the reply's trailers, the request's end of stream) in one write.
//!
//! Why: h2 keeps a DATA frame's payload larger than 256 bytes out of its
//! write buffer, to hand it to a vectored write as is; while such a
//! payload waits, no further frame can be buffered, so the trailers that
//! end every gRPC reply (and the empty end-of-stream frame of a request)
//! go out in a write — a syscall, a TCP segment, a wake-up and a read on
//! the other side — of their own. Measured on the orchestrator at
//! concurrency 64: 1,422 ten-byte trailer writes beside ~1,650 reply
//! writes. A connection that says it has no
//! vectored writes makes h2 copy payloads up to 1 KiB into the buffer
//! instead (its `CHAIN_THRESHOLD_WITHOUT_VECTORED_IO`), so a reply of a few
//! hundred bytes and its trailers leave together. A larger payload would
//! go out unbuffered, in writes of its own; every server reply and channel
//! request is therefore handed to h2 in pieces under that threshold
//! ([`crate::small_frames`]), so messages up to h2's 16 KiB buffer leave
//! with their trailers too. Over TLS h2 sees the TLS stream, not this, and
//! nothing changes.
//!
//! Used by every server's accepted connections ([`crate::server`]) and by
//! the client channel's connections ([`crate::channel`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `T` with vectored writes hidden (see the module docs).
#[derive(Debug)]
pub struct CoalescedWrites<T>(pub T);

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    /// Still a vectored write for whoever asks for one regardless (TLS
    /// over this connection writes its records so).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    /// What h2 asks before choosing how much to copy into its buffer.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected
    for CoalescedWrites<T>
{
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn tells_h2_there_are_no_vectored_writes_yet_writes_vectored_when_asked() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut near = CoalescedWrites(near);
        assert!(!near.is_write_vectored());
        let bufs = [io::IoSlice::new(b"head"), io::IoSlice::new(b"body")];
        let n = near.write_vectored(&bufs).await.unwrap();
        assert!(n > 0);
        near.write_all(&b"headbody"[n..]).await.unwrap();
        near.write_all(b"!").await.unwrap();
        let mut got = [0u8; 9];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"headbody!");
    }
}
