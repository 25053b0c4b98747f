//! Kafka-compatible key partitioning: a record with a key goes to
//! `toPositive(murmur2(key)) % partition_count`, exactly as Java Kafka clients
//! (and librdkafka's `murmur2_random`) place it, so Weir producers and Kafka
//! producers agree on where a key lives.
//!
//! `murmur2` is MurmurHash2 (32-bit) with Kafka's seed `0x9747b28c`, reading 4-byte
//! little-endian words and mixing the 1–3 tail bytes last; `to_positive` masks the
//! sign bit (not `abs`, which would fold `i32::MIN`).

const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

/// Kafka's 32-bit murmur2 of `data`, as a signed Java `int`.
pub fn murmur2(data: &[u8]) -> i32 {
    let mut hash = SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in words.by_ref() {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        hash = hash.wrapping_mul(M) ^ k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (index, byte) in tail.iter().enumerate().rev() {
            hash ^= (*byte as u32) << (8 * index);
        }
        hash = hash.wrapping_mul(M);
    }
    hash ^= hash >> 13;
    hash = hash.wrapping_mul(M);
    hash ^= hash >> 15;
    hash as i32
}

/// Clears the sign bit, as Kafka's `Utils.toPositive`.
pub fn to_positive(number: i32) -> u32 {
    (number & 0x7fff_ffff) as u32
}

/// The partition Kafka's default partitioner picks for a keyed record.
/// `partition_count` must be positive.
pub fn partition_for_key(key: &[u8], partition_count: u32) -> u32 {
    assert!(partition_count > 0, "a topic has at least one partition");
    to_positive(murmur2(key)) % partition_count
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes Kafka's Java implementation produces (as published in other
    /// projects' compatibility tests derived from it).
    #[test]
    fn matches_kafkas_murmur2() {
        let cases: [(&[u8], i32); 5] = [
            (b"1", -1993445489),
            (b"12", 126087238),
            (b"123", -267702483),
            (b"1234", -1614185708),
            (b"12345", -1188365604),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key), expected, "key {:?}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn to_positive_masks_the_sign_bit() {
        assert_eq!(to_positive(-1), 0x7fff_ffff);
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(5), 5);
        assert_eq!(partition_for_key(b"1", 7), to_positive(-1993445489) % 7);
    }
}
