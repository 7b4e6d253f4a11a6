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
//! The first write of every flush also waits one turn of the runtime
//! ([`CoalescedWrites::poll_write`]): hyper sends a request's HEADERS from
//! its connection task and the request's body from a task of its own,
//! spawned when the stream has no send window assigned yet, so the
//! connection used to write the headers (83 bytes) and, a moment later,
//! the body and end of stream (~215 bytes) — two writes and two wake-ups
//! of the participant per call, measured with `strace` on an idle saga.
//! Yielding once before writing lets the tasks woken alongside the flush
//! (the body's, other streams') queue their frames first, so that most of
//! the time everything leaves in one write (not always: the body's task
//! may run on another worker, later). Counted with `strace` on idle sagas:
//! the orchestrator's writes per call to a participant 2.0–2.1 → 1.4, per
//! saga 5.6 → 4.1. The cost is one extra poll of the connection task per
//! flush, far less than the syscall and the wake-up it saves.
//!
//! Only clients wait so ([`crate::channel`]); a server's connections
//! ([`crate::server`]) write at once ([`CoalescedWrites::writing_at_once`]).
//! A reply's frames come from one task and need no wait to leave
//! together, while a task that wakes itself makes tokio unpark another
//! worker to share the work: on an idle participant, ~2 futex calls and
//! a thread switch per call, and the reply sent from the other worker
//! (`strace`: 2,542 futex calls in 3 s against 112 without the wait, the
//! same one `sendto` per call either way). Without it, in the same
//! minutes (`scripts/bench-ab.sh`, 2 rounds): idle sagas 602 → 701 per
//! second, p50 1.54 → 1.33 ms, the participants' CPU per idle saga −21%;
//! concurrency 64 5,061 → 5,160 sagas/s.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `T` with vectored writes hidden and, on a client's connection, every
/// flush's first write one turn of the runtime late (see the module docs).
#[derive(Debug)]
pub struct CoalescedWrites<T> {
    io: T,
    /// Whether this flush's writer has already yielded once.
    yielded: bool,
    /// Whether the first write of a flush yields at all.
    yields: bool,
}

impl<T> CoalescedWrites<T> {
    /// `io`, its writes coalesced: a client's connection.
    pub fn new(io: T) -> Self {
        Self {
            io,
            yielded: false,
            yields: true,
        }
    }

    /// `io`, vectored writes hidden, every write made at once: a server's
    /// connection.
    pub fn writing_at_once(io: T) -> Self {
        Self {
            io,
            yielded: false,
            yields: false,
        }
    }

    /// The connection underneath.
    pub fn get_ref(&self) -> &T {
        &self.io
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    /// The first write after a completed flush returns `Pending` once, its
    /// task woken at once: h2 then buffers whatever the tasks that ran in
    /// between queued, and writes it all together.
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.yields && !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.io).poll_flush(cx);
        if flushed.is_ready() {
            self.yielded = false;
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    /// Still a vectored write for whoever asks for one regardless (TLS
    /// over this connection writes its records so).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
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
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn tells_h2_there_are_no_vectored_writes_yet_writes_vectored_when_asked() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut near = CoalescedWrites::new(near);
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

    /// Counts its wake-ups.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn the_first_write_of_each_flush_waits_one_turn_and_wakes_its_task() {
        let wakes = std::sync::Arc::new(Wakes(0.into()));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || wakes.0.load(std::sync::atomic::Ordering::SeqCst);
        let (near, _far) = tokio::io::duplex(1024);
        let mut near = CoalescedWrites::new(near);
        let mut write =
            |near: &mut CoalescedWrites<_>, bytes: &[u8]| Pin::new(near).poll_write(&mut cx, bytes);

        assert!(
            write(&mut near, b"head").is_pending(),
            "the first write waits"
        );
        assert_eq!(
            woken(),
            1,
            "and its task is woken at once, not left to hang"
        );
        assert!(matches!(write(&mut near, b"head"), Poll::Ready(Ok(4))));
        assert!(
            matches!(write(&mut near, b"body"), Poll::Ready(Ok(4))),
            "the rest of the same flush is written at once"
        );
        assert_eq!(woken(), 1);

        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut near).poll_flush(&mut cx).is_ready());
        let mut cx = Context::from_waker(&waker);
        assert!(
            Pin::new(&mut near)
                .poll_write(&mut cx, b"next")
                .is_pending(),
            "after a flush, the next write waits once again"
        );
        assert_eq!(woken(), 2);

        let (near, _far) = tokio::io::duplex(1024);
        let mut near = CoalescedWrites::writing_at_once(near);
        for _ in 0..2 {
            let mut cx = Context::from_waker(&waker);
            assert!(
                matches!(
                    Pin::new(&mut near).poll_write(&mut cx, b"x"),
                    Poll::Ready(Ok(1))
                ),
                "a server's connection never waits"
            );
            assert!(Pin::new(&mut near).poll_flush(&mut cx).is_ready());
        }
        assert_eq!(woken(), 2);
    }
}
