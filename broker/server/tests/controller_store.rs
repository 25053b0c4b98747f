//! The controller's Raft storage: openraft's own storage conformance suite on our
//! log store and state machine (over `MemStorage`), and what survives a crash.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use broker::controller::{LogStore, StateMachine, TypeConfig};
use broker_core::storage::mem::{CrashMode, MemStorage};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct MemBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, MemStorage> for MemBuilder {
    async fn build(&self) -> Result<(MemStorage, LogStore, StateMachine), StorageError<u64>> {
        let storage = MemStorage::new();
        let dir = Path::new("/data/__cluster_metadata");
        let log_store = LogStore::open(Arc::new(storage.clone()), dir).unwrap();
        let state_machine = StateMachine::open(Arc::new(storage.clone()), dir).unwrap();
        Ok((storage, log_store, state_machine))
    }
}

#[test]
fn openraft_storage_conformance_suite_passes() {
    Suite::test_all(MemBuilder).unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn open(storage: &MemStorage) -> LogStore {
    LogStore::open(Arc::new(storage.clone()), Path::new("/data/__cluster_metadata")).unwrap()
}

async fn indexes(log_store: &mut LogStore) -> Vec<u64> {
    use openraft::storage::RaftLogReader;
    log_store.try_get_log_entries(0..u64::MAX).await.unwrap().iter().map(|entry| entry.log_id.index).collect()
}

/// A crash keeps every acknowledged append, the vote and the purge point; a
/// crash inside an append keeps a consecutive prefix.
#[test]
fn acknowledged_entries_and_the_vote_survive_crashes_anywhere() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::testing::{blank_ent, log_id};
    use openraft::Vote;
    let runtime = runtime();
    runtime.block_on(async {
        let storage = MemStorage::new();
        let mut log_store = open(&storage);
        log_store.save_vote(&Vote::new(3, 1)).await.unwrap();
        log_store.blocking_append((1..=10).map(|index| blank_ent::<TypeConfig>(3, 1, index))).await.unwrap();
        log_store.purge(log_id(3, 1, 4)).await.unwrap();
        log_store.truncate(log_id(3, 1, 9)).await.unwrap();
        storage.crash(CrashMode::GarbageTail { seed: 11 });
        let mut reopened = open(&storage);
        assert_eq!(indexes(&mut reopened).await, (5..=8).collect::<Vec<_>>());
        assert_eq!(reopened.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
        let state = reopened.get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(3, 1, 4)), Some(log_id(3, 1, 8))));

        // A power cut at every point of an append of five entries.
        for cut in 1..6 {
            let storage = MemStorage::new();
            let mut log_store = open(&storage);
            log_store.blocking_append((1..=3).map(|index| blank_ent::<TypeConfig>(1, 1, index))).await.unwrap();
            storage.fail_after(cut);
            let acknowledged =
                log_store.blocking_append((4..=8).map(|index| blank_ent::<TypeConfig>(1, 1, index))).await.is_ok();
            storage.crash(CrashMode::TornTail { seed: cut });
            let found = indexes(&mut open(&storage)).await;
            let expected_min = if acknowledged { 8 } else { 3 };
            assert!(found.len() >= expected_min && found.len() <= 8, "cut {cut}: {found:?}");
            assert_eq!(found, (1..=found.len() as u64).collect::<Vec<_>>(), "cut {cut}: a hole");
        }
    });
}

/// A tail of zeros (the file grew, its data blocks did not) is cut like any torn
/// tail; damage before a committed entry stops the store from opening.
#[test]
fn a_zeroed_tail_is_cut_and_damage_before_committed_entries_is_refused() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::testing::{blank_ent, log_id};
    runtime().block_on(async {
        let storage = MemStorage::new();
        let mut log_store = open(&storage);
        log_store.blocking_append((1..=4).map(|index| blank_ent::<TypeConfig>(1, 1, index))).await.unwrap();
        let path = Path::new("/data/__cluster_metadata/raft.log");
        let mut bytes = storage.contents(path).unwrap();
        let whole = bytes.len();
        bytes.extend(std::iter::repeat_n(0u8, 4096));
        storage.overwrite(path, bytes.clone());
        assert_eq!(indexes(&mut open(&storage)).await, [1, 2, 3, 4]);
        assert_eq!(storage.contents(path).unwrap().len(), whole, "the zeros are cut");

        // Entries 1-4 committed, then the second frame damaged: refused.
        let mut log_store = open(&storage);
        log_store.save_committed(Some(log_id(1, 1, 4))).await.unwrap();
        let mut damaged = storage.contents(path).unwrap();
        let second_frame = damaged.len() / 4 + 10;
        damaged[second_frame] ^= 0xff;
        storage.overwrite(path, damaged);
        let error = LogStore::open(Arc::new(storage.clone()), Path::new("/data/__cluster_metadata")).unwrap_err();
        assert!(error.to_string().contains("damaged"), "{error}");
    });
}

/// openraft purges a follower's log when it starts installing a leader's
/// snapshot, before the state machine stored it: the store purges only what a
/// durable snapshot covers, and the rest once one does (found by the cluster
/// simulation: a crash in between left neither entries nor snapshot).
#[test]
fn entries_are_purged_only_once_a_durable_snapshot_covers_them() {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::testing::{blank_ent, log_id};
    runtime().block_on(async {
        let storage = MemStorage::new();
        let dir = Path::new("/data/__cluster_metadata");
        let mut log_store = open(&storage);
        let state_machine = StateMachine::open(Arc::new(storage.clone()), dir).unwrap();
        let covered = state_machine.durable_snapshot();
        log_store.purge_within(covered.clone());
        log_store.blocking_append((1..=6).map(|index| blank_ent::<TypeConfig>(1, 1, index))).await.unwrap();

        // No snapshot yet: a crash after the purge keeps every entry.
        log_store.purge(log_id(1, 1, 9)).await.unwrap();
        storage.crash(CrashMode::TornTail { seed: 3 });
        let mut log_store = open(&storage);
        log_store.purge_within(covered.clone());
        assert_eq!(indexes(&mut log_store).await, [1, 2, 3, 4, 5, 6]);
        assert_eq!(log_store.get_log_state().await.unwrap().last_purged_log_id, None);

        // A snapshot up to 4 is durable: the purge reaches 4 now, and the rest
        // (to 9) as soon as one covers it, at the next append.
        *covered.lock().unwrap() = Some(log_id(1, 1, 4));
        log_store.purge(log_id(1, 1, 9)).await.unwrap();
        assert_eq!(indexes(&mut open(&storage)).await, [5, 6]);
        *covered.lock().unwrap() = Some(log_id(1, 1, 9));
        log_store.blocking_append([blank_ent::<TypeConfig>(2, 1, 10)]).await.unwrap();
        let mut reopened = open(&storage);
        assert_eq!(indexes(&mut reopened).await, [10]);
        assert_eq!(reopened.get_log_state().await.unwrap().last_purged_log_id, Some(log_id(1, 1, 9)));
    });
}
