//! The byte edge of one connection: what stands between the socket and capnp-rpc,
//! so that no client — however it sends or fails to read — can make the broker
//! hold memory it did not earn.
//!
//! - [`GuardedReader`] frames Cap'n Proto messages itself and hands capnp a message
//!   only once all of its bytes have arrived. capnp's own reader allocates (and
//!   zeroes) the size a frame header *declares* before the body arrives, so an
//!   8-byte header alone used to commit `request_bytes_max`; here the buffer grows
//!   with bytes received. It also enforces the connection's timeouts (a started
//!   request must complete within `request_timeout_ms`; a connection with nothing
//!   in flight closes after `idle_timeout_ms`) and stops reading requests while
//!   the connection's answers are not being read (below).
//! - [`GuardedWriter`] counts the bytes that reach the socket.
//! - [`ConnectionState`] ties them to the RPC handlers: a fetch reserves room for
//!   its answer ([`ConnectionState::reserve_answer`]) before it reads, and the room
//!   comes back as the writer moves bytes to the socket. A connection whose peer
//!   does not read its answers stops being read (backpressure, not buffering), and
//!   its fetches wait: unsent and reserved answers stay within
//!   `unsent_response_bytes_max`, or one answer when a single one is bigger.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

/// Bytes read from the socket at a time (the buffer grows by at most this much
/// beyond the bytes actually received).
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Buffer the reader keeps between messages; a bigger one (after a large request)
/// is released.
const BUFFER_KEPT_BYTES: usize = 256 * 1024;
/// Requests at least this big count against `in_flight_request_bytes_max`
/// (small ones are bounded by `in_flight_calls_max` alone).
const LARGE_REQUEST_BYTES: usize = 64 * 1024;
/// Most segments a message may have (capnp's own limit).
const SEGMENTS_MAX: usize = 512;

/// The limits one connection enforces.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub request_bytes_max: usize,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
    pub unsent_response_bytes_max: usize,
    /// Bytes of large requests whose calls are still being served; past it, no
    /// more requests are read until calls finish.
    pub in_flight_request_bytes_max: usize,
}

/// What the reader, the writer and the RPC handlers of one connection share (all
/// on one thread).
#[derive(Debug)]
pub struct ConnectionState {
    limits: ConnectionLimits,
    /// Answer bytes built and not yet written to the socket.
    unsent: Cell<usize>,
    /// Room reserved by answers being built (fetches, until their read is done).
    reserved: Cell<usize>,
    /// Calls being served (a long poll in flight is not idleness).
    calls: Cell<usize>,
    /// Bytes of large requests handed to capnp whose calls may still be running:
    /// each finished call takes its share (calls do not name their messages), and
    /// none are left once no call is.
    request_bytes: Cell<usize>,
    /// Last time a byte moved either way.
    last_activity: Cell<Instant>,
    /// The reader, parked while answers are not being read.
    reader: RefCell<Option<Waker>>,
    /// Handlers waiting for room for their answers.
    room: Notify,
}

impl ConnectionState {
    pub fn new(limits: ConnectionLimits) -> Rc<ConnectionState> {
        Rc::new(ConnectionState {
            limits,
            unsent: Cell::new(0),
            reserved: Cell::new(0),
            calls: Cell::new(0),
            request_bytes: Cell::new(0),
            last_activity: Cell::new(Instant::now()),
            reader: RefCell::new(None),
            room: Notify::new(),
        })
    }

    /// Marks a call as being served until the guard drops.
    pub fn call_started(self: &Rc<Self>) -> CallActivity {
        self.calls.set(self.calls.get() + 1);
        CallActivity(self.clone())
    }

