//! Buffers for large received messages (fetch answers), used again once every
//! record made from them is dropped.
//!
//! A connection reads each large message into a buffer of its own, which the
//! records of a fetch answer then share (a few MiB). A fresh allocation per
//! answer leaves that read at the mercy of the allocator's state: in a host
//! process that had just produced a few hundred MB (a Node benchmark), the
//! connection thread wrote every fetched byte into freshly faulted pages, a
//! third of the consumer's page faults and several percent of its CPU. A
//! buffer given back here keeps its pages, so the next answer lands in
//! memory that is already mapped.

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

/// Buffers kept for reuse, at most this many bytes of capacity in all.
pub(crate) const KEPT_BYTES_MAX: usize = 32 << 20;

/// Buffers given back by dropped answers.
#[derive(Debug, Default)]
pub(crate) struct Recycler {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    buffers: Vec<Vec<u8>>,
    capacity: usize,
}

impl Recycler {
    /// An empty buffer with room for `capacity` bytes: a kept one when there is
    /// one (its pages are mapped already), else a new one.
    pub(crate) fn take(&self, capacity: usize) -> Vec<u8> {
        let kept = {
            let mut kept = self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let buffer = kept.buffers.pop();
            if let Some(buffer) = &buffer {
                kept.capacity -= buffer.capacity();
            }
            buffer
        };
        let mut buffer = kept.unwrap_or_default();
        buffer.clear();
        buffer.reserve_exact(capacity);
        buffer
    }

    /// `buffer` as `Bytes`; it comes back here when the last `Bytes` sharing it
    /// is dropped.
    pub(crate) fn share(self: &Arc<Self>, buffer: Vec<u8>) -> Bytes {
        Bytes::from_owner(Lent { buffer, home: Arc::downgrade(self) })
    }

    fn give_back(&self, buffer: Vec<u8>) {
        let mut kept = self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if kept.capacity + buffer.capacity() <= KEPT_BYTES_MAX {
            kept.capacity += buffer.capacity();
            kept.buffers.push(buffer);
        }
    }

    #[cfg(test)]
    fn kept(&self) -> (usize, usize) {
        let kept = self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (kept.buffers.len(), kept.capacity)
    }
}

/// A buffer lent to one answer's `Bytes`.
struct Lent {
    buffer: Vec<u8>,
    home: Weak<Recycler>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.give_back(std::mem::take(&mut self.buffer));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// `bytes` in a buffer from `recycler`, as a connection reads a message.
    fn lend(recycler: &Arc<Recycler>, bytes: &[u8]) -> Bytes {
        let mut buffer = recycler.take(bytes.len());
        buffer.extend_from_slice(bytes);
        recycler.share(buffer)
    }

    #[test]
    fn a_dropped_answer_lends_its_buffer_to_the_next() {
        let recycler = Arc::new(Recycler::default());
        let first = lend(&recycler, b"first answer");
        let address = first.as_ptr();
        let record = first.slice(6..12);
        drop(first);
        assert_eq!(recycler.kept(), (0, 0), "a record still shares the buffer");
        assert_eq!(&record[..], b"answer");
        drop(record);
        assert_eq!(recycler.kept().0, 1);
        let second = lend(&recycler, b"second");
        assert_eq!(second.as_ptr(), address, "the same memory, used again");
        assert_eq!(&second[..], b"second");
        assert_eq!(recycler.kept(), (0, 0));
    }

    #[test]
    fn kept_buffers_are_bounded_and_die_with_the_recycler() {
        let recycler = Arc::new(Recycler::default());
        let big = vec![7u8; KEPT_BYTES_MAX / 2 + 1];
        let answers: Vec<Bytes> = (0..3).map(|_| lend(&recycler, &big)).collect();
        drop(answers);
        let (count, capacity) = recycler.kept();
        assert_eq!(count, 1, "a second buffer would pass the bound");
        assert!(capacity <= KEPT_BYTES_MAX);
        let outlives = lend(&recycler, b"outlives");
        drop(recycler);
        assert_eq!(&outlives[..], b"outlives");
        drop(outlives); // nowhere to go back to: freed
    }
}
