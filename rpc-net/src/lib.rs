//! Cap'n Proto two-party RPC (capnp-rpc's protocol, the standard framing: a
//! segment table, then the segments) with every incoming message read into
//! [`Bytes`] that can be shared.
//!
//! capnp-rpc's own `twoparty` network reads each message into segments it
//! allocates zeroed, and the message is `!Send` and dies with its call: a
//! client had to copy a fetch answer's record bytes out before another thread
//! could see them. Profiled on a Go consumer, the zeroing was 7% of its CPU
//! and the copy out 13%. Here a [`MessageSource`] hands whole messages over
//! as `Bytes` the kernel wrote once: [`SocketReader`] (the client's) cuts
//! small messages out of a shared read buffer and reads large ones (fetch
//! answers) into a buffer of their own, taken from a recycler (`recycle.rs`)
//! so its pages are mapped already. (The broker still reads requests through
//! `twoparty` after its guarded reader: profiled taking 1 KiB produce
//! requests, that zeroing is 9% of its CPU and the copy 7.5%; moving it here
//! held a large request's read buffer past its call, see ARCHITECTURE.md.)
//! While a message of a network
//! made [`Network::sharing_slices`] is alive on its thread, [`shared`] turns
//! any slice of it (a fetch's `batches`) into a `Bytes` sharing that memory:
//! no copy.
//!
//! Sending is capnp-futures' write queue, as in `twoparty`.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use capnp::capability::Promise;
use capnp::message::{Builder, HeapAllocator, ReaderOptions, ReaderSegments};
pub use capnp_rpc::rpc_twoparty_capnp::Side;
use futures::channel::oneshot;
use futures::future::{FutureExt, Shared};
use futures::AsyncWrite;
use tokio::io::AsyncRead;
use tokio_util::io::poll_read_buf;

use crate::recycle::Recycler;

mod recycle;

/// Messages up to this size are cut out of the connection's read buffer
/// (one read often brings several); larger ones get a buffer of their own.
const STAGING_BYTES: usize = 64 * 1024;
/// A message of more segments than this is refused (as capnp does).
pub const SEGMENTS_MAX: usize = 512;

thread_local! {
    /// The messages alive on this thread, for [`shared`].
    static RECEIVED: RefCell<Vec<Bytes>> = const { RefCell::new(Vec::new()) };
}

/// `slice` as `Bytes` sharing the memory of the received message it lies in,
/// with no copy; `None` when it lies in no message alive on this thread of a
/// network [`Network::sharing_slices`] (or in memory that is not a message).
pub fn shared(slice: &[u8]) -> Option<Bytes> {
    let (start, end) = (slice.as_ptr() as usize, slice.as_ptr() as usize + slice.len());
    RECEIVED.with_borrow(|received| {
        received.iter().rev().find_map(|message| {
            let base = message.as_ptr() as usize;
            (start >= base && end <= base + message.len()).then(|| message.slice_ref(slice))
        })
    })
}

/// Where a [`Network`]'s incoming messages come from.
pub trait MessageSource: 'static {
    /// The next whole message, segment table first (as [`segment_table`]
    /// frames it); `None` at a clean end of the stream, an error for a stream
    /// cut inside a message.
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<capnp::Result<Option<Bytes>>>;
}

/// A two-party network over one connection; `side` is this end's.
pub struct Network<S: MessageSource> {
    /// What `accept` hands out (once).
    connection: Option<Connection<S>>,
    /// What `connect` hands out, while the connection lives.
    weak: Weak<RefCell<Inner<S>>>,
    /// The write queue, then the connection's end.
    driver: Shared<Promise<(), capnp::Error>>,
    side: Side,
}

impl<S: MessageSource> Network<S> {
    /// Messages come from `source` and are read with `options`; answers go
    /// to `writer` (buffer it).
    pub fn new<W: AsyncWrite + Unpin + 'static>(
        source: S,
        writer: W,
        side: Side,
        options: ReaderOptions,
    ) -> Network<S> {
        let (ended, on_end) = oneshot::channel::<()>();
        let (sender, queue) = capnp_futures::write_queue(writer);
        // Written out, and the connection dropped by the RPC system: only then
        // is the network done (even when writing failed).
        let driver = Promise::from_future(async move {
            let written = queue.await;
            let _ = on_end.await;
            written
        })
        .shared();
        let inner = Rc::new(RefCell::new(Inner {
            source: Rc::new(RefCell::new(Some(source))),
            sender,
            side,
            options,
            sharing: false,
            ended: Some(ended),
        }));
        let weak = Rc::downgrade(&inner);
        Network { connection: Some(Connection { inner }), weak, driver, side }
    }
}