    /// Waits until an answer of up to `bytes_max` fits in the connection's answer
    /// budget (unsent answers plus rooms reserved; an answer bigger than the whole
    /// budget waits until nothing else holds any), then reserves it. The answer
    /// reports its real size with [`AnswerRoom::built`].
    pub async fn reserve_answer(self: &Rc<Self>, bytes_max: usize) -> AnswerRoom {
        loop {
            let room = self.room.notified();
            let held = self.unsent.get() + self.reserved.get();
            if held == 0 || held + bytes_max <= self.limits.unsent_response_bytes_max {
                self.reserved.set(self.reserved.get() + bytes_max);
                return AnswerRoom { state: self.clone(), reserved: bytes_max };
            }
            room.await;
        }
    }

    /// Counts an answer of `bytes` built without a reservation (metadata,
    /// listings): it holds room until written, like any other.
    pub fn answered(&self, bytes: usize) {
        self.unsent.set(self.unsent.get() + bytes);
    }

    fn wrote(&self, bytes: usize) {
        self.last_activity.set(Instant::now());
        let unsent = self.unsent.get();
        if unsent > 0 {
            self.unsent.set(unsent.saturating_sub(bytes));
            self.room_freed();
        }
    }

    fn room_freed(&self) {
        if !self.reading_paused() {
            if let Some(waker) = self.reader.borrow_mut().take() {
                waker.wake();
            }
        }
        self.room.notify_waiters();
    }

    /// Whether requests wait: built answers are not being read by the peer, or
    /// large requests already fill the connection's share of memory.
    fn reading_paused(&self) -> bool {
        self.unsent.get() >= self.limits.unsent_response_bytes_max
            // (With no call running, what is counted belongs to no call: a message
            // that never became one must not stop the connection for good.)
            || (self.calls.get() > 0 && self.request_bytes.get() >= self.limits.in_flight_request_bytes_max)
    }

    /// A request of `bytes` was handed to capnp.
    fn request_read(&self, bytes: usize) {
        if bytes >= LARGE_REQUEST_BYTES {
            self.request_bytes.set(self.request_bytes.get() + bytes);
        }
    }

    fn call_finished(&self) {
        let calls = self.calls.get();
        self.calls.set(calls - 1);
        self.last_activity.set(Instant::now());
        let held = self.request_bytes.get();
        if held > 0 {
            // This call's share; once no call runs, nothing counted belongs to one.
            self.request_bytes.set(held - held / calls);
            self.room_freed();
        }
    }

    /// No call is being served (answers the peer never reads do not keep a
    /// connection alive).
    fn idle(&self) -> bool {
        self.calls.get() == 0
    }
}

/// A call in flight on the connection (see [`ConnectionState::call_started`]).
#[derive(Debug)]
pub struct CallActivity(Rc<ConnectionState>);

impl Drop for CallActivity {
    fn drop(&mut self) {
        self.0.call_finished();
    }
}

/// Room reserved for one answer; what it does not use goes back when it is built
/// (or dropped, if the call fails).
#[derive(Debug)]
pub struct AnswerRoom {
    state: Rc<ConnectionState>,
    reserved: usize,
}

impl AnswerRoom {
    /// The answer is built with `bytes`: those count as unsent until written.
    pub fn built(mut self, bytes: usize) {
        self.state.unsent.set(self.state.unsent.get() + bytes);
        self.release();
    }

    fn release(&mut self) {
        let reserved = std::mem::take(&mut self.reserved);
        if reserved > 0 {
            self.state.reserved.set(self.state.reserved.get() - reserved);
            self.state.room_freed();
        }
    }
}

impl Drop for AnswerRoom {
    fn drop(&mut self) {
        self.release();
    }
}

/// Where the reader is in the message at the front of its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    /// Not enough bytes to know the message's size yet.
    Unknown,
    /// The whole message is `size` bytes (segment table included).
    Sized(usize),
}

