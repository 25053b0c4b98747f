//! [`LogStore`]: the controller's Raft log and vote, durable through the
//! `Storage` seam (openraft's `RaftLogStorage`).
//!
//! Files, in `<data_dir>/__cluster_metadata/`:
//! - `raft.log`: entries back to back, each framed as
//!   `length u32 BE | crc32 u32 BE (of the payload) | payload` where the payload is
//!   the JSON of one openraft entry. Appends are fdatasync'ed before openraft is
//!   told they are durable. Opening reads every frame; the first frame that is torn
//!   or fails its CRC ends the log (what follows was never acknowledged: every
//!   append is synced before the next) and is cut off.
//! - `vote.json`, `committed.json`, `purged.json`: replaced atomically.
//!
//! Truncation (a new leader overwrote entries this node had) cuts the file at the
//! first removed entry. Purging (after a snapshot) records the purged log id first,
//! then rewrites the file without the purged entries; entries at or below the
//! purged id found at open are skipped, so a crash between the two is harmless.
//!
//! Entries are also kept in memory (the metadata log is small: purged after every
//! snapshot). One mutex serialises every write, as openraft requires.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use broker_core::storage::{read_file, replace_file, File, Storage};
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{LogId, OptionalSend, StorageError, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Entry, NodeId, TypeConfig};

const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote.json";
const COMMITTED_FILE: &str = "committed.json";
const PURGED_FILE: &str = "purged.json";
/// Frame header: length and CRC.
const FRAME_HEADER_BYTES: usize = 8;
/// Largest entry payload accepted when reading the log back.
const ENTRY_BYTES_MAX: usize = 64 << 20;

/// See the module docs. Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct LogStore {
    shared: Arc<Mutex<LogFiles>>,
}

/// The last log id a durable snapshot covers (see `purge_within`).
type SnapshotBound = Arc<Mutex<Option<LogId<NodeId>>>>;

#[derive(Debug)]
struct LogFiles {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    file: Arc<dyn File>,
    /// Bytes of the log file that hold whole, valid frames.
    file_len: u64,
    /// Index → (entry, position of its frame in the file).
    entries: BTreeMap<u64, (Entry, u64)>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    /// When set, purges stop at the last entry a durable snapshot covers.
    snapshot_bound: Option<SnapshotBound>,
    /// A purge openraft asked for that waits (in part) for a durable snapshot.
    pending_purge: Option<LogId<NodeId>>,
}

fn io_error(error: impl std::fmt::Display) -> io::Error {
    io::Error::other(error.to_string())
}

fn read_json<T: DeserializeOwned>(storage: &dyn Storage, path: &Path) -> io::Result<Option<T>> {
    match read_file(storage, path)? {
        Some(bytes) => super::compat::from_json(&bytes)
            .map(Some)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {error}", path.display()))),
        None => Ok(None),
    }
}

fn write_json<T: Serialize>(storage: &dyn Storage, path: &Path, value: &T) -> io::Result<()> {
    replace_file(storage, path, &serde_json::to_vec(value).map_err(io_error)?)
}

fn frame(entry: &Entry) -> io::Result<Vec<u8>> {
    let payload = serde_json::to_vec(entry).map_err(io_error)?;
    let mut bytes = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// A frame at `position` of `bytes`: (payload, end) when whole and its CRC holds.
fn frame_at(bytes: &[u8], position: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(position..position + FRAME_HEADER_BYTES)?;
    let length = u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(header[4..].try_into().expect("4 bytes"));
    // No entry is empty: zeros (a file that grew without its data) are no frame.
    if length == 0 {
        return None;
    }
    let start = position + FRAME_HEADER_BYTES;
    let payload = bytes.get(start..start.checked_add(length).filter(|_| length <= ENTRY_BYTES_MAX)?)?;
    (crc32fast::hash(payload) == crc).then_some((payload, start + length))
}

/// Reads frames from `bytes`; returns the entries with their positions and the
/// length of the valid prefix. A bad frame ends the log — the unsynced tail of an
/// append cut short — unless what follows holds a committed entry (at or below
/// `committed`, which was durable before): that is damage in the middle of the
/// log, and so is a frame whose CRC holds but whose entry cannot be read (another
/// version?). Both are errors: the broker stops instead of forgetting committed
/// metadata.
fn read_frames(bytes: &[u8], committed: Option<u64>) -> io::Result<(Vec<(Entry, u64)>, u64)> {
    let mut entries = Vec::new();
    let mut position = 0;
    while position < bytes.len() {
        let Some((payload, end)) = frame_at(bytes, position) else {
            if let Some(index) = committed_entry_after(bytes, position, committed) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the metadata log is damaged at byte {position}, before committed entry {index}"),
                ));
            }
            break;
        };
        let entry: Entry = super::compat::from_json(payload).map_err(|error| {
            io::Error::new(io::ErrorKind::InvalidData, format!("metadata log entry at byte {position}: {error}"))
        })?;
        entries.push((entry, position as u64));
        position = end;
    }
    Ok((entries, position as u64))
}