impl<S: MessageSource> Network<S> {
    /// Registers every message while it lives, so that [`shared`] finds
    /// slices of it (a client's fetch answers). Off by default: a server
    /// needs none, and keeping the list costs a look-up per message.
    pub fn sharing_slices(self) -> Network<S> {
        if let Some(connection) = &self.connection {
            connection.inner.borrow_mut().sharing = true;
        }
        self
    }
}

impl<S: MessageSource> std::fmt::Debug for Network<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network").field("side", &self.side).finish_non_exhaustive()
    }
}

impl<S: MessageSource> capnp_rpc::VatNetwork<Side> for Network<S> {
    fn connect(&mut self, host_id: Side) -> Option<Box<dyn capnp_rpc::Connection<Side>>> {
        if host_id == self.side {
            return None;
        }
        let inner = self.weak.upgrade()?;
        Some(Box::new(Connection { inner }))
    }

    fn accept(&mut self) -> Promise<Box<dyn capnp_rpc::Connection<Side>>, capnp::Error> {
        match self.connection.take() {
            Some(connection) => Promise::ok(Box::new(connection) as Box<dyn capnp_rpc::Connection<Side>>),
            None => Promise::from_future(futures::future::pending()),
        }
    }

    fn drive_until_shutdown(&mut self) -> Promise<(), capnp::Error> {
        Promise::from_future(self.driver.clone())
    }
}

type Sender = capnp_futures::Sender<Rc<Builder<HeapAllocator>>>;

struct Inner<S: MessageSource> {
    /// Taken out while a message is being read, put back after.
    source: Rc<RefCell<Option<S>>>,
    sender: Sender,
    side: Side,
    options: ReaderOptions,
    /// Whether messages are registered for [`shared`].
    sharing: bool,
    /// Fired when the RPC system lets go of the connection.
    ended: Option<oneshot::Sender<()>>,
}

impl<S: MessageSource> Drop for Inner<S> {
    fn drop(&mut self) {
        if let Some(ended) = self.ended.take() {
            let _ = ended.send(());
        }
    }
}

struct Connection<S: MessageSource> {
    inner: Rc<RefCell<Inner<S>>>,
}

impl<S: MessageSource> capnp_rpc::Connection<Side> for Connection<S> {
    fn get_peer_vat_id(&self) -> Side {
        self.inner.borrow().side
    }

    fn new_outgoing_message(&mut self, first_segment_word_size: u32) -> Box<dyn capnp_rpc::OutgoingMessage> {
        let message = Builder::new(HeapAllocator::new().first_segment_words(first_segment_word_size));
        Box::new(OutgoingMessage { message, sender: self.inner.borrow().sender.clone() })
    }

    fn receive_incoming_message(&mut self) -> Promise<Option<Box<dyn capnp_rpc::IncomingMessage>>, capnp::Error> {
        let (slot, options, sharing) = {
            let inner = self.inner.borrow();
            (inner.source.clone(), inner.options, inner.sharing)
        };
        let Some(mut source) = slot.borrow_mut().take() else {
            return Promise::err(capnp::Error::failed("a message is already being read".to_owned()));
        };
        Promise::from_future(async move {
            let message = futures::future::poll_fn(|cx| source.poll_message(cx)).await;
            *slot.borrow_mut() = Some(source);
            Ok(match message? {
                Some(bytes) => {
                    let message = IncomingMessage::new(bytes, options, sharing)?;
                    Some(Box::new(message) as Box<dyn capnp_rpc::IncomingMessage>)
                }
                None => None,
            })
        })
    }

    fn shutdown(&mut self, result: capnp::Result<()>) -> Promise<(), capnp::Error> {
        Promise::from_future(self.inner.borrow_mut().sender.terminate(result))
    }
}

