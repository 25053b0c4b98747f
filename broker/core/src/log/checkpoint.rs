//! The recovery-point checkpoint and the clean-shutdown marker of one partition.
//!
//! `recovery-point` (16 bytes) names the offset below which every byte of the log,
//! and its sealed indexes, is known to be on disk:
//!
//! ```text
//! 0      4            12          16
//! +------+------------+-----------+
//! | WRP1 | offset u64 | crc32 u32 |   big-endian; crc32 (crc32fast) of bytes 0..12
//! +------+------------+-----------+
//! ```
//!
//! It is replaced atomically (write `recovery-point.tmp`, sync, rename, sync the
//! directory). After an unclean stop, recovery scans the segment holding that offset
//! and every later one; earlier segments are trusted. A missing or damaged checkpoint
//! reads as offset 0: scan everything, which is slow but never wrong.
//!
//! `clean-shutdown` is an empty file written last by a clean close; when present at
//! open, nothing is scanned. Open removes it (durably) before the log accepts writes.

use std::path::Path;

use crate::storage::Storage;

use super::LogError;

pub(crate) const RECOVERY_POINT_FILE: &str = "recovery-point";
pub(crate) const RECOVERY_POINT_TMP_FILE: &str = "recovery-point.tmp";
pub(crate) const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";
const MAGIC: &[u8; 4] = b"WRP1";

/// Reads the recovery point; 0 when absent or damaged.
pub(crate) fn read_recovery_point(storage: &dyn Storage, dir: &Path) -> u64 {
    let path = dir.join(RECOVERY_POINT_FILE);
    let Ok(file) = storage.open(&path, false) else { return 0 };
    let mut bytes = [0u8; 16];
    match file.read_at(&mut bytes, 0) {
        Ok(16) => decode(&bytes).unwrap_or(0),
        _ => 0,
    }
}

fn decode(bytes: &[u8; 16]) -> Option<u64> {
    let crc = u32::from_be_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    if &bytes[0..4] != MAGIC || crc32fast::hash(&bytes[0..12]) != crc {
        return None;
    }
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&bytes[4..12]);
    Some(u64::from_be_bytes(offset))
}

fn encode(offset: u64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[0..4].copy_from_slice(MAGIC);
    bytes[4..12].copy_from_slice(&offset.to_be_bytes());
    let crc = crc32fast::hash(&bytes[0..12]);
    bytes[12..16].copy_from_slice(&crc.to_be_bytes());
    bytes
}

/// Durably replaces the recovery point.
pub(crate) fn write_recovery_point(storage: &dyn Storage, dir: &Path, offset: u64) -> Result<(), LogError> {
    let tmp_path = dir.join(RECOVERY_POINT_TMP_FILE);
    let path = dir.join(RECOVERY_POINT_FILE);
    let file = storage.open(&tmp_path, true).map_err(LogError::io("create", &tmp_path))?;
    file.set_len(0).map_err(LogError::io("truncate", &tmp_path))?;
    file.write_at(&encode(offset), 0).map_err(LogError::io("write", &tmp_path))?;
    file.sync_data().map_err(LogError::io("sync", &tmp_path))?;
    storage.rename(&tmp_path, &path).map_err(LogError::io("rename", &tmp_path))?;
    storage.sync_dir(dir).map_err(LogError::io("sync directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_reads_as_zero() {
        assert_eq!(decode(&encode(12345)), Some(12345));
        let mut damaged = encode(12345);
        damaged[5] ^= 1;
        assert_eq!(decode(&damaged), None);
    }
}
