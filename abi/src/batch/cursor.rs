//! [`Cursor`]: a forward-only reader over the record bytes of one batch.
//!
//! Role: the only place the record decoder touches raw bytes, so every read
//! is bounds-checked in one spot. Each read takes the operator-facing reason
//! to report if it fails, and failures become [`BatchError::Malformed`]:
//! inside a batch whose length was already checked, running out of bytes
//! means the batch is malformed, not truncated.
//!
//! Invariant: a cursor never reads past the slice it was given and never
//! panics; after an error its position is unspecified (callers stop).

use super::error::BatchError;
use crate::varint;

/// Forward-only reader over a byte slice.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// Whether everything was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Reads one signed byte.
    pub(crate) fn read_i8(&mut self, reason: &'static str) -> Result<i8, BatchError> {
        let [byte] = self.read_array::<1>(reason)?;
        Ok(i8::from_be_bytes([byte]))
    }

    /// Reads a zigzag varint.
    pub(crate) fn read_varint(&mut self, reason: &'static str) -> Result<i32, BatchError> {
        let (value, used) = varint::decode_varint(self.bytes).map_err(|_| BatchError::malformed(reason))?;
        self.advance(used);
        Ok(value)
    }

    /// Reads a zigzag varlong.
    pub(crate) fn read_varlong(&mut self, reason: &'static str) -> Result<i64, BatchError> {
        let (value, used) = varint::decode_varlong(self.bytes).map_err(|_| BatchError::malformed(reason))?;
        self.advance(used);
        Ok(value)
    }

    /// Reads the next `len` bytes.
    pub(crate) fn read_bytes(&mut self, len: usize, reason: &'static str) -> Result<&'a [u8], BatchError> {
        if len > self.bytes.len() {
            return Err(BatchError::malformed(reason));
        }
        let (taken, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(taken)
    }

    fn read_array<const N: usize>(&mut self, reason: &'static str) -> Result<[u8; N], BatchError> {
        let taken = self.read_bytes(N, reason)?;
        let mut out = [0u8; N];
        out.copy_from_slice(taken);
        Ok(out)
    }

    fn advance(&mut self, len: usize) {
        self.bytes = self.bytes.get(len..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_order_and_reports_the_given_reason() {
        let mut cursor = Cursor::new(&[0xff, 0x80, 0x01, 0x03, b'a', b'b']);
        assert_eq!(cursor.read_i8("i8"), Ok(-1));
        assert_eq!(cursor.read_varint("varint"), Ok(64));
        assert_eq!(cursor.read_varlong("varlong"), Ok(-2));
        assert_eq!(cursor.remaining(), 2);
        assert_eq!(cursor.read_bytes(3, "too long"), Err(BatchError::malformed("too long")));
        assert_eq!(cursor.read_bytes(2, "bytes"), Ok(&b"ab"[..]));
        assert!(cursor.is_empty());
        assert_eq!(cursor.read_i8("empty"), Err(BatchError::malformed("empty")));
        assert_eq!(cursor.read_varint("no varint"), Err(BatchError::malformed("no varint")));
    }
}