/// The socket's read half, framed; see the module docs.
#[derive(Debug)]
pub struct GuardedReader<R> {
    inner: R,
    state: Rc<ConnectionState>,
    /// Received bytes not yet handed to capnp are `buffer[start..end]`; the rest of
    /// `buffer` is initialized room for the next reads (zeroed once, reused).
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes at `start` that belong to complete messages.
    ready: usize,
    /// Wakes the reader for the next timeout check.
    timer: Pin<Box<Sleep>>,
    /// When the request at the front started arriving.
    request_started: Option<Instant>,
    eof: bool,
}

impl<R> GuardedReader<R> {
    pub fn new(inner: R, state: Rc<ConnectionState>) -> GuardedReader<R> {
        GuardedReader {
            inner,
            state,
            buffer: Vec::new(),
            start: 0,
            end: 0,
            ready: 0,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            request_started: None,
            eof: false,
        }
    }

    fn pending(&self) -> &[u8] {
        &self.buffer[self.start..self.end]
    }

    /// The size of the message at the front, once its segment table is in.
    fn frame(&self) -> io::Result<Frame> {
        let bytes = self.pending();
        if bytes.len() < 4 {
            return Ok(Frame::Unknown);
        }
        let segments = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize + 1;
        if segments > SEGMENTS_MAX {
            return Err(invalid(format!("a message declares {segments} segments (at most {SEGMENTS_MAX})")));
        }
        if bytes.len() < 4 + 4 * segments {
            return Ok(Frame::Unknown);
        }
        let table = (4 + 4 * segments).next_multiple_of(8);
        let mut words = 0usize;
        for index in 0..segments {
            let at = 4 + 4 * index;
            words += u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        }
        let size = table + words * 8;
        if size > self.state.limits.request_bytes_max {
            return Err(invalid(format!(
                "a message declares {size} bytes, more than request_bytes_max ({})",
                self.state.limits.request_bytes_max
            )));
        }
        Ok(Frame::Sized(size))
    }

    /// Hands out up to `out.len()` pending bytes.
    fn hand_out(&mut self, out: &mut [u8], available: usize) -> usize {
        let n = available.min(out.len());
        out[..n].copy_from_slice(&self.buffer[self.start..self.start + n]);
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            // Release the room a large request needed; keep a normal one.
            if self.buffer.len() > BUFFER_KEPT_BYTES {
                self.buffer = Vec::new();
                memory_freed();
            }
        }
        n
    }

    /// Makes room for `want` more bytes after `end`, moving pending bytes to the
    /// front when that avoids growing.
    fn room_for(&mut self, want: usize) {
        if self.buffer.len() - self.end >= want {
            return;
        }
        if self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buffer.len() - self.end < want {
            self.buffer.resize(self.end + want, 0);
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for GuardedReader<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut [u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            if this.ready > 0 {
                let n = this.hand_out(out, this.ready);
                this.ready -= n;
                return Poll::Ready(Ok(n));
            }
            // Between messages: take no new request while the peer is not reading
            // its answers, or its large requests are still being served.
            if this.state.reading_paused() {
                *this.state.reader.borrow_mut() = Some(cx.waker().clone());
                if this.state.reading_paused() {
                    // Our own pause: no request timeout runs meanwhile (a started
                    // request's clock restarts when reading does).
                    this.request_started = None;
                    return this.poll_timeouts(cx, true);
                }
                continue;
            }
            let frame = this.frame()?;
            if let Frame::Sized(size) = frame {
                if this.pending().len() >= size {
                    this.ready = size;
                    this.state.request_read(size);
                    // Bytes of the next request may already be here: its clock starts now.
                    this.request_started = (this.pending().len() > size).then(Instant::now);
                    continue;
                }
            }
            if this.eof {
                // A message cut by the peer's close: capnp reports it.
                let available = this.pending().len();
                return Poll::Ready(Ok(this.hand_out(out, available)));
            }
            let between_messages = this.pending().is_empty();
            // Grow with bytes received, never with sizes declared.
            let want = match frame {
                Frame::Sized(size) => (size - this.pending().len()).min(READ_CHUNK_BYTES),
                Frame::Unknown => READ_CHUNK_BYTES,
            };
            this.room_for(want);
            let end = this.end;
            match Pin::new(&mut this.inner).poll_read(cx, &mut this.buffer[end..end + want]) {
                Poll::Ready(Ok(0)) => this.eof = true,
                Poll::Ready(Ok(n)) => {
                    this.end += n;
                    this.state.last_activity.set(Instant::now());
                    if between_messages {
                        this.request_started = Some(Instant::now());
                    }
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return this.poll_timeouts(cx, between_messages),
            }
        }
    }
}

impl<R> GuardedReader<R> {
    /// Nothing to read now: fails the connection if a timeout passed, else arms
    /// the timer for the next check and stays pending.
    fn poll_timeouts(&mut self, cx: &mut Context<'_>, between_messages: bool) -> Poll<io::Result<usize>> {
        let limits = self.state.limits;
        let now = Instant::now();
        let deadline = if between_messages {
            let deadline = self.state.last_activity.get() + limits.idle_timeout;
            if now >= deadline {
                if self.state.idle() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no bytes moved for {} ms with no call in flight", limits.idle_timeout.as_millis()),
                    )));
                }
                // A call is in flight (a long poll): look again later.
                now + limits.idle_timeout.min(Duration::from_secs(1))
            } else {
                deadline
            }
        } else {
            let started = *self.request_started.get_or_insert(now);
            let deadline = started + limits.request_timeout;
            if now >= deadline {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("a request did not arrive whole within {} ms", limits.request_timeout.as_millis()),
                )));
            }
            deadline
        };
        self.timer.as_mut().reset(deadline);
        // Registers the waker; a deadline already passed is looked at again at once.
        if self.timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// The socket's write half, counting what reaches the socket.
