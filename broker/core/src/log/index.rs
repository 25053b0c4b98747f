//! Sparse, memory-mapped segment indexes: the offset index and the time index.
//!
//! Both are arrays of fixed-size big-endian entries in a file next to the segment's
//! `.log`, with offsets stored relative to the segment's base offset:
//!
//! ```text
//! .index      entry = relative offset (u32 BE) | position of the batch in .log (u32 BE)   8 bytes
//! .timeindex  entry = timestamp (i64 BE)        | relative offset (u32 BE)                 12 bytes
//! ```
//!
//! The active segment's index files are preallocated to `index_bytes_max` and mapped;
//! entries past `entry_count` are garbage and ignored. On roll (and clean close) the
//! file is trimmed to exactly `entry_count` entries, so a closed index's length tells
//! its entry count.
//!
//! Invariants: entries are strictly increasing in relative offset (offset index) and
//! in timestamp and non-decreasing in offset (time index). Indexes are an
//! acceleration only: recovery may rebuild them from the `.log` at any time.

use std::io;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::storage::{MapMut, Storage};

/// One fixed-size index entry.
pub(crate) trait Entry: Copy + std::fmt::Debug {
    const BYTES: usize;
    fn decode(bytes: &[u8]) -> Self;
    fn encode(&self, out: &mut [u8]);
}

/// `.index` entry: the batch starting at `position` has base offset `base + relative_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// `.timeindex` entry: every record before `base + relative_offset` has a timestamp
/// `<= timestamp`, and the batch holding that offset reaches `timestamp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

impl Entry for OffsetEntry {
    const BYTES: usize = 8;
    fn decode(bytes: &[u8]) -> Self {
        OffsetEntry { relative_offset: be_u32(&bytes[0..4]), position: be_u32(&bytes[4..8]) }
    }
    fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
    }
}

impl Entry for TimeEntry {
    const BYTES: usize = 12;
    fn decode(bytes: &[u8]) -> Self {
        let mut timestamp = [0u8; 8];
        timestamp.copy_from_slice(&bytes[0..8]);
        TimeEntry { timestamp: i64::from_be_bytes(timestamp), relative_offset: be_u32(&bytes[8..12]) }
    }
    fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
    }
}

/// A sparse index file, mapped while it has entries or room for them.
#[derive(Debug)]
pub(crate) struct Index<E: Entry> {
    path: PathBuf,
    /// `None` when the file is empty and sealed (a zero-length file cannot be mapped).
    map: Option<Box<dyn MapMut>>,
    entry_count: usize,
    entry_capacity: usize,
    _entry: PhantomData<E>,
}

impl<E: Entry> Index<E> {
    /// A fresh, empty index preallocated to `capacity_bytes` (contents are ignored).
    pub fn create(storage: &dyn Storage, path: PathBuf, capacity_bytes: usize) -> io::Result<Index<E>> {
        let entry_capacity = capacity_bytes / E::BYTES;
        let map = storage.map_mut(&path, entry_capacity * E::BYTES)?;
        Ok(Index { path, map: Some(map), entry_count: 0, entry_capacity, _entry: PhantomData })
    }