/// The index of a committed entry in a whole frame where the bad frame at
/// `position` says it ends, if there is one.
fn committed_entry_after(bytes: &[u8], position: usize, committed: Option<u64>) -> Option<u64> {
    let committed = committed?;
    let length = u32::from_be_bytes(bytes.get(position..position + 4)?.try_into().ok()?) as usize;
    let (payload, _) = frame_at(bytes, position.checked_add(FRAME_HEADER_BYTES + length)?)?;
    let entry: Entry = super::compat::from_json(payload).ok()?;
    (entry.log_id.index <= committed).then_some(entry.log_id.index)
}

impl LogStore {
    /// Opens (creating) the log in `dir`.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path) -> io::Result<LogStore> {
        storage.create_dir_all(dir)?;
        let vote = read_json(&*storage, &dir.join(VOTE_FILE))?;
        let committed = read_json(&*storage, &dir.join(COMMITTED_FILE))?;
        let last_purged: Option<LogId<NodeId>> = read_json(&*storage, &dir.join(PURGED_FILE))?;
        let path = dir.join(LOG_FILE);
        let bytes = read_file(&*storage, &path)?.unwrap_or_default();
        let committed_index = committed.map(|log_id: LogId<NodeId>| log_id.index);
        let (frames, valid_len) = read_frames(&bytes, committed_index)
            .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))?;
        let file = storage.open(&path, true)?;
        if valid_len < bytes.len() as u64 {
            tracing::warn!(
                path = %path.display(),
                cut_bytes = bytes.len() as u64 - valid_len,
                "cut a torn tail off the metadata log (never acknowledged)"
            );
            file.set_len(valid_len)?;
            file.sync_data()?;
        }
        storage.sync_dir(dir)?;
        let purged_index = last_purged.map(|log_id| log_id.index);
        let entries = frames
            .into_iter()
            .filter(|(entry, _)| Some(entry.log_id.index) > purged_index)
            .map(|(entry, position)| (entry.log_id.index, (entry, position)))
            .collect();
        let files = LogFiles {
            storage,
            dir: dir.to_path_buf(),
            file,
            file_len: valid_len,
            entries,
            vote,
            committed,
            last_purged,
            snapshot_bound: None,
            pending_purge: None,
        };
        Ok(LogStore { shared: Arc::new(Mutex::new(files)) })
    }

    /// Purges only entries that the state machine's durable snapshot covers.
    /// openraft 0.9 purges a follower's log as soon as it *starts* installing a
    /// snapshot from the leader, before the state machine has stored it: a
    /// crash in between would leave neither the entries nor the snapshot, and
    /// the node could not start again (found by the cluster simulation). The
    /// rest of such a purge waits, and is carried out by the next purge or
    /// append once the snapshot is durable (openraft appends after an installed
    /// snapshot only once the install finished: it answers the install, and
    /// runs later commands, only after the state machine's install command —
    /// an ordering inside openraft 0.9 to check again on an upgrade). Entries
    /// kept past openraft's purge point meanwhile are harmless: it never reads
    /// below it.
    pub fn purge_within(&self, snapshot: SnapshotBound) {
        self.files().snapshot_bound = Some(snapshot);
    }

    /// Whether this node never took part in a quorum: no vote, no entries, nothing
    /// purged.
    pub fn is_new(&self) -> bool {
        let files = self.files();
        files.vote.is_none() && files.entries.is_empty() && files.last_purged.is_none()
    }

    fn files(&self) -> MutexGuard<'_, LogFiles> {
        self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl LogFiles {
    fn append(&mut self, entries: impl IntoIterator<Item = Entry>) -> io::Result<()> {
        self.purge_what_is_covered()?;
        let mut bytes = Vec::new();
        let mut added = Vec::new();
        let mut previous = self.entries.last_key_value().map(|(index, _)| *index);
        for entry in entries {
            // The log stays consecutive (openraft appends without holes): checked
            // before anything is written, so a broken append leaves no trace.
            let index = entry.log_id.index;
            if previous.is_some_and(|previous| index != previous + 1) {
                return Err(io::Error::other(format!(
                    "metadata log entry {index} does not follow entry {}",
                    previous.unwrap_or_default()
                )));
            }
            previous = Some(index);
            let position = self.file_len + bytes.len() as u64;
            bytes.extend_from_slice(&frame(&entry)?);
            added.push((entry, position));
        }
        self.file.write_at(&bytes, self.file_len)?;
        self.file.sync_data()?;
        self.file_len += bytes.len() as u64;
        for (entry, position) in added {
            self.entries.insert(entry.log_id.index, (entry, position));
        }
        Ok(())
    }

    fn truncate(&mut self, index: u64) -> io::Result<()> {
        let Some((_, position)) = self.entries.get(&index).map(|(entry, position)| (entry.log_id, *position)) else {
            return Ok(());
        };
        self.file.set_len(position)?;
        self.file.sync_data()?;
        self.file_len = position;
        self.entries.split_off(&index);
        Ok(())
    }

    fn purge(&mut self, log_id: LogId<NodeId>) -> io::Result<()> {
        if self.pending_purge.is_none_or(|pending| pending.index < log_id.index) {
            self.pending_purge = Some(log_id);
        }
        self.purge_what_is_covered()
    }

    /// Carries out as much of the pending purge as a durable snapshot covers.
    fn purge_what_is_covered(&mut self) -> io::Result<()> {
        let Some(pending) = self.pending_purge else { return Ok(()) };
        let target = match &self.snapshot_bound {
            None => Some(pending),
            Some(bound) => match *bound.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) {
                Some(covered) if covered.index < pending.index => Some(covered),
                Some(_) => Some(pending),
                None => None,
            },
        };
        let Some(target) = target else { return Ok(()) };
        let whole = target == pending;
        if whole {
            self.pending_purge = None;
        }
        // Never backwards. The same point again, asked for, drops entries
        // appended at or below it since; a part already carried out is not
        // carried out again.
        let last = self.last_purged.map(|purged| purged.index);
        if Some(target.index) < last || (!whole && Some(target.index) == last) {
            return Ok(());
        }
        self.purge_to(target)
    }

    fn purge_to(&mut self, log_id: LogId<NodeId>) -> io::Result<()> {
        write_json(&*self.storage, &self.dir.join(PURGED_FILE), &log_id)?;
        self.last_purged = Some(log_id);
        self.entries = self.entries.split_off(&(log_id.index + 1));
        // Rewrite the file with what is left.
        let mut bytes = Vec::new();
        for (entry, position) in self.entries.values_mut() {
            *position = bytes.len() as u64;
            bytes.extend_from_slice(&frame(entry)?);
        }
        let path = self.dir.join(LOG_FILE);
        replace_file(&*self.storage, &path, &bytes)?;
        self.file = self.storage.open(&path, false)?;
        self.file_len = bytes.len() as u64;
        Ok(())
    }

    fn range(&self, range: impl RangeBounds<u64>) -> Vec<Entry> {
        self.entries.range(range).map(|(_, (entry, _))| entry.clone()).collect()
    }
}

fn write_error(error: io::Error) -> StorageError<NodeId> {
    StorageIOError::write_logs(&error).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        Ok(self.files().range(range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let files = self.files();
        let last = files.entries.last_key_value().map(|(_, (entry, _))| entry.log_id);
        Ok(LogState { last_purged_log_id: files.last_purged, last_log_id: last.or(files.last_purged) })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut files = self.files();
        write_json(&*files.storage, &files.dir.join(VOTE_FILE), vote)
            .map_err(|error| StorageError::from(StorageIOError::write_vote(&error)))?;
        files.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.files().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        let mut files = self.files();
        if files.committed == committed {
            return Ok(());
        }
        write_json(&*files.storage, &files.dir.join(COMMITTED_FILE), &committed).map_err(write_error)?;
        files.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.files().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let result = self.files().append(entries);
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                callback.log_io_completed(Err(io_error(&error)));
                Err(write_error(error))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.files().truncate(log_id.index).map_err(write_error)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.files().purge(log_id).map_err(write_error)
    }
}
