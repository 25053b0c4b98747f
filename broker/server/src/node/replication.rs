//! Followers copy their leaders' logs (DESIGN §3, replication): a follower
//! finds where its log agrees with the leader's (`Divergence`, by leader epoch,
//! never by its own high watermark), cuts the rest, then pulls batches with
//! `replica-fetch` calls (one per leader broker, every partition it follows
//! there, long-polling) and appends them byte for byte (`append_replicated`).
//!
//! The leader side notes each follower's progress as it fetches (the high
//! watermark over the ISR moves with it, see `Partition::on_follower_fetch`),
//! and `maintain_isrs` asks the controller for the ISR changes that progress
//! calls for (AlterPartition).
//!
//! Calls travel on the broker's data links (`controllerCall` kinds
//! `replica-fetch` and `epoch-end-offset`; see docs/design/rpc.md).

use std::collections::{BTreeMap, BTreeSet};

use broker_core::replication::Divergence;
use serde::{Deserialize, Serialize};

use super::*;

/// How long a leader holds a fetch that finds nothing new.
const REPLICA_FETCH_WAIT_MS: u32 = 500;
/// Most bytes of one partition in one fetch answer.
const REPLICA_FETCH_PARTITION_BYTES: u32 = 1 << 20;
/// Most bytes of one fetch answer.
const REPLICA_FETCH_BYTES: usize = 8 << 20;
/// The longest a follower waits for its copies to be synced before fetching
/// again (the next fetch reports whatever is durable by then).
const REPLICA_SYNC_WAIT: Duration = Duration::from_secs(1);
/// How often leaders look for ISR changes to ask for.
const ISR_CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// The longest an ISR change waits for the controller's answer.
const ISR_CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed fetch round (the leader unreachable, say).
const REPLICA_FETCH_BACKOFF: Duration = Duration::from_millis(200);

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ReplicaFetchPartition {
    topic: String,
    partition: u32,
    leader_epoch: i32,
    fetch_offset: u64,
    durable_offset: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ReplicaFetchRequest {
    broker_id: i32,
    partitions: Vec<ReplicaFetchPartition>,
    max_wait_ms: u32,
}

/// One partition's answer; its records follow the header, in order.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct ReplicaFetchAnswer {
    error: Option<PeerError>,
    high_watermark: u64,
    log_start_offset: u64,
    log_end_offset: u64,
    records_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct EpochEndOffsetRequest {
    topic: String,
    partition: u32,
    leader_epoch: i32,
    requested_epoch: i32,
}

type EpochEndOffsetAnswer = Result<Option<(i32, u64)>, PeerError>;

/// Partitions followed on one leader: its address and (topic, partition,
/// leader epoch) of each.
type Followed = (String, Vec<(String, u32, i32)>);

impl Node {
    /// The local replica of `topic-partition` as leader in `leader_epoch`,
    /// checked to be a replica set that holds `follower`.
    fn replica_for_follower(
        &self,
        topic: &str,
        partition: u32,
        leader_epoch: i32,
        follower: i32,
    ) -> Result<Partition, ApiError> {
        let (local, index) = self.slot(topic, partition as i32)?;
        let (partition_here, _, epoch) = local.slots[index].led()?;
        if epoch != leader_epoch {
            let message = format!("{topic}-{partition} is in leader epoch {epoch} here, not {leader_epoch}");
            return Err(ApiError::new(ErrorCode::NotLeaderOrFollower, message));
        }
        let is_replica = self
            .controller
            .read(|image| image.partition(topic, partition).is_ok_and(|s| s.replicas.contains(&follower)));
        if !is_replica {
            let message = format!("broker {follower} is not a replica of {topic}-{partition}");
            return Err(ApiError::new(ErrorCode::NotLeaderOrFollower, message));
        }
        Ok(partition_here.clone())
    }

    /// Serves a follower's `replica-fetch`: for each partition this broker
    /// leads in the follower's epoch, the batches from its fetch offset up to
    /// the log end (past the high watermark: followers copy everything),
    /// waiting up to the request's wait for something new.
    pub async fn replica_fetch(&self, payload: &[u8]) -> Vec<u8> {
        let request: ReplicaFetchRequest = match serde_json::from_slice(payload) {
            Ok(request) => request,
            Err(error) => {
                let answer = ReplicaFetchAnswer {
                    error: Some((ErrorCode::InvalidRequest as u16, format!("a malformed replica fetch: {error}"))),
                    ..ReplicaFetchAnswer::default()
                };
                return frame(&[answer], &[]);
            }
        };
        let replicas_now = || -> Vec<Result<Partition, ApiError>> {
            let partitions = request.partitions.iter();
            partitions
                .map(|p| self.replica_for_follower(&p.topic, p.partition, p.leader_epoch, request.broker_id))
                .collect()
        };
        // Each follower's progress is noted first: it may commit records (and
        // release `acks=all` producers) even when nothing new is there to send.
        let now_ms = self.replication_now_ms();
        let first: Vec<Result<Partition, ApiError>> = request
            .partitions
            .iter()
            .zip(replicas_now())
            .map(|(fetch, replica)| {
                let replica = replica?;
                let (log_start, log_end) =
                    replica.with_log(|log| Ok((log.log_start_offset(), log.log_end_offset())))?;
                check_fetch_offset(&replica, fetch.fetch_offset, log_start, log_end)?;
                let durable = fetch.durable_offset.min(fetch.fetch_offset);
                replica.on_follower_fetch(
                    request.broker_id,
                    fetch.leader_epoch,
                    fetch.fetch_offset,
                    durable,
                    now_ms,
                )?;
                Ok(replica)
            })
            .collect();
        let replicas = first;
        // Long poll: wait until one of them has something past its fetch offset.
        let waiting = request.partitions.iter().zip(&replicas).all(|(fetch, replica)| {
            replica.as_ref().is_ok_and(|replica| replica.log_end_offset() == fetch.fetch_offset)
        });
        if waiting && request.max_wait_ms > 0 {
            let deadline = tokio::time::Instant::now()
                + Duration::from_millis(request.max_wait_ms.min(REPLICA_FETCH_WAIT_MS) as u64);
            let waits = request.partitions.iter().zip(&replicas).filter_map(|(fetch, replica)| {
                let replica = replica.as_ref().ok()?.clone();
                let offset = fetch.fetch_offset;
                Some(Box::pin(async move { replica.wait_log_end_above(offset, deadline).await }))
            });
            let waits: Vec<_> = waits.collect();
            if !waits.is_empty() {
                futures::future::select_all(waits).await;
            }
        }
        // Leadership may have moved during the wait: check again.
        let replicas: Vec<Result<Partition, ApiError>> =
            replicas.into_iter().zip(replicas_now()).map(|(first, now)| first.and(now)).collect();
        let mut answers = Vec::with_capacity(replicas.len());
        let mut records = Vec::new();
        for (fetch, replica) in request.partitions.iter().zip(replicas) {
            let mut answer = ReplicaFetchAnswer::default();
            match replica.and_then(|replica| {
                let mut buffer = Vec::new();
                let room = REPLICA_FETCH_BYTES.saturating_sub(records.len());
                let (log_start, high_watermark) = replica.offsets()?;
                let log_end = replica.log_end_offset();
                check_fetch_offset(&replica, fetch.fetch_offset, log_start, log_end)?;
                if fetch.fetch_offset < log_end && room > 0 {
                    let max_bytes = (REPLICA_FETCH_PARTITION_BYTES as usize).min(room);
                    replica.read_for_follower(fetch.fetch_offset, max_bytes, &mut buffer)?;
                }
                Ok((log_start, high_watermark, log_end, buffer))
            }) {
                Ok((log_start, high_watermark, log_end, buffer)) => {
                    answer.log_start_offset = log_start;
                    answer.high_watermark = high_watermark;
                    answer.log_end_offset = log_end;
                    answer.records_bytes = buffer.len() as u64;
                    records.extend_from_slice(&buffer);
                }
                Err(error) => answer.error = Some(to_peer_error(&error)),
            }
            if answer.error.is_some() {
                // The offsets tell a follower behind the log start where to restart.
                if let Some(replica) = self.local_replica(&fetch.topic, fetch.partition) {
                    if let Ok((log_start, high_watermark)) = replica.offsets() {
                        answer.log_start_offset = log_start;
                        answer.high_watermark = high_watermark;
                        answer.log_end_offset = replica.log_end_offset();
                    }
                }
            }
            answers.push(answer);
        }
        frame(&answers, &records)
    }

    /// Serves `epoch-end-offset` (KIP-279's OffsetsForLeaderEpoch) for a
    /// follower finding where its log diverges from this leader's.
    pub fn epoch_end_offset(&self, payload: &[u8]) -> Vec<u8> {
        let answer: EpochEndOffsetAnswer = serde_json::from_slice::<EpochEndOffsetRequest>(payload)
            .map_err(|error| ApiError::new(ErrorCode::InvalidRequest, error.to_string()))
            .and_then(|request| {
                let (local, index) = self.slot(&request.topic, request.partition as i32)?;
                let (partition, _, epoch) = local.slots[index].led()?;
                if epoch != request.leader_epoch {
                    let message = format!("leader epoch {epoch} here, not {}", request.leader_epoch);
                    return Err(ApiError::new(ErrorCode::NotLeaderOrFollower, message));
                }
                Ok(partition.end_offset_for_epoch(request.requested_epoch)?)
            })
            .map_err(|error| to_peer_error(&error));
        serde_json::to_vec(&answer).unwrap_or_default()
    }

    /// The partitions this broker follows, by leader: (topic, partition,
    /// leader epoch) with the leader's address.
    fn followed(&self) -> BTreeMap<i32, Followed> {
        let topics = self.topics();
        self.controller.read(|image| {
            let mut by_leader: BTreeMap<i32, Followed> = BTreeMap::new();
            for (topic, partition, state) in image.partitions() {
                let here = topics
                    .get(topic)
                    .is_some_and(|local| matches!(local.slots.get(partition as usize), Some(Slot::Online { .. })));
                if state.leader == self.broker.id
                    || state.leader < 0
                    || !state.replicas.contains(&self.broker.id)
                    || !here
                {
                    continue;
                }
                let Some(leader) = image.brokers.get(&state.leader) else { continue };
                let address = format!("{}:{}", leader.registration.host, leader.registration.port);
                let entry = by_leader.entry(state.leader).or_insert_with(|| (address, Vec::new()));
                entry.1.push((topic.to_owned(), partition, state.leader_epoch));
            }
            by_leader
        })
    }

    fn local_replica(&self, topic: &str, partition: u32) -> Option<Partition> {
        let (local, index) = self.slot(topic, partition as i32).ok()?;
        match &local.slots[index] {
            Slot::Online { partition, .. } => Some(partition.clone()),
            _ => None,
        }
    }

    /// The local replica of a partition this broker follows (its appends and
    /// truncations check again, under the log lock, that it still follows the
    /// leader epoch they were fetched in).
    fn followed_replica(&self, topic: &str, partition: u32) -> Option<Partition> {
        self.with_followed(topic, partition, |replica, _| replica.clone())
    }

    /// Runs `f` on a followed replica (see [`Node::followed_replica`]) and its
    /// idempotent-producer table.
    fn with_followed<T>(
        &self,
        topic: &str,
        partition: u32,
        f: impl FnOnce(&Partition, &Mutex<ProducerStates>) -> T,
    ) -> Option<T> {
        let (local, index) = self.slot(topic, partition as i32).ok()?;
        match &local.slots[index] {
            Slot::Online { partition, producers, .. } if partition.following_epoch().is_some() => {
                Some(f(partition, producers))
            }
            _ => None,
        }
    }

    /// Rebuilds a followed replica's producer table from its log (after a
    /// truncation took batches it had recorded).
    fn rebuild_followed_producers(&self, topic: &str, partition: u32) {
        self.with_followed(topic, partition, |replica, producers| match data::rebuild_producer_states(replica) {
            Ok(rebuilt) => *lock(producers) = rebuilt,
            Err(error) => tracing::warn!(partition = %replica.name(), %error, "producer table not rebuilt"),
        });
    }

    /// Keeps one fetch session per leader broker this broker follows
    /// partitions of; runs until aborted.
    pub async fn follow_leaders(self: Arc<Self>) {
        let mut applied_index = self.controller.applied().applied_index.clone();
        let mut sessions = Sessions::default();
        loop {
            let sessions = &mut sessions.0;
            sessions.retain(|_, session| !session.is_finished());
            for leader in self.followed().into_keys() {
                sessions.entry(leader).or_insert_with(|| tokio::spawn(self.clone().fetch_from(leader)));
            }
            if let Ok(Err(_)) = tokio::time::timeout(Duration::from_secs(1), applied_index.changed()).await {
                return; // the controller is gone: the broker is stopping
            }
        }
    }

    /// One fetch session: every partition this broker follows on `leader`,
    /// until it follows none there.
    async fn fetch_from(self: Arc<Self>, leader: i32) {
        // Partitions whose log agrees with the leader's in this leader epoch.
        let mut agreed: BTreeMap<(String, u32), i32> = BTreeMap::new();
        loop {
            let Some((address, partitions)) = self.followed().remove(&leader) else { return };
            let current: BTreeSet<(String, u32)> = partitions.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
            agreed.retain(|key, _| current.contains(key));
            for (topic, partition, epoch) in &partitions {
                let key = (topic.clone(), *partition);
                if agreed.get(&key) != Some(epoch)
                    && self.find_divergence(leader, &address, topic, *partition, *epoch).await
                {
                    agreed.insert(key, *epoch);
                }
            }
            let fetches: Vec<ReplicaFetchPartition> = partitions
                .iter()
                .filter(|(topic, partition, epoch)| agreed.get(&(topic.clone(), *partition)) == Some(epoch))
                .filter_map(|(topic, partition, epoch)| {
                    let replica = self.followed_replica(topic, *partition)?;
                    let durable = match replica.durability() {
                        crate::partition::Durability::Durable(offset) => offset,
                        crate::partition::Durability::Failed(_) => return None,
                    };
                    Some(ReplicaFetchPartition {
                        topic: topic.clone(),
                        partition: *partition,
                        leader_epoch: *epoch,
                        fetch_offset: replica.log_end_offset(),
                        durable_offset: durable,
                    })
                })
                .collect();
            if fetches.is_empty() {
                tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
                continue;
            }
            let request = ReplicaFetchRequest {
                broker_id: self.broker.id,
                partitions: fetches.clone(),
                max_wait_ms: REPLICA_FETCH_WAIT_MS,
            };
            let payload = serde_json::to_vec(&request).unwrap_or_default();
            let answer = self.call_peer(leader, &address, RaftCallKind::ReplicaFetch, payload).await;
            let answer = answer.unwrap_or_default();
            let Some((answers, records)) = unframe::<Vec<ReplicaFetchAnswer>>(&answer) else {
                tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
                continue;
            };
            let mut position = 0usize;
            let mut refused = false;
            let mut appended_here = Vec::new();
            for (fetch, answer) in fetches.iter().zip(answers) {
                let bytes = records.get(position..position + answer.records_bytes as usize).unwrap_or_default();
                position += answer.records_bytes as usize;
                let key = (fetch.topic.clone(), fetch.partition);
                if let Some(error) = answer.error {
                    let error = from_peer_error(error);
                    tracing::debug!(partition = %format!("{}-{}", fetch.topic, fetch.partition), %error, "replica fetch refused");
                    if error.code == ErrorCode::OffsetOutOfRange && fetch.fetch_offset < answer.log_start_offset {
                        // Behind the leader's retention: start again at its log start.
                        if let Some(replica) = self.followed_replica(&fetch.topic, fetch.partition) {
                            tracing::info!(partition = %replica.name(), at = answer.log_start_offset, "restarting the log at the leader's log start");
                            let _ = replica.restart_at(answer.log_start_offset, fetch.leader_epoch);
                            self.rebuild_followed_producers(&fetch.topic, fetch.partition);
                        }
                    }
                    agreed.remove(&key);
                    refused = true;
                    continue;
                }
                if let Some(replica) = self.followed_replica(&fetch.topic, fetch.partition) {
                    // Whole segments the leader dropped (retention, a group
                    // snapshot) go here too.
                    if replica.offsets().is_ok_and(|(log_start, _)| log_start < answer.log_start_offset) {
                        let _ = replica.retire_segments_as_follower(answer.log_start_offset, fetch.leader_epoch);
                    }
                    if bytes.is_empty() {
                        replica.follow_high_watermark(fetch.leader_epoch, answer.high_watermark);
                        continue;
                    }
                }
                let mut bytes = bytes.to_vec();
                // The producer table follows the log, so a retry after a
                // failover onto this replica is still recognised.
                let appended = self.with_followed(&fetch.topic, fetch.partition, |replica, producers| {
                    replica.append_replicated(&mut bytes, fetch.leader_epoch).map(|info| {
                        replica.follow_high_watermark(fetch.leader_epoch, answer.high_watermark);
                        appended_here.push((replica.clone(), info.last_offset + 1));
                        let mut producers = lock(producers);
                        let mut rest = &bytes[..];
                        while let Ok((batch, after)) = BatchView::split_first(rest) {
                            if let Some(header) = batch.as_bytes().first_chunk::<{ abi::batch::BATCH_HEADER_BYTES }>() {
                                data::replay_header(&mut producers, header);
                            }
                            rest = after;
                        }
                    })
                });
                if let Some(Err(error)) = appended {
                    tracing::warn!(partition = %format!("{}-{}", fetch.topic, fetch.partition), %error, "replicated batches not appended; finding the divergence again");
                    agreed.remove(&key);
                    refused = true;
                }
            }
            if refused {
                // Never a hot loop on a partition the leader keeps refusing.
                tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
            }
            // Under `flush.policy=always` the leader counts what followers hold
            // on disk: the next fetch reports the copies once they are synced
            // (one group-commit round per partition, all in parallel).
            let syncs = appended_here.into_iter().filter_map(|(replica, end): (Partition, u64)| {
                let always = replica.config().flush_policy == FlushPolicy::Always;
                always.then_some(async move {
                    let _ = tokio::time::timeout(REPLICA_SYNC_WAIT, replica.wait_durable(end)).await;
                })
            });
            futures::future::join_all(syncs).await;
        }
    }

    /// Runs the divergence search for one partition against its leader and
    /// truncates to where both logs agree; false when the leader could not
    /// answer (tried again next round).
    async fn find_divergence(
        &self,
        leader: i32,
        address: &str,
        topic: &str,
        partition: u32,
        leader_epoch: i32,
    ) -> bool {
        let Some(replica) = self.followed_replica(topic, partition) else { return false };
        let Ok(epochs) = replica.leader_epochs() else { return false };
        let log_end = replica.log_end_offset();
        let mut step = Divergence::start(&epochs);
        let truncate_to = loop {
            match step {
                Divergence::TruncateTo(offset) => break offset,
                Divergence::Ask(epoch) => {
                    let request = EpochEndOffsetRequest {
                        topic: topic.to_owned(),
                        partition,
                        leader_epoch,
                        requested_epoch: epoch,
                    };
                    let payload = serde_json::to_vec(&request).unwrap_or_default();
                    let Ok(bytes) = self.call_peer(leader, address, RaftCallKind::EpochEndOffset, payload).await else {
                        return false;
                    };
                    let Ok(Ok(answer)) = serde_json::from_slice::<EpochEndOffsetAnswer>(&bytes) else { return false };
                    step = Divergence::next(&epochs, log_end, epoch, answer);
                }
            }
        };
        if truncate_to < log_end {
            tracing::info!(partition = %replica.name(), from = log_end, to = truncate_to, leader, leader_epoch, "truncating to where the leader's log agrees");
            if let Err(error) = replica.truncate_to(truncate_to, leader_epoch) {
                tracing::error!(partition = %replica.name(), %error, "truncation failed");
                return false;
            }
            self.rebuild_followed_producers(topic, partition);
        }
        true
    }
}

impl Node {
    /// Leaders ask the controller for the ISR changes their followers' progress
    /// calls for (AlterPartition, checked against the leader and partition
    /// epochs): a follower lagging `replica_lag_time_max_ms` leaves, a caught-up
    /// replica joins. Runs until aborted.
    pub async fn maintain_isrs(self: Arc<Self>) {
        loop {
            tokio::time::sleep(ISR_CHECK_INTERVAL).await;
            let now_ms = self.replication_now_ms();
            let active: BTreeSet<i32> =
                self.controller.read(|image| image.brokers.keys().copied().filter(|id| image.is_active(*id)).collect());
            let mut asks = Vec::new();
            for (topic, local) in self.topics().iter() {
                for (index, replica) in local.slots.iter().enumerate() {
                    let Some(replica) = replica.partition() else { continue };
                    let can_join = |broker: i32| active.contains(&broker);
                    if let Some(request) = replica.isr_request(now_ms, self.replica_lag_time_max_ms, can_join) {
                        asks.push((topic.clone(), index as u32, replica.clone(), request));
                    }
                }
            }
            // Each on its own task: one slow answer holds up no other partition.
            for (topic, partition, replica, request) in asks {
                let node = self.clone();
                tokio::spawn(async move {
                    tracing::info!(partition = %replica.name(), isr = ?request.isr, "asking for an ISR change");
                    let change = ControllerRequest::AlterPartition {
                        topic,
                        partition,
                        leader: node.broker.id,
                        leader_epoch: request.leader_epoch,
                        partition_epoch: request.partition_epoch,
                        isr: request.isr.clone(),
                    };
                    // The outcome is learned from the metadata (a new partition
                    // state settles the leader's maximal ISR): an answer, even a
                    // refusal, says nothing of an older request still in flight.
                    match tokio::time::timeout(ISR_CHANGE_TIMEOUT, node.controller.request(&change)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(SubmitError::Refused(ControllerError::InvalidIsr(reason)))) => {
                            tracing::info!(partition = %replica.name(), %reason, "ISR change refused");
                        }
                        Ok(Err(error)) => tracing::debug!(partition = %replica.name(), %error, "ISR change not made"),
                        Err(_) => tracing::debug!(partition = %replica.name(), "ISR change not answered in time"),
                    }
                });
            }
        }
    }
}

/// A follower's fetch offset must lie in the leader's log (a follower below its
/// log start restarts there; one past its end has diverged).
fn check_fetch_offset(replica: &Partition, fetch_offset: u64, log_start: u64, log_end: u64) -> Result<(), ApiError> {
    if fetch_offset < log_start || fetch_offset > log_end {
        let message = format!("fetch offset {fetch_offset} is outside [{log_start}, {log_end}] of {}", replica.name());
        return Err(ApiError::new(ErrorCode::OffsetOutOfRange, message));
    }
    Ok(())
}

/// The fetch sessions by leader; aborted with their owner (shutdown).
#[derive(Default)]
struct Sessions(BTreeMap<i32, tokio::task::JoinHandle<()>>);

impl Drop for Sessions {
    fn drop(&mut self) {
        self.0.values().for_each(tokio::task::JoinHandle::abort);
    }
}