    /// A sealed index as written by a roll or clean close: its length gives its
    /// entry count. With `capacity_bytes` it is reopened for appends (active segment).
    pub fn load(storage: &dyn Storage, path: PathBuf, capacity_bytes: Option<usize>) -> io::Result<Index<E>> {
        let len_bytes = storage.open(&path, false)?.len()? as usize;
        if !len_bytes.is_multiple_of(E::BYTES) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("index {} is {len_bytes} bytes, not a multiple of {}", path.display(), E::BYTES),
            ));
        }
        let entry_count = len_bytes / E::BYTES;
        let entry_capacity = capacity_bytes.map_or(entry_count, |bytes| (bytes / E::BYTES).max(entry_count));
        let map = match entry_capacity {
            0 => None,
            _ => Some(storage.map_mut(&path, entry_capacity * E::BYTES)?),
        };
        Ok(Index { path, map, entry_count, entry_capacity, _entry: PhantomData })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.entry_count
    }

    pub fn is_full(&self) -> bool {
        self.entry_count >= self.entry_capacity
    }

    pub fn entry(&self, index: usize) -> E {
        assert!(index < self.entry_count, "index entry {index} of {}", self.entry_count);
        let bytes = self.map.as_ref().expect("a non-empty index is mapped").bytes();
        E::decode(&bytes[index * E::BYTES..(index + 1) * E::BYTES])
    }

    pub fn last(&self) -> Option<E> {
        self.entry_count.checked_sub(1).map(|index| self.entry(index))
    }

    /// How many leading entries satisfy `is_before`, given that it holds for a prefix
    /// of the entries (binary search for the partition point).
    pub fn len_where(&self, is_before: impl Fn(&E) -> bool) -> usize {
        let (mut low, mut high) = (0, self.entry_count);
        while low < high {
            let middle = low + (high - low) / 2;
            if is_before(&self.entry(middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// The last entry for which `is_before` holds (see [`Index::len_where`]).
    pub fn last_where(&self, is_before: impl Fn(&E) -> bool) -> Option<E> {
        self.len_where(is_before).checked_sub(1).map(|index| self.entry(index))
    }

    /// Appends an entry; the caller keeps entries ordered and checks `is_full` first.
    pub fn append(&mut self, entry: E) {
        assert!(!self.is_full(), "append to a full index {}", self.path.display());
        let mut buffer = [0u8; 16];
        entry.encode(&mut buffer[..E::BYTES]);
        let map = self.map.as_mut().expect("an index with capacity is mapped");
        map.write(self.entry_count * E::BYTES, &buffer[..E::BYTES]);
        self.entry_count += 1;
    }

    /// Drops every entry from `entry_count` on.
    pub fn truncate_entries(&mut self, entry_count: usize) {
        self.entry_count = self.entry_count.min(entry_count);
    }

    /// Trims the file to its entries and remaps it exactly (roll / clean close).
    pub fn seal(&mut self, storage: &dyn Storage) -> io::Result<()> {
        self.map = None;
        storage.open(&self.path, true)?.set_len((self.entry_count * E::BYTES) as u64)?;
        self.entry_capacity = self.entry_count;
        if self.entry_count > 0 {
            self.map = Some(storage.map_mut(&self.path, self.entry_count * E::BYTES)?);
        }
        Ok(())
    }

    /// Makes room for appends again (a sealed segment becoming active after a truncation).
    pub fn unseal(&mut self, storage: &dyn Storage, capacity_bytes: usize) -> io::Result<()> {
        let entry_capacity = (capacity_bytes / E::BYTES).max(self.entry_count);
        self.map = None;
        self.map = Some(storage.map_mut(&self.path, entry_capacity * E::BYTES)?);
        self.entry_capacity = entry_capacity;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::mem::MemStorage;

    fn index_with(entries: &[(u32, u32)]) -> (MemStorage, Index<OffsetEntry>) {
        let storage = MemStorage::new();
        storage.create_dir_all(Path::new("/p")).unwrap();
        let mut index = Index::create(&storage, PathBuf::from("/p/0.index"), 1024).unwrap();
        for &(relative_offset, position) in entries {
            index.append(OffsetEntry { relative_offset, position });
        }
        (storage, index)
    }

    #[test]
    fn lookup_finds_the_last_entry_at_or_below_the_target() {
        let (_storage, index) = index_with(&[(10, 100), (20, 200), (30, 300)]);
        let lookup = |target: u32| index.last_where(|e| e.relative_offset <= target).map(|e| e.position);
        assert_eq!(lookup(5), None);
        assert_eq!(lookup(10), Some(100));
        assert_eq!(lookup(29), Some(200));
        assert_eq!(lookup(1000), Some(300));
    }

    #[test]
    fn seal_trims_and_load_restores_the_entries() {
        let (storage, mut index) = index_with(&[(1, 10), (2, 20)]);
        index.seal(&storage).unwrap();
        assert_eq!(storage.contents(Path::new("/p/0.index")).unwrap().len(), 16);
        let loaded: Index<OffsetEntry> = Index::load(&storage, PathBuf::from("/p/0.index"), None).unwrap();
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded.entry(1), OffsetEntry { relative_offset: 2, position: 20 });
        assert!(loaded.is_full());
    }

    #[test]
    fn time_entries_round_trip_big_endian() {
        let entry = TimeEntry { timestamp: -2, relative_offset: 7 };
        let mut bytes = [0u8; 12];
        entry.encode(&mut bytes);
        assert_eq!(bytes, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 7]);
        assert_eq!(TimeEntry::decode(&bytes), entry);
    }
}