struct OutgoingMessage {
    message: Builder<HeapAllocator>,
    sender: Sender,
}

impl capnp_rpc::OutgoingMessage for OutgoingMessage {
    fn get_body(&mut self) -> capnp::Result<capnp::any_pointer::Builder<'_>> {
        self.message.get_root()
    }

    fn get_body_as_reader(&self) -> capnp::Result<capnp::any_pointer::Reader<'_>> {
        self.message.get_root_as_reader()
    }

    fn send(self: Box<Self>) -> (Promise<(), capnp::Error>, Rc<Builder<HeapAllocator>>) {
        let OutgoingMessage { message, mut sender } = *self;
        let message = Rc::new(message);
        let written = sender.send(message.clone());
        (Promise::from_future(written.map(|written| written.map(drop))), message)
    }

    fn take(self: Box<Self>) -> Builder<HeapAllocator> {
        self.message
    }

    fn size_in_words(&self) -> usize {
        self.message.size_in_words()
    }
}

/// A received message, registered for [`shared`] while it lives.
struct IncomingMessage {
    message: capnp::message::Reader<Segments>,
    /// Whether it is in `RECEIVED`.
    registered: bool,
}

impl IncomingMessage {
    fn new(bytes: Bytes, options: ReaderOptions, register: bool) -> capnp::Result<IncomingMessage> {
        let segments = Segments::parse(bytes)?;
        if register {
            RECEIVED.with_borrow_mut(|received| received.push(segments.bytes.clone()));
        }
        Ok(IncomingMessage { message: capnp::message::Reader::new(segments, options), registered: register })
    }
}

impl capnp_rpc::IncomingMessage for IncomingMessage {
    fn get_body(&self) -> capnp::Result<capnp::any_pointer::Reader<'_>> {
        self.message.get_root()
    }
}

impl Drop for IncomingMessage {
    fn drop(&mut self) {
        if !self.registered {
            return;
        }
        let bytes = &self.message.get_segments().bytes;
        // Messages die in about the order they came: the oldest is near the front.
        let _ = RECEIVED.try_with(|received| {
            let mut received = received.borrow_mut();
            if let Some(at) = received.iter().position(|alive| alive.as_ptr() == bytes.as_ptr()) {
                received.swap_remove(at);
            }
        });
    }
}

/// One message's bytes (segment table included) and where each segment lies.
struct Segments {
    bytes: Bytes,
    bounds: Vec<(usize, usize)>,
}

impl Segments {
    /// The segments of a whole message `bytes` (as [`segment_table`] sized it).
    fn parse(bytes: Bytes) -> capnp::Result<Segments> {
        let bytes = aligned(bytes);
        let lengths = segment_table(&bytes)?.ok_or_else(|| capnp::Error::failed("a cut message".to_owned()))?;
        let mut at = table_bytes(lengths.len());
        let mut bounds = Vec::with_capacity(lengths.len());
        for words in lengths {
            bounds.push((at, at + words * 8));
            at += words * 8;
        }
        if at != bytes.len() {
            return Err(capnp::Error::failed(format!("a message of {} bytes framed as {at}", bytes.len())));
        }
        Ok(Segments { bytes, bounds })
    }
}

impl ReaderSegments for Segments {
    fn get_segment(&self, idx: u32) -> Option<&[u8]> {
        let (start, end) = *self.bounds.get(idx as usize)?;
        Some(&self.bytes[start..end])
    }

    fn len(&self) -> usize {
        self.bounds.len()
    }
}

/// `bytes` at an 8-byte aligned address, as capnp reads words: as it is
/// (reads land at the start of a malloc'd buffer or at a multiple of 8 bytes
/// after one), else copied.
fn aligned(bytes: Bytes) -> Bytes {
    if (bytes.as_ptr() as usize).is_multiple_of(8) {
        return bytes;
    }
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut le = [0u8; 8];
        le[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(le);
    }
    Bytes::from_owner(Words { words, len: bytes.len() })
}

struct Words {
    words: Vec<u64>,
    len: usize,
}

