//! Compression of a batch's records section: LZ4 frames and Zstandard, as
//! Kafka writes them.
//!
//! Role: the one place the codec libraries are called. The full encoder
//! ([`RecordBatch::encode`](super::RecordBatch::encode)) compresses through
//! [`compress`]; the full decoder
//! ([`RecordBatch::decode`](super::RecordBatch::decode)) decompresses
//! through [`decompress`]. The broker's hot path
//! ([`BatchView`](super::BatchView)) never comes here: it checks the CRC over
//! the compressed bytes and stores them as they are.
//!
//! What is compressed: in RecordBatch v2 the records section (every byte
//! after the 61-byte header, i.e. the concatenated records) is compressed as
//! one stream; the header, records count included, stays uncompressed, and
//! the CRC covers the compressed bytes.
//!
//! | codec | support                                                      |
//! |-------|--------------------------------------------------------------|
//! | none  | records stored as is                                         |
//! | gzip  | [`BatchError::UnsupportedCompression`]                       |
//! | snappy| [`BatchError::UnsupportedCompression`]                       |
//! | lz4   | LZ4 frame format (magic `0x184D2204`); written as Kafka's producer does: independent 64 KiB blocks, no checksums, no content size; any valid frame is read |
//! | zstd  | standard zstd frames (magic `0xFD2FB528`), written at level 3 |
//!
//! Invariants:
//! - decompression is bounded: at most `decompressed_bytes_max` bytes are
//!   ever produced (the caller passes [`DECOMPRESSED_BYTES_MAX`] by default),
//!   and one byte more is [`BatchError::DecompressedTooLarge`], so a small
//!   "bomb" cannot make the decoder allocate without limit. Besides the
//!   output, LZ4 buffers one block (8 MiB at most) and zstd one window (at
//!   most 2^27 bytes, zstd's own default limit, which Kafka's highest level
//!   22 needs);
//! - corrupt or truncated compressed data, or bytes after the last frame
//!   that are not another frame, are [`BatchError::Decompression`], never a
//!   panic;
//! - compressing into memory cannot fail for the supported codecs.
//!
//! [`DECOMPRESSED_BYTES_MAX`]: super::DECOMPRESSED_BYTES_MAX

use std::borrow::Cow;
use std::io::{self, Read, Write};

use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};

use super::attributes::Compression;
use super::error::BatchError;

/// Zstandard level the encoder writes (Kafka's default `compression.zstd.level`).
const ZSTD_LEVEL: i32 = 3;

/// [`BatchError::UnsupportedCompression`] unless this build can encode and
/// decode `compression`.
pub(crate) fn require_supported(compression: Compression) -> Result<(), BatchError> {
    match compression {
        Compression::None | Compression::Lz4 | Compression::Zstd => Ok(()),
        Compression::Gzip | Compression::Snappy => Err(BatchError::UnsupportedCompression { compression }),
    }
}

/// Appends `records` to `out`, compressed with `compression` (as is for
/// [`Compression::None`]).
///
/// Fails only with [`BatchError::UnsupportedCompression`].
pub(crate) fn compress(compression: Compression, records: &[u8], out: &mut Vec<u8>) -> Result<(), BatchError> {
    match compression {
        Compression::None => out.extend_from_slice(records),
        Compression::Lz4 => compress_lz4(records, out),
        Compression::Zstd => {
            zstd::stream::copy_encode(records, out, ZSTD_LEVEL)
                .expect("zstd writing into a Vec at a valid level fails only if it cannot allocate its context");
        }
        Compression::Gzip | Compression::Snappy => return Err(BatchError::UnsupportedCompression { compression }),
    }
    Ok(())
}

/// One LZ4 frame as Kafka's producer writes it (`KafkaLZ4BlockOutputStream`):
/// frame descriptor `FLG 0x60` (version 1, independent blocks, no checksums,
/// no content size) and `BD 0x40` (64 KiB blocks).
fn compress_lz4(records: &[u8], out: &mut Vec<u8>) {
    let frame_info = FrameInfo::new().block_size(BlockSize::Max64KB).block_mode(BlockMode::Independent);
    let mut encoder = FrameEncoder::with_frame_info(frame_info, out);
    encoder.write_all(records).expect("LZ4 compression into a Vec cannot fail");
    encoder.finish().expect("finishing an LZ4 frame into a Vec cannot fail");
}

/// The records section of a batch compressed with `compression`,
/// decompressed: borrowed as is for [`Compression::None`], otherwise at most
/// `decompressed_bytes_max` bytes (see the module invariants).
pub(crate) fn decompress(
    compression: Compression,
    section: &[u8],
    decompressed_bytes_max: usize,
) -> Result<Cow<'_, [u8]>, BatchError> {
    if compression == Compression::None {
        return Ok(Cow::Borrowed(section));
    }
    let mut decompressed = Vec::new();
    decompress_into(compression, section, &mut decompressed, decompressed_bytes_max)?;
    Ok(Cow::Owned(decompressed))
}

