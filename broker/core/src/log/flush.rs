//! [`FlushTicket`]: one fdatasync round (a group commit) of a partition log.
//!
//! The protocol, driven by the log's owner (the server's flusher):
//!
//! 1. under the lock, [`super::Log::begin_flush`] snapshots the log end offset as the
//!    ticket's target and lists what must reach the disk for it: the active `.log`,
//!    every segment sealed since the last round (`.log` and trimmed indexes), and
//!    the directory when segments were created;
//! 2. without the lock, [`FlushTicket::execute`] syncs all of it (appends keep going
//!    meanwhile; they will ride the next round);
//! 3. under the lock, [`super::Log::complete_flush`] advances the durable offset to
//!    the target and, when the round synced sealed segments, moves the
//!    recovery-point checkpoint up to the base of the segment that was active when
//!    the round began (that segment's indexes were not synced by this round, so
//!    recovery must still scan it) — unless the log was truncated in between (the
//!    ticket's generation is stale), in which case the next round decides.
//!
//! The checkpoint is written under the lock, so a stale round can never move it
//! past a truncation. It costs two small syncs and happens only in the first round
//! after a roll.
//!
//! Every append that arrived while a round ran is covered by the next single round:
//! that is the group commit.

use std::path::PathBuf;
use std::sync::Arc;

use super::LogError;
use crate::storage::{File, Storage};

/// What one flush round must sync; see the module docs.
#[derive(Debug)]
pub struct FlushTicket {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) dir: PathBuf,
    pub(crate) target_offset: u64,
    pub(crate) logs: Vec<(PathBuf, Arc<dyn File>)>,
    pub(crate) sealed_index_paths: Vec<PathBuf>,
    /// Where the recovery point may move once this round completes: the base of the
    /// segment active at its start, when it synced sealed segments.
    pub(crate) recovery_point: Option<u64>,
    /// Sealed segments this round syncs (they stay pending until it completes).
    pub(crate) sealed_bases: Vec<u64>,
    /// The directory version this round syncs, when segment files were created.
    pub(crate) dir_version: Option<u64>,
    pub(crate) generation: u64,
}

impl FlushTicket {
    /// The offset below which everything is durable once this round completes.
    pub fn target_offset(&self) -> u64 {
        self.target_offset
    }

    /// Performs the syncs. Call without holding the log's lock.
    pub fn execute(&self) -> Result<(), LogError> {
        for (path, file) in &self.logs {
            file.sync_data().map_err(LogError::io("sync", path))?;
        }
        for path in &self.sealed_index_paths {
            match self.storage.open(path, false) {
                Ok(file) => file.sync_data().map_err(LogError::io("sync", path))?,
                // Retention may have deleted the segment meanwhile: nothing to keep.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(LogError::Io { op: "open", path: path.clone(), source: error }),
            }
        }
        if self.dir_version.is_some() {
            self.storage.sync_dir(&self.dir).map_err(LogError::io("sync directory", &self.dir))?;
        }
        Ok(())
    }
}