impl AsRef<[u8]> for Words {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: u64s are 8 initialised bytes each; `len` is at most 8 per word.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

/// The size of a segment table for `count` segments: a word with the count
/// and the first length, then the other lengths, padded to a whole word.
pub fn table_bytes(count: usize) -> usize {
    (count / 2 + 1) * 8
}

/// The segment lengths (in words) the table at the start of `bytes` gives;
/// `None` until `bytes` holds the whole table.
pub fn segment_table(bytes: &[u8]) -> capnp::Result<Option<Vec<usize>>> {
    let word =
        |at: usize| -> Option<usize> { Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize) };
    let Some(count) = word(0).map(|minus_one| minus_one.saturating_add(1)) else { return Ok(None) };
    if count > SEGMENTS_MAX {
        return Err(capnp::Error::failed(format!("a message of {count} segments (at most {SEGMENTS_MAX})")));
    }
    if bytes.len() < table_bytes(count) {
        return Ok(None);
    }
    Ok((0..count).map(|segment| word(4 + segment * 4)).collect())
}

/// Reads whole messages off a socket: the [`MessageSource`] of a client's
/// connection.
pub struct SocketReader<R> {
    stream: R,
    /// Bytes read and not yet handed out (the start of the next messages).
    staging: BytesMut,
    /// A large message being read into its own buffer, and its size.
    large: Option<(Vec<u8>, usize)>,
    recycler: Arc<Recycler>,
    /// Largest message read.
    message_bytes_max: usize,
}

impl<R> std::fmt::Debug for SocketReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketReader")
            .field("staged", &self.staging.len())
            .field("large", &self.large.as_ref().map(|(buffer, total)| (buffer.len(), *total)))
            .finish_non_exhaustive()
    }
}

impl<R> SocketReader<R> {
    /// Reads `stream`, refusing messages of more than `message_bytes_max`.
    pub fn new(stream: R, message_bytes_max: usize) -> SocketReader<R> {
        SocketReader { stream, staging: BytesMut::new(), large: None, recycler: Arc::default(), message_bytes_max }
    }
}