/// [`decompress`] of a compressed section into `out` (cleared first), so a caller
/// that decompresses batch after batch reuses one buffer. [`Compression::None`]
/// copies the section.
pub(crate) fn decompress_into(
    compression: Compression,
    section: &[u8],
    out: &mut Vec<u8>,
    decompressed_bytes_max: usize,
) -> Result<(), BatchError> {
    out.clear();
    match compression {
        Compression::None => {
            if section.len() > decompressed_bytes_max {
                return Err(BatchError::DecompressedTooLarge { compression, limit: decompressed_bytes_max });
            }
            out.extend_from_slice(section);
        }
        Compression::Lz4 => decompress_lz4(section, out, decompressed_bytes_max)?,
        Compression::Zstd => {
            let decoder = zstd::stream::read::Decoder::with_buffer(section).map_err(decompression(compression))?;
            read_bounded(compression, decoder, out, decompressed_bytes_max)?;
        }
        Compression::Gzip | Compression::Snappy => return Err(BatchError::UnsupportedCompression { compression }),
    }
    Ok(())
}

/// Decodes the LZ4 frames filling `section`, one after another.
///
/// The frame decoder stops at the end of one frame, so this loop is what
/// makes bytes after it count: another frame is decoded, anything else is
/// [`BatchError::Decompression`]. (A frame cut inside its last 4 bytes, the
/// end mark, is accepted: no data is lost, and the records must still parse
/// to exactly the records count.)
fn decompress_lz4(section: &[u8], decompressed: &mut Vec<u8>, decompressed_bytes_max: usize) -> Result<(), BatchError> {
    let mut rest = section;
    while !rest.is_empty() {
        let mut decoder = FrameDecoder::new(rest);
        read_bounded(Compression::Lz4, &mut decoder, decompressed, decompressed_bytes_max)?;
        let after = decoder.into_inner();
        if after.len() == rest.len() {
            let reason = "LZ4 frame decoder made no progress".to_owned();
            return Err(BatchError::Decompression { compression: Compression::Lz4, reason });
        }
        rest = after;
    }
    Ok(())
}

/// Appends what `decoder` yields to `decompressed` until the decoder ends,
/// or fails once `decompressed` would exceed `decompressed_bytes_max`.
fn read_bounded(
    compression: Compression,
    decoder: impl Read,
    decompressed: &mut Vec<u8>,
    decompressed_bytes_max: usize,
) -> Result<(), BatchError> {
    let budget = decompressed_bytes_max.saturating_sub(decompressed.len());
    let read_max = u64::try_from(budget).unwrap_or(u64::MAX).saturating_add(1);
    decoder.take(read_max).read_to_end(decompressed).map_err(decompression(compression))?;
    if decompressed.len() > decompressed_bytes_max {
        return Err(BatchError::DecompressedTooLarge { compression, limit: decompressed_bytes_max });
    }
    Ok(())
}

/// Maps a codec library's error to [`BatchError::Decompression`].
fn decompression(compression: Compression) -> impl Fn(io::Error) -> BatchError {
    move |error| BatchError::Decompression { compression, reason: error.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressed(compression: Compression, records: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        compress(compression, records, &mut out).expect("supported codec");
        out
    }

    #[test]
    fn lz4_frame_descriptor_is_kafkas() {
        // Magic 0x184D2204 little-endian, FLG 0x60, BD 0x40, and the header
        // checksum 0x82 the reference `lz4 -BI -B4 --no-frame-crc` writes.
        let out = compressed(Compression::Lz4, b"records");
        assert_eq!(out[..7], [0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82]);
    }

    #[test]
    fn zstd_output_is_a_zstd_frame() {
        let out = compressed(Compression::Zstd, b"records");
        assert_eq!(out[..4], 0xfd2f_b528u32.to_le_bytes());
    }

    #[test]
    fn none_is_borrowed_as_is() {
        assert_eq!(compressed(Compression::None, b"abc"), b"abc");
        let section = decompress(Compression::None, b"abc", 0).expect("none never fails");
        assert!(matches!(section, Cow::Borrowed(b"abc")));
    }

    #[test]
    fn round_trips_and_limit_is_inclusive() {
        let records: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for compression in [Compression::Lz4, Compression::Zstd] {
            let out = compressed(compression, &records);
            let exact = decompress(compression, &out, records.len()).expect("fits exactly");
            assert_eq!(exact.as_ref(), &records[..], "{compression}");
            assert_eq!(
                decompress(compression, &out, records.len() - 1),
                Err(BatchError::DecompressedTooLarge { compression, limit: records.len() - 1 })
            );
        }
    }

    #[test]
    fn concatenated_frames_decode_and_count_against_one_limit() {
        for compression in [Compression::Lz4, Compression::Zstd] {
            let two_frames = [compressed(compression, b"first "), compressed(compression, b"second")].concat();
            let both = decompress(compression, &two_frames, 12).expect("two valid frames");
            assert_eq!(both.as_ref(), b"first second", "{compression}");
            assert_eq!(
                decompress(compression, &two_frames, 11),
                Err(BatchError::DecompressedTooLarge { compression, limit: 11 })
            );
        }
    }

    #[test]
    fn gzip_and_snappy_are_unsupported_both_ways() {
        for compression in [Compression::Gzip, Compression::Snappy] {
            let unsupported = Err(BatchError::UnsupportedCompression { compression });
            assert_eq!(compress(compression, b"x", &mut Vec::new()), unsupported);
            assert_eq!(decompress(compression, b"x", 1).map(|_| ()), unsupported);
        }
    }

    #[test]
    fn garbage_is_a_decompression_error() {
        for compression in [Compression::Lz4, Compression::Zstd] {
            let result = decompress(compression, b"definitely not compressed", 1 << 20);
            assert!(
                matches!(&result, Err(BatchError::Decompression { compression: c, .. }) if *c == compression),
                "{compression}: {result:?}"
            );
        }
    }
}
