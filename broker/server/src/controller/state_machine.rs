//! [`StateMachine`]: the controller's Raft state machine (openraft's
//! `RaftStateMachine`) — the committed metadata log applied to a
//! `broker_core::cluster::ClusterImage`, and its snapshots.
//!
//! Each entry carries one [`MetadataCommand`]: records applied all-or-nothing
//! (`ClusterImage::apply_all`), so the records a controller handler produced
//! together land together. A command that does not fit the image (it never
//! should: handlers run one at a time against the applied image) changes nothing,
//! on every replica alike, and its proposer gets the error.
//!
//! The image lives in memory and is rebuilt at start-up from the last snapshot
//! (`snapshot.json` in the controller directory, replaced atomically) plus the
//! committed entries after it, which openraft re-applies. Readers share it behind
//! an `RwLock`; every apply bumps a watch of the last applied log index.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use broker_core::cluster::ClusterImage;
use broker_core::storage::{read_file, replace_file, Storage};
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{Entry, MetadataApplied, NodeId, TypeConfig};

const SNAPSHOT_FILE: &str = "snapshot.json";

/// `snapshot.json`: the metadata of the last snapshot and the image it holds.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    image: ClusterImage,
}

/// See [`StateMachine::durable_snapshot`].
pub type DurableSnapshot = Arc<Mutex<Option<LogId<NodeId>>>>;

/// What the rest of the broker reads: the image and how far it got.
#[derive(Clone, Debug)]
pub struct AppliedImage {
    pub image: Arc<RwLock<ClusterImage>>,
    /// Index of the last applied Raft entry (0 before any).
    pub applied_index: watch::Receiver<u64>,
}

/// See the module docs.
#[derive(Debug)]
pub struct StateMachine {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    image: Arc<RwLock<ClusterImage>>,
    applied_index: watch::Sender<u64>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, openraft::BasicNode>,
    snapshot_count: u64,
    /// The last log id of the snapshot in `snapshot.json`; held while it is
    /// replaced, so builders and installs never interleave and an older snapshot
    /// never replaces a newer one.
    persisted: Arc<Mutex<Option<LogId<NodeId>>>>,
}

fn read_error(error: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::read_snapshot(None, &std::io::Error::other(error.to_string())).into()
}

fn write_error(error: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, &std::io::Error::other(error.to_string())).into()
}

impl StateMachine {
    /// Opens the state machine in `dir`, from its last snapshot when there is one.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path) -> std::io::Result<StateMachine> {
        storage.create_dir_all(dir)?;
        let stored: Option<StoredSnapshot> = match read_file(&*storage, &dir.join(SNAPSHOT_FILE))? {
            Some(bytes) => Some(super::compat::from_json(&bytes).map_err(|error| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{SNAPSHOT_FILE}: {error}"))
            })?),
            None => None,
        };
        let persisted = Arc::new(Mutex::new(stored.as_ref().and_then(|stored| stored.meta.last_log_id)));
        let (image, last_applied, membership) = match stored {
            Some(stored) => (stored.image, stored.meta.last_log_id, stored.meta.last_membership),
            None => (ClusterImage::default(), None, StoredMembership::default()),
        };
        let index = last_applied.map_or(0, |log_id| log_id.index);
        Ok(StateMachine {
            storage,
            dir: dir.to_path_buf(),
            image: Arc::new(RwLock::new(image)),
            applied_index: watch::channel(index).0,
            last_applied,
            membership,
            snapshot_count: 0,
            persisted,
        })
    }

    /// Replaces `snapshot.json` unless it already holds a newer snapshot.
    #[allow(clippy::result_large_err)] // openraft's own error type, returned as is
    fn persist(
        &self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        image: ClusterImage,
    ) -> Result<(), StorageError<NodeId>> {
        let mut persisted = self.persisted.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if persisted.is_some() && meta.last_log_id < *persisted {
            return Ok(());
        }
        let stored = serde_json::to_vec(&StoredSnapshot { meta: meta.clone(), image }).map_err(write_error)?;
        replace_file(&*self.storage, &self.dir.join(SNAPSHOT_FILE), &stored).map_err(write_error)?;
        *persisted = meta.last_log_id;
        Ok(())
    }

    /// The last log id of the snapshot durable in `snapshot.json` (none before
    /// the first), shared: the log store purges no entry it does not cover.
    pub fn durable_snapshot(&self) -> DurableSnapshot {
        self.persisted.clone()
    }

    /// A handle on the applied image for readers.
    pub fn applied_image(&self) -> AppliedImage {
        AppliedImage { image: self.image.clone(), applied_index: self.applied_index.subscribe() }
    }

    fn image(&self) -> std::sync::RwLockReadGuard<'_, ClusterImage> {
        self.image.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn image_mut(&self) -> std::sync::RwLockWriteGuard<'_, ClusterImage> {
        self.image.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn apply_entry(&mut self, entry: Entry) -> MetadataApplied {
        self.last_applied = Some(entry.log_id);
        let applied = match entry.payload {
            EntryPayload::Blank => MetadataApplied::default(),
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(entry.log_id), membership);
                MetadataApplied::default()
            }
            EntryPayload::Normal(command) => match self.image_mut().apply_all(&command.records) {
                Ok(first_offset) => MetadataApplied { first_offset: Some(first_offset), error: None },
                Err(error) => {
                    tracing::error!(log_index = entry.log_id.index, %error, "metadata command not applied");
                    MetadataApplied { first_offset: None, error: Some(error.to_string()) }
                }
            },
        };
        self.applied_index.send_replace(entry.log_id.index);
        applied
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        self.snapshot_count += 1;
        let snapshot_id = match self.last_applied {
            Some(log_id) => format!("{}-{}-{}", log_id.leader_id.term, log_id.index, self.snapshot_count),
            None => format!("empty-{}", self.snapshot_count),
        };
        let meta =
            SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone(), snapshot_id };
        let image = self.image().clone();
        let data = serde_json::to_vec(&image).map_err(write_error)?;
        self.persist(&meta, image)?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

/// A snapshot builder over a copy of the state machine's view (openraft builds
/// snapshots off the apply path).
impl StateMachine {
    fn builder(&self) -> StateMachine {
        StateMachine {
            storage: self.storage.clone(),
            dir: self.dir.clone(),
            image: Arc::new(RwLock::new(self.image().clone())),
            applied_index: watch::channel(self.last_applied.map_or(0, |log_id| log_id.index)).0,
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshot_count: self.snapshot_count + 1,
            persisted: self.persisted.clone(),
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, openraft::BasicNode>), StorageError<NodeId>> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<MetadataApplied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        Ok(entries.into_iter().map(|entry| self.apply_entry(entry)).collect())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.builder()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let image: ClusterImage = serde_json::from_slice(snapshot.get_ref()).map_err(read_error)?;
        self.persist(meta, image.clone())?;
        *self.image_mut() = image;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.applied_index.send_replace(meta.last_log_id.map_or(0, |log_id| log_id.index));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let _persisted = self.persisted.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(bytes) = read_file(&*self.storage, &self.dir.join(SNAPSHOT_FILE)).map_err(read_error)? else {
            return Ok(None);
        };
        let stored: StoredSnapshot = super::compat::from_json(&bytes).map_err(read_error)?;
        let data = serde_json::to_vec(&stored.image).map_err(read_error)?;
        Ok(Some(Snapshot { meta: stored.meta, snapshot: Box::new(Cursor::new(data)) }))
    }
}
