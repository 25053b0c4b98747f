//! Zigzag variable-length integers, as Kafka writes them inside records.
//!
//! Role: the record layer of RecordBatch v2 stores every length, delta and
//! count as a *varint* (zigzag `i32`) or *varlong* (zigzag `i64`), encoded the
//! protobuf way: the zigzag-mapped value is cut into 7-bit groups, least
//! significant group first, and every byte but the last has its high bit set.
//!
//! | value | zigzag | bytes        |
//! |------:|-------:|--------------|
//! |     0 |      0 | `00`         |
//! |    -1 |      1 | `01`         |
//! |     1 |      2 | `02`         |
//! |   -64 |    127 | `7f`         |
//! |    64 |    128 | `80 01`      |
//!
//! Invariants:
//! - encoding is canonical: the shortest form, at most [`MAX_VARINT_BYTES`]
//!   bytes for a varint and [`MAX_VARLONG_BYTES`] for a varlong;
//! - decoding never panics and rejects, with a typed [`VarintError`], input
//!   that ends inside the number, is longer than the maximum, or whose last
//!   permitted byte carries bits beyond the integer's width. Non-canonical but
//!   in-range forms (e.g. `80 00` for 0) are accepted, as Kafka accepts them.

/// Longest encoding of a zigzag `i32` varint, in bytes.
pub const MAX_VARINT_BYTES: usize = 5;
/// Longest encoding of a zigzag `i64` varlong, in bytes.
pub const MAX_VARLONG_BYTES: usize = 10;

const CONTINUATION_BIT: u8 = 0x80;
const PAYLOAD_MASK: u8 = 0x7f;
const PAYLOAD_BITS: u32 = 7;

/// Why a varint or varlong could not be decoded.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended before the byte without a continuation bit.
    #[error("varint truncated: input ended after {available} bytes, inside the number")]
    Truncated {
        /// Bytes that were available (all of them had the continuation bit).
        available: usize,
    },
    /// More bytes than the integer can ever need.
    #[error("varint overlong: more than {max_bytes} bytes")]
    Overlong {
        /// The longest legal encoding for this integer width.
        max_bytes: usize,
    },
    /// The last permitted byte carries bits beyond the integer's width.
    #[error("varint overflows {bits} bits")]
    Overflow {
        /// Width of the integer being decoded.
        bits: u32,
    },
}

/// Appends the zigzag varint encoding of `value` to `out`.
pub fn encode_varint(value: i32, out: &mut Vec<u8>) {
    encode_unsigned(u64::from(zigzag_i32(value)), out);
}

/// Appends the zigzag varlong encoding of `value` to `out`.
pub fn encode_varlong(value: i64, out: &mut Vec<u8>) {
    encode_unsigned(zigzag_i64(value), out);
}

/// Decodes a zigzag varint from the start of `bytes`.
///
/// Returns the value and the number of bytes it occupied.
pub fn decode_varint(bytes: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, used) = decode_unsigned(bytes, MAX_VARINT_BYTES, u32::BITS)?;
    let raw = u32::try_from(raw).map_err(|_| VarintError::Overflow { bits: u32::BITS })?;
    Ok((unzigzag_i32(raw), used))
}

/// Decodes a zigzag varlong from the start of `bytes`.
///
/// Returns the value and the number of bytes it occupied.
pub fn decode_varlong(bytes: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, used) = decode_unsigned(bytes, MAX_VARLONG_BYTES, u64::BITS)?;
    Ok((unzigzag_i64(raw), used))
}

/// Number of bytes [`encode_varint`] writes for `value`.
pub fn varint_size(value: i32) -> usize {
    unsigned_size(u64::from(zigzag_i32(value)))
}

/// Number of bytes [`encode_varlong`] writes for `value`.
pub fn varlong_size(value: i64) -> usize {
    unsigned_size(zigzag_i64(value))
}

