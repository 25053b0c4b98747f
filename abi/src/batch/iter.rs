//! [`BatchIter`]: walks a buffer of concatenated batches.
//!
//! Role: segment scans, recovery and fetch responses hold many batches back
//! to back; the iterator peels them off one at a time with
//! [`BatchView::split_first`].
//!
//! Invariant: it yields views in buffer order, then stops; after the first
//! error (yielded once) it yields nothing more, since the position of any
//! next batch is unknown.

use super::error::BatchError;
use super::view::BatchView;

/// Iterator over concatenated batches; yields `Err` at most once, last.
#[derive(Clone, Debug)]
pub struct BatchIter<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> BatchIter<'a> {
    /// An iterator over the batches in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes, failed: false }
    }

    /// The bytes not consumed yet (after an error: from the failing batch on).
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchView<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        match BatchView::split_first(self.rest) {
            Ok((view, rest)) => {
                self.rest = rest;
                Some(Ok(view))
            }
            Err(error) => {
                self.failed = true;
                Some(Err(error))
            }
        }
    }
}

impl std::iter::FusedIterator for BatchIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_buffer_yields_nothing() {
        assert!(BatchIter::new(&[]).next().is_none());
    }

    #[test]
    fn error_is_yielded_once_then_nothing() {
        let mut iter = BatchIter::new(&[0u8; 5]);
        assert_eq!(
            iter.next().map(|item| item.map(|_| ())),
            Some(Err(BatchError::Truncated { needed: 12, available: 5 }))
        );
        assert!(iter.next().is_none());
        assert_eq!(iter.remaining().len(), 5);
    }
}