impl<R: AsyncRead + Unpin + 'static> MessageSource for SocketReader<R> {
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<capnp::Result<Option<Bytes>>> {
        let cut = || capnp::Error::from_kind(capnp::ErrorKind::PrematureEndOfFile);
        loop {
            if let Some((buffer, total)) = &mut self.large {
                while buffer.len() < *total {
                    let room = *total - buffer.len();
                    if ready!(poll_read_buf(Pin::new(&mut self.stream), cx, &mut (&mut *buffer).limit(room)))? == 0 {
                        return Poll::Ready(Err(cut()));
                    }
                }
                let Some((buffer, _)) = self.large.take() else { unreachable!("matched above") };
                return Poll::Ready(Ok(Some(self.recycler.share(buffer))));
            }
            match segment_table(&self.staging)? {
                Some(lengths) => {
                    let total = table_bytes(lengths.len()) + lengths.iter().sum::<usize>() * 8;
                    if total > self.message_bytes_max {
                        return Poll::Ready(Err(capnp::Error::failed(format!(
                            "a message of {total} bytes, more than the {} this connection reads",
                            self.message_bytes_max
                        ))));
                    }
                    if self.staging.len() >= total {
                        return Poll::Ready(Ok(Some(self.staging.split_to(total).freeze())));
                    }
                    if total > STAGING_BYTES {
                        // Into a buffer of its own, what was staged first (all of
                        // it this message's: less than `total` is staged).
                        let mut buffer = self.recycler.take(total);
                        buffer.extend_from_slice(&self.staging);
                        self.staging.clear();
                        self.large = Some((buffer, total));
                        continue;
                    }
                    self.staging.reserve(total - self.staging.len());
                }
                None => self.staging.reserve(STAGING_BYTES / 2),
            }
            if ready!(poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.staging))? == 0 {
                return Poll::Ready(match self.staging.is_empty() {
                    true => Ok(None),
                    false => Err(cut()),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A message's framing as capnp writes it.
    fn framed(message: &Builder<HeapAllocator>) -> Vec<u8> {
        capnp::serialize::write_message_to_words(message)
    }

    fn message(text: &str, first_segment_words: u32) -> Builder<HeapAllocator> {
        let mut message = Builder::new(HeapAllocator::new().first_segment_words(first_segment_words));
        let mut list = message.initn_root::<capnp::text_list::Builder<'_>>(64);
        for index in 0..64 {
            list.set(index, text);
        }
        message
    }

    fn texts(bytes: Bytes) -> Vec<String> {
        let message = IncomingMessage::new(bytes, ReaderOptions::new(), false).unwrap();
        let list: capnp::text_list::Reader<'_> = message.message.get_root().unwrap();
        list.iter().map(|text| text.unwrap().to_string().unwrap()).collect()
    }

    async fn next<S: MessageSource>(source: &mut S) -> capnp::Result<Option<Bytes>> {
        futures::future::poll_fn(|cx| source.poll_message(cx)).await
    }

    /// Reads every message of `stream`, the socket yielding `chunk` bytes a read.
    async fn read_all(stream: Vec<u8>, chunk: usize) -> Vec<Bytes> {
        let (mut near, far) = tokio::io::duplex(chunk);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            near.write_all(&stream).await.unwrap();
        });
        let mut reader = SocketReader::new(far, usize::MAX);
        let mut messages = Vec::new();
        while let Some(message) = next(&mut reader).await.unwrap() {
            messages.push(message);
        }
        writer.await.unwrap();
        messages
    }

    #[tokio::test]
    async fn small_and_large_multi_segment_messages_read_back_whole() {
        let small = message("small", 0);
        // Tiny first segments make capnp spill into several.
        let large = message(&"x".repeat(4096), 1);
        assert!(large.get_segments_for_output().len() > 1, "the large message has several segments");
        let mut stream = Vec::new();
        for _ in 0..3 {
            stream.extend(framed(&small));
            stream.extend(framed(&large));
        }
        for chunk in [7, 4096, 1 << 20] {
            let messages = read_all(stream.clone(), chunk).await;
            assert_eq!(messages.len(), 6, "chunk {chunk}");
            for (index, bytes) in messages.into_iter().enumerate() {
                let expected = if index % 2 == 0 { "small".to_owned() } else { "x".repeat(4096) };
                assert_eq!(texts(bytes), vec![expected; 64], "message {index}, chunk {chunk}");
            }
        }
    }

    #[tokio::test]
    async fn a_stream_cut_inside_a_message_is_an_error() {
        let mut stream = framed(&message("whole", 0));
        let cut = framed(&message("cut", 0));
        stream.extend_from_slice(&cut[..cut.len() - 3]);
        let (mut near, far) = tokio::io::duplex(1 << 16);
        use tokio::io::AsyncWriteExt;
        near.write_all(&stream).await.unwrap();
        drop(near);
        let mut reader = SocketReader::new(far, usize::MAX);
        assert!(next(&mut reader).await.unwrap().is_some());
        assert!(next(&mut reader).await.is_err());
    }

    #[test]
    fn slices_of_live_messages_are_shared_not_copied() {
        let bytes = Bytes::from(framed(&message("shared", 0)));
        let incoming = IncomingMessage::new(bytes.clone(), ReaderOptions::new(), true).unwrap();
        let inside = &bytes[16..40];
        let shared_slice = shared(inside).unwrap();
        assert_eq!(shared_slice.as_ptr(), inside.as_ptr(), "the same memory");
        assert!(shared(b"elsewhere").is_none());
        drop(incoming);
        assert!(shared(inside).is_none(), "a dropped message is no longer found");
        assert_eq!(&shared_slice[..], inside, "the shared bytes outlive the message");
    }

    #[test]
    fn misaligned_and_hostile_framings_are_refused_or_fixed() {
        let framing = framed(&message("aligned", 0));
        let mut offset = vec![0u8; framing.len() + 1];
        offset[1..].copy_from_slice(&framing);
        let misaligned = Bytes::from(offset).slice(1..);
        assert_eq!(texts(misaligned), vec!["aligned".to_owned(); 64]);
        let too_many = (SEGMENTS_MAX as u32).to_le_bytes();
        assert!(segment_table(&[too_many[0], too_many[1], too_many[2], too_many[3], 0, 0, 0, 0]).is_err());
        assert!(Segments::parse(Bytes::from(framing[..framing.len() - 8].to_vec())).is_err(), "shorter than framed");
    }
}