#[derive(Debug)]
pub struct GuardedWriter<W> {
    inner: W,
    state: Rc<ConnectionState>,
}

impl<W> GuardedWriter<W> {
    pub fn new(inner: W, state: Rc<ConnectionState>) -> GuardedWriter<W> {
        GuardedWriter { inner, state }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for GuardedWriter<W> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, bytes);
        if let Poll::Ready(Ok(n)) = written {
            this.state.wrote(n);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Whether a large amount of memory was freed since the allocator last gave
/// memory back to the system (see [`give_back_memory`]).
static FREED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Notes that a connection or a large request let go of memory.
pub fn memory_freed() {
    FREED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Returns free heap pages to the system if memory was freed since the last call
/// (glibc keeps them otherwise: after an attack of many small allocations, the
/// broker stayed at its peak). Called once a second by the server; a no-op
/// elsewhere than glibc.
pub fn give_back_memory() {
    if FREED.swap(false, std::sync::atomic::Ordering::Relaxed) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only walks the allocator's own free lists; it is
        // thread-safe and has no preconditions.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use futures::io::Cursor;

    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            request_bytes_max: 1 << 20,
            request_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(600),
            unsent_response_bytes_max: 256 * 1024,
            in_flight_request_bytes_max: 200 * 1024,
        }
    }

    /// One framed single-segment message of `words` words.
    fn message(words: u32) -> Vec<u8> {
        let mut bytes = 0u32.to_le_bytes().to_vec();
        bytes.extend(words.to_le_bytes());
        bytes.resize(8 + words as usize * 8, 0x5a);
        bytes
    }

    /// Reads until `want` bytes came or the reader is pending.
    fn read_now(reader: &mut GuardedReader<Cursor<Vec<u8>>>, want: usize) -> (usize, bool) {
        let mut context = Context::from_waker(Waker::noop());
        let mut buffer = vec![0u8; want];
        let mut read = 0;
        while read < want {
            match Pin::new(&mut *reader).poll_read(&mut context, &mut buffer[read..]) {
                Poll::Ready(Ok(0)) => return (read, false),
                Poll::Ready(Ok(n)) => read += n,
                Poll::Ready(Err(error)) => panic!("{error}"),
                Poll::Pending => return (read, true),
            }
        }
        (read, false)
    }

    #[tokio::test]
    async fn large_requests_pause_reading_until_their_calls_finish() {
        let state = ConnectionState::new(limits());
        let big = message(16 * 1024); // 128 KiB + 8
        let stream = [big.clone(), big.clone(), big.clone()].concat();
        let mut reader = GuardedReader::new(Cursor::new(stream), state.clone());
        let calls: Vec<CallActivity> = (0..2).map(|_| state.call_started()).collect();
        // Two large requests (256 KiB) pass 200 KiB: the third waits.
        assert_eq!(read_now(&mut reader, big.len() * 3), (big.len() * 2, true));
        drop(calls);
        assert_eq!(read_now(&mut reader, big.len()), (big.len(), false), "read again once the calls finished");
    }

    #[tokio::test]
    async fn unread_answers_pause_reading_and_writes_resume_it() {
        let state = ConnectionState::new(limits());
        let small = message(4);
        let mut reader = GuardedReader::new(Cursor::new([small.clone(), small.clone()].concat()), state.clone());
        assert_eq!(read_now(&mut reader, small.len()), (small.len(), false));
        state.answered(300 * 1024);
        assert_eq!(read_now(&mut reader, small.len()), (0, true), "answers unsent: no request is read");
        state.wrote(100 * 1024);
        assert_eq!(read_now(&mut reader, small.len()), (small.len(), false));
    }

    /// Yields its bytes, then waits forever (a peer that stopped sending).
    struct Stalled(Cursor<Vec<u8>>);

    impl AsyncRead for Stalled {
        fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut [u8]) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            match Pin::new(&mut this.0).poll_read(cx, out) {
                Poll::Ready(Ok(0)) => Poll::Pending,
                other => other,
            }
        }
    }

    #[tokio::test]
    async fn a_declared_size_is_never_allocated_before_its_bytes_arrive() {
        let state = ConnectionState::new(limits());
        // A header declaring ~1 MiB, then only 100 bytes of body.
        let mut partial = message((1 << 20) / 8 - 1);
        partial.truncate(108);
        let mut reader = GuardedReader::new(Stalled(Cursor::new(partial)), state);
        let mut context = Context::from_waker(Waker::noop());
        let mut buffer = [0u8; 16];
        let outcome = Pin::new(&mut reader).poll_read(&mut context, &mut buffer);
        assert!(outcome.is_pending(), "nothing of an incomplete message is handed on");
        assert_eq!(reader.end, 108);
        assert!(reader.buffer.capacity() <= 2 * READ_CHUNK_BYTES, "buffer {} bytes", reader.buffer.capacity());
    }

    #[tokio::test]
    async fn a_declared_size_past_the_limit_is_refused_at_its_header() {
        let state = ConnectionState::new(limits());
        let mut reader = GuardedReader::new(Cursor::new(message((2 << 20) / 8)[..8].to_vec()), state);
        let mut context = Context::from_waker(Waker::noop());
        let mut buffer = [0u8; 8];
        let outcome = Pin::new(&mut reader).poll_read(&mut context, &mut buffer);
        assert!(
            matches!(&outcome, Poll::Ready(Err(error)) if error.to_string().contains("more than request_bytes_max")),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn answer_room_waits_for_writes_when_the_budget_is_full() {
        let state = ConnectionState::new(limits());
        let first = state.reserve_answer(200 * 1024).await;
        first.built(200 * 1024);
        let waiting = state.reserve_answer(100 * 1024);
        tokio::pin!(waiting);
        assert!(futures::poll!(waiting.as_mut()).is_pending(), "300 KiB would pass the 256 KiB budget");
        state.wrote(150 * 1024);
        assert!(futures::poll!(waiting.as_mut()).is_ready(), "room came back with the write");
    }
}
