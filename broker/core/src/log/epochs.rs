//! The log's leader-epoch cache (see `replication::leader_epochs`), kept in
//! step with the log and checkpointed in `leader-epoch-checkpoint`.
//!
//! The checkpoint is written *ahead* of an append that begins a new epoch, so
//! after a crash it can only name more than the log holds (an epoch whose first
//! batch was lost); opening cuts it back to the log end. A truncation rewrites it
//! after the log is cut, with the same effect if a crash comes between. When the
//! file is missing (a log from before epochs were checkpointed) or damaged, it is
//! rebuilt from the batch headers, whose leader epochs are always stamped.

use abi::batch::field;

use super::{Log, LogError};
use crate::replication::{EpochOrderError, LeaderEpochCache};
use crate::storage::{read_file, replace_file};

/// The checkpoint's file name in the partition directory.
pub(crate) const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";

impl Log {
    /// The epochs of this log's batches.
    pub fn leader_epochs(&self) -> &LeaderEpochCache {
        &self.epochs
    }

    /// KIP-279's lookup on this log (see `LeaderEpochCache::end_offset_for`).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, u64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// Loads the checkpoint at open, or rebuilds it from the batch headers.
    pub(super) fn load_leader_epochs(&mut self) -> Result<(), LogError> {
        let path = self.dir.join(LEADER_EPOCH_FILE);
        let stored = read_file(self.storage.as_ref(), &path).map_err(LogError::io("read", &path))?;
        let loaded = stored.as_deref().map(LeaderEpochCache::decode);
        let rebuild = !matches!(loaded, Some(Ok(_)));
        self.epochs = match loaded {
            Some(Ok(epochs)) => epochs,
            _ => self.rebuild_leader_epochs()?,
        };
        let before = self.epochs.entries().len();
        self.epochs.truncate_from_end(self.log_end_offset());
        let trimmed = self.epochs.entries().len() != before;
        self.epochs.truncate_from_start(self.log_start_offset());
        // A trimmed entry (an epoch whose first batch a crash lost) must leave
        // the file too: the log may grow past its offset in an older epoch.
        if (rebuild && !self.epochs.entries().is_empty()) || trimmed {
            self.persist_leader_epochs()?;
        }
        Ok(())
    }

    /// The epochs of every batch, read from their headers. A batch whose epoch
    /// goes backwards (written before leader epochs were checked) keeps the
    /// epoch before it.
    fn rebuild_leader_epochs(&self) -> Result<LeaderEpochCache, LogError> {
        let mut epochs = LeaderEpochCache::default();
        self.visit_tail_batch_headers(u64::MAX, |header| {
            let at = field::PARTITION_LEADER_EPOCH;
            let epoch = i32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
            let base =
                i64::from_be_bytes(header[field::BASE_OFFSET..field::BASE_OFFSET + 8].try_into().unwrap_or_default());
            let _ = epochs.assign(epoch, base.max(0) as u64);
        })?;
        Ok(epochs)
    }

    /// Writes the checkpoint (atomically, durably).
    pub(super) fn persist_leader_epochs(&self) -> Result<(), LogError> {
        let path = self.dir.join(LEADER_EPOCH_FILE);
        replace_file(self.storage.as_ref(), &path, &self.epochs.encode()).map_err(LogError::io("write", &path))
    }

    /// Batches of `epoch` begin at `offset` (the log end): recorded, and
    /// checkpointed before they are written when the epoch is new.
    pub(super) fn begin_epoch(&mut self, epoch: i32, offset: u64) -> Result<(), LogError> {
        let new = self
            .epochs
            .assign(epoch, offset)
            .map_err(|EpochOrderError { latest, .. }| LogError::LeaderEpochBackwards { epoch, latest })?;
        if new {
            let persisted = self.persist_leader_epochs();
            return self.fence(persisted);
        }
        Ok(())
    }
}