fn zigzag_i32(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

fn zigzag_i64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag_i32(raw: u32) -> i32 {
    ((raw >> 1) as i32) ^ -((raw & 1) as i32)
}

fn unzigzag_i64(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}

fn encode_unsigned(mut raw: u64, out: &mut Vec<u8>) {
    while raw >= u64::from(CONTINUATION_BIT) {
        out.push((raw as u8 & PAYLOAD_MASK) | CONTINUATION_BIT);
        raw >>= PAYLOAD_BITS;
    }
    out.push(raw as u8);
}

fn unsigned_size(raw: u64) -> usize {
    let significant_bits = u64::BITS - raw.leading_zeros();
    significant_bits.div_ceil(PAYLOAD_BITS).max(1) as usize
}

/// Decodes the unsigned base-128 number at the start of `bytes`, allowing at
/// most `max_bytes` bytes and `bits` significant bits.
fn decode_unsigned(bytes: &[u8], max_bytes: usize, bits: u32) -> Result<(u64, usize), VarintError> {
    let mut raw = 0u64;
    for (index, &byte) in bytes.iter().take(max_bytes).enumerate() {
        let shift = PAYLOAD_BITS * index as u32;
        let payload = u64::from(byte & PAYLOAD_MASK);
        let is_last_permitted = index + 1 == max_bytes;
        if byte & CONTINUATION_BIT == 0 {
            if is_last_permitted && payload >> (bits - shift) != 0 {
                return Err(VarintError::Overflow { bits });
            }
            return Ok((raw | payload << shift, index + 1));
        }
        if is_last_permitted {
            return Err(VarintError::Overlong { max_bytes });
        }
        raw |= payload << shift;
    }
    Err(VarintError::Truncated { available: bytes.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint_bytes(value: i32) -> Vec<u8> {
        let mut out = Vec::new();
        encode_varint(value, &mut out);
        out
    }

    fn varlong_bytes(value: i64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_varlong(value, &mut out);
        out
    }

    #[test]
    fn varint_vectors_match_kafka() {
        let vectors: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-64, &[0x7f]),
            (63, &[0x7e]),
            (64, &[0x80, 0x01]),
            (-65, &[0x81, 0x01]),
            (300, &[0xd8, 0x04]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for &(value, bytes) in vectors {
            assert_eq!(varint_bytes(value), bytes, "encoding {value}");
            assert_eq!(decode_varint(bytes), Ok((value, bytes.len())), "decoding {value}");
            assert_eq!(varint_size(value), bytes.len(), "size of {value}");
        }
    }

    #[test]
    fn varlong_vectors_match_kafka() {
        let max: &[u8] = &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let min: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let vectors: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (i64::from(i32::MAX), &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i64::MAX, max),
            (i64::MIN, min),
        ];
        for &(value, bytes) in vectors {
            assert_eq!(varlong_bytes(value), bytes, "encoding {value}");
            assert_eq!(decode_varlong(bytes), Ok((value, bytes.len())), "decoding {value}");
            assert_eq!(varlong_size(value), bytes.len(), "size of {value}");
        }
    }

    #[test]
    fn decode_reports_bytes_used_and_ignores_the_rest() {
        assert_eq!(decode_varint(&[0x80, 0x01, 0xff, 0xff]), Ok((64, 2)));
        assert_eq!(decode_varlong(&[0x02, 0x80]), Ok((1, 1)));
    }

    #[test]
    fn non_canonical_in_range_forms_are_accepted() {
        assert_eq!(decode_varint(&[0x80, 0x00]), Ok((0, 2)));
        assert_eq!(decode_varint(&[0x81, 0x80, 0x80, 0x80, 0x00]), Ok((-1, 5)));
    }

    #[test]
    fn truncated_input_is_an_error() {
        assert_eq!(decode_varint(&[]), Err(VarintError::Truncated { available: 0 }));
        assert_eq!(decode_varint(&[0x80, 0x80]), Err(VarintError::Truncated { available: 2 }));
        assert_eq!(decode_varlong(&[0xff; 9]), Err(VarintError::Truncated { available: 9 }));
    }

    #[test]
    fn overlong_input_is_an_error() {
        let six = [0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(decode_varint(&six), Err(VarintError::Overlong { max_bytes: 5 }));
        // The fifth byte still has its continuation bit: overlong even if the
        // input ends there.
        assert_eq!(decode_varint(&six[..5]), Err(VarintError::Overlong { max_bytes: 5 }));
        let eleven = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00];
        assert_eq!(decode_varlong(&eleven), Err(VarintError::Overlong { max_bytes: 10 }));
    }

    #[test]
    fn bits_beyond_the_width_are_an_error() {
        assert_eq!(decode_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]), Err(VarintError::Overflow { bits: 32 }));
        let too_wide = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03];
        assert_eq!(decode_varlong(&too_wide), Err(VarintError::Overflow { bits: 64 }));
    }

    #[test]
    fn every_boundary_round_trips() {
        for shift in 0..32 {
            for value in [1i32 << shift, (1i32 << shift).wrapping_sub(1), (1i32 << shift).wrapping_neg()] {
                let bytes = varint_bytes(value);
                assert_eq!(decode_varint(&bytes), Ok((value, bytes.len())));
                assert_eq!(varint_size(value), bytes.len());
            }
        }
        for shift in 0..64 {
            for value in [1i64 << shift, (1i64 << shift).wrapping_sub(1), (1i64 << shift).wrapping_neg()] {
                let bytes = varlong_bytes(value);
                assert_eq!(decode_varlong(&bytes), Ok((value, bytes.len())));
                assert_eq!(varlong_size(value), bytes.len());
            }
        }
    }
}
