//! [`MetadataStore`]: the metadata file of a single-node broker from before the
//! controller; only the upgrade (`node/upgrade.rs`) reads it now. It held which
//! topics exist (partition count, replication factor, config overrides) and the
//! next block of producer ids, and the partition directories of deleted topics
//! whose files may not be gone yet — in one JSON file,
//! `<data_dir>/cluster-metadata.json`.
//!
//! Every change is written whole to a temporary file, fsynced, renamed over the old
//! file and made durable with a directory fsync: after a crash the file is either
//! the old or the new version, never a mix. The file starts with a `version`; an
//! unknown version or unparsable content stops the broker with a clear error
//! (it is never silently replaced).
//!
//! The controller's metadata log replaced it: the upgrade turns its topics into
//! `AdoptTopic` requests and its producer-id block into a `ProducerIdBlock`, then
//! sets the file aside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use broker_core::storage::{read_file, replace_file, Storage};
use serde::{Deserialize, Serialize};

/// File name inside the data directory.
pub const METADATA_FILE_NAME: &str = "cluster-metadata.json";
const FORMAT_VERSION: u32 = 1;
/// Producer ids handed out per durable write.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// One topic as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicRecord {
    pub partition_count: u32,
    pub replication_factor: i16,
    /// Config overrides, Kafka-style keys (`retention.ms`, ...).
    pub configs: BTreeMap<String, String>,
}

/// Everything the file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterMetadata {
    pub version: u32,
    /// Ids below this one may have been handed out already.
    pub producer_id_block_end: i64,
    pub topics: BTreeMap<String, TopicRecord>,
    /// Partition directories (`orders-3`) of deleted topics whose files may still
    /// exist: only these are ever deleted at start-up.
    #[serde(default)]
    pub pending_deletions: BTreeSet<String>,
}

/// Why the metadata file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not valid cluster metadata: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
}

/// The open metadata file and its current contents.
#[derive(Debug)]
pub struct MetadataStore {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    metadata: ClusterMetadata,
}

impl MetadataStore {
    /// Loads `<dir>/cluster-metadata.json`, or starts empty when there is none.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path) -> Result<MetadataStore, MetadataError> {
        let path = dir.join(METADATA_FILE_NAME);
        let metadata = match read_file(&*storage, &path) {
            Ok(Some(bytes)) => {
                let metadata: ClusterMetadata = serde_json::from_slice(&bytes)
                    .map_err(|error| MetadataError::Invalid { path: path.clone(), reason: error.to_string() })?;
                if metadata.version != FORMAT_VERSION {
                    let reason = format!("format version {} is not {FORMAT_VERSION}", metadata.version);
                    return Err(MetadataError::Invalid { path, reason });
                }
                metadata
            }
            Ok(None) => ClusterMetadata { version: FORMAT_VERSION, ..ClusterMetadata::default() },
            Err(source) => return Err(MetadataError::Io { op: "read", path, source }),
        };
        Ok(MetadataStore { dir: dir.to_path_buf(), storage, metadata })
    }

    pub fn metadata(&self) -> &ClusterMetadata {
        &self.metadata
    }

    /// Applies `change` and makes the result durable; on failure nothing changes.
    pub fn update<T>(&mut self, change: impl FnOnce(&mut ClusterMetadata) -> T) -> Result<T, MetadataError> {
        let mut next = self.metadata.clone();
        let value = change(&mut next);
        self.write(&next)?;
        self.metadata = next;
        Ok(value)
    }

    /// Reserves the next block of producer ids durably; returns its first id.
    pub fn allocate_producer_id_block(&mut self) -> Result<i64, MetadataError> {
        self.update(|metadata| {
            let first = metadata.producer_id_block_end;
            metadata.producer_id_block_end = first + PRODUCER_ID_BLOCK_SIZE;
            first
        })
    }

    fn write(&self, metadata: &ClusterMetadata) -> Result<(), MetadataError> {
        let path = self.dir.join(METADATA_FILE_NAME);
        let bytes = serde_json::to_vec_pretty(metadata)
            .map_err(|error| MetadataError::Invalid { path: path.clone(), reason: error.to_string() })?;
        replace_file(&*self.storage, &path, &bytes).map_err(|source| MetadataError::Io { op: "replace", path, source })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::storage::FileStorage;

    #[test]
    fn changes_survive_reopening_and_ids_never_repeat() {
        let temp = tempfile::tempdir().unwrap();
        let mut store = MetadataStore::open(Arc::new(FileStorage), temp.path()).unwrap();
        let record = TopicRecord {
            partition_count: 3,
            replication_factor: 1,
            configs: BTreeMap::from([("retention.ms".to_owned(), "1000".to_owned())]),
        };
        store.update(|metadata| metadata.topics.insert("orders".to_owned(), record.clone())).unwrap();
        assert_eq!(store.allocate_producer_id_block().unwrap(), 0);
        let mut reopened = MetadataStore::open(Arc::new(FileStorage), temp.path()).unwrap();
        assert_eq!(reopened.metadata().topics.get("orders"), Some(&record));
        assert_eq!(reopened.allocate_producer_id_block().unwrap(), PRODUCER_ID_BLOCK_SIZE);
    }

    #[test]
    fn a_damaged_file_is_reported_not_replaced() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::write(temp.path().join(METADATA_FILE_NAME), b"{\"version\": 1, \"topics\": ").unwrap();
        let error = MetadataStore::open(Arc::new(FileStorage), temp.path()).unwrap_err();
        assert!(matches!(error, MetadataError::Invalid { .. }), "{error}");
        assert!(error.to_string().contains(METADATA_FILE_NAME), "{error}");
    }
}
