//! [`Attributes`]: the 16-bit attributes field of a batch, and the
//! [`Compression`] and [`TimestampType`] it encodes.
//!
//! Role: typed access to the bits Kafka packs into the attributes field.
//!
//! | bits  | meaning                                                   |
//! |-------|-----------------------------------------------------------|
//! | 0-2   | compression codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd |
//! | 3     | timestamp type: 0 create time, 1 log append time          |
//! | 4     | is transactional                                          |
//! | 5     | is control batch                                          |
//! | 6     | has delete horizon (base timestamp is the delete horizon) |
//! | 7-15  | unused, must be 0 (kept as is by this codec)              |
//!
//! Invariant: an [`Attributes`] value is the raw field; unknown or unused
//! bits are preserved, never silently dropped, and only reading the codec can
//! fail (codecs 5 to 7 are [`BatchError::UnknownCompression`]).

use std::fmt;

use super::error::BatchError;

const COMPRESSION_MASK: u16 = 0b111;
const TIMESTAMP_TYPE_BIT: u16 = 1 << 3;
const TRANSACTIONAL_BIT: u16 = 1 << 4;
const CONTROL_BIT: u16 = 1 << 5;
const DELETE_HORIZON_BIT: u16 = 1 << 6;

/// Compression codec of a batch's records (attributes bits 0-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Compression {
    /// Records are stored as is.
    None = 0,
    /// gzip.
    Gzip = 1,
    /// Snappy (xerial framing).
    Snappy = 2,
    /// LZ4 frame.
    Lz4 = 3,
    /// Zstandard.
    Zstd = 4,
}

impl Compression {
    /// The codec for the attribute bits `codec` (0 to 7).
    pub fn from_codec(codec: u8) -> Result<Self, BatchError> {
        match codec {
            0 => Ok(Self::None),
            1 => Ok(Self::Gzip),
            2 => Ok(Self::Snappy),
            3 => Ok(Self::Lz4),
            4 => Ok(Self::Zstd),
            _ => Err(BatchError::UnknownCompression { codec }),
        }
    }

    /// The attribute bits of this codec.
    pub fn codec(self) -> u8 {
        self as u8
    }

    /// Kafka's name for the codec (as in `compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Meaning of the batch timestamps (attributes bit 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampType {
    /// Timestamps were set by the producer.
    CreateTime,
    /// The broker overwrote the max timestamp with its append time.
    LogAppendTime,
}

/// The attributes field of a batch, bit for bit (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attributes(pub u16);

impl Attributes {
    /// The compression codec; codecs 5 to 7 are
    /// [`BatchError::UnknownCompression`].
    pub fn compression(self) -> Result<Compression, BatchError> {
        Compression::from_codec((self.0 & COMPRESSION_MASK) as u8)
    }

    /// The timestamp type.
    pub fn timestamp_type(self) -> TimestampType {
        if self.has(TIMESTAMP_TYPE_BIT) {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(self) -> bool {
        self.has(TRANSACTIONAL_BIT)
    }

    /// Whether the batch holds control records (transaction markers).
    pub fn is_control(self) -> bool {
        self.has(CONTROL_BIT)
    }

    /// Whether the base timestamp holds a delete horizon (set by compaction).
    pub fn has_delete_horizon(self) -> bool {
        self.has(DELETE_HORIZON_BIT)
    }

    /// These attributes with the codec bits set to `compression`.
    pub fn with_compression(self, compression: Compression) -> Self {
        Self((self.0 & !COMPRESSION_MASK) | u16::from(compression.codec()))
    }

    /// These attributes with the timestamp type bit set for `timestamp_type`.
    pub fn with_timestamp_type(self, timestamp_type: TimestampType) -> Self {
        self.with(TIMESTAMP_TYPE_BIT, timestamp_type == TimestampType::LogAppendTime)
    }

    /// These attributes with the transactional bit set to `transactional`.
    pub fn with_transactional(self, transactional: bool) -> Self {
        self.with(TRANSACTIONAL_BIT, transactional)
    }

    /// These attributes with the control bit set to `control`.
    pub fn with_control(self, control: bool) -> Self {
        self.with(CONTROL_BIT, control)
    }

    fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }

    fn with(self, bit: u16, on: bool) -> Self {
        if on {
            Self(self.0 | bit)
        } else {
            Self(self.0 & !bit)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    #[test]
    fn default_is_uncompressed_create_time_plain_batch() {
        let attributes = Attributes::default();
        assert_eq!(attributes.compression(), Ok(Compression::None));
        assert_eq!(attributes.timestamp_type(), TimestampType::CreateTime);
        assert!(!attributes.is_transactional());
        assert!(!attributes.is_control());
        assert!(!attributes.has_delete_horizon());
    }

    #[test]
    fn codecs_round_trip_and_keep_other_bits() {
        let base = Attributes(0xfff8);
        for compression in ALL {
            let attributes = base.with_compression(compression);
            assert_eq!(attributes.compression(), Ok(compression));
            assert_eq!(attributes.0 & !0b111, 0xfff8);
        }
    }

    #[test]
    fn unknown_codecs_are_typed_errors() {
        for codec in 5..=7u8 {
            assert_eq!(Attributes(u16::from(codec)).compression(), Err(BatchError::UnknownCompression { codec }));
        }
    }

    #[test]
    fn flags_sit_on_kafkas_bits() {
        let none = Attributes::default();
        assert_eq!(none.with_timestamp_type(TimestampType::LogAppendTime).0, 0b1000);
        assert_eq!(none.with_transactional(true).0, 0b1_0000);
        assert_eq!(none.with_control(true).0, 0b10_0000);
        assert!(Attributes(0b100_0000).has_delete_horizon());
        let all = none.with_timestamp_type(TimestampType::LogAppendTime).with_transactional(true).with_control(true);
        assert_eq!(all.timestamp_type(), TimestampType::LogAppendTime);
        assert!(all.is_transactional() && all.is_control());
        let cleared = all.with_timestamp_type(TimestampType::CreateTime).with_transactional(false).with_control(false);
        assert_eq!(cleared, none);
    }
}
