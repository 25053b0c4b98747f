//! [`Partition`]: one partition's [`Log`] shared by appenders, readers, the flusher
//! and retention, with group commit.
//!
//! Locking: one mutex around the `Log`, held only for in-memory work and page-cache
//! writes; an append's validation (CRC of every byte) runs before it is taken. Reads are planned under it and executed outside; fdatasync rounds run
//! outside it (see `broker_core::log::FlushTicket`); retention deletes files outside it.
//!
//! Group commit (`flush.policy=always`): an append marks the partition dirty and,
//! if no round is queued, queues one on the [`Flusher`]. A round syncs everything
//! appended before it started; appends arriving during the round set the
//! partition dirty again and are covered by the next round. Appenders wait with
//! [`Partition::wait_durable`] on a watch of the durable offset. At most one round
//! per partition runs at a time.
//!
//! A round starts by lingering briefly (at most `group_commit_linger`) until as many
//! appends arrived as there were waiters when the previous round published: the
//! appenders it released usually append again within microseconds, and without the
//! wait they would split into two halves that alternate between fdatasyncs.
//!
//! Truncation goes through `Partition` methods, which keep the watches in step
//! with the log; `with_log` is for reads.
//!
//! Replication (DESIGN §3): the cluster metadata gives each replica a [`Role`].
//! A leader keeps its followers' progress ([`LeaderReplicas`]) and publishes the
//! high watermark over its ISR; a follower publishes what its leader's fetch
//! answers say, never what its own log would allow. Appends check the role
//! under the log lock: a follower's copy never lands in a leader's log, nor a
//! deposed leader's append in a follower's. Lock order: the log, then the role.
//!
//! Invariants: the published durable offset only grows; once the log is fenced the
//! watch says so and every waiter gets the error instead of waiting forever. The
//! high watermark grows while a role lasts; it comes down only with a truncation
//! or a role change (a new leader starts from the committed offset it knew).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use broker_core::clock::Clock;
use broker_core::cluster::{BrokerId, PartitionState};
use broker_core::log::{AppendInfo, FlushPolicy, Log, LogConfig, LogError, ReadInfo, ValidatedBatches};
use broker_core::replication::{HighWatermark, LeaderReplicas, ReplicaOffsets};
use tokio::sync::watch;

use crate::environment::Environment;
use crate::flusher::Flusher;

/// Durability as published to waiters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Every offset below this one is on disk.
    Durable(u64),
    /// A sync failed; the log is fenced and nothing more will become durable.
    Failed(String),
}

/// Why a partition refused an operation.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Log(#[from] LogError),
    /// The replica is not in the role the caller expected: leadership moved.
    #[error("{0}")]
    Role(String),
    /// Fewer in-sync replicas than `min.insync.replicas`.
    #[error("{0}")]
    NotEnoughReplicas(String),
}

/// What this replica is to its partition, as the cluster metadata says.
#[derive(Debug)]
enum Role {
    /// Placed by no cluster (a partition opened on its own: tools, tests): the
    /// log alone is the ISR.
    Standalone,
    Leader {
        replicas: LeaderReplicas,
        min_insync_replicas: usize,
    },
    /// Copies the log of the leader of `leader_epoch` (-1: there is none now).
    Follower {
        leader_epoch: i32,
    },
}

/// An ISR change a leader asks the controller for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsrRequest {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<BrokerId>,
}

/// Where the partition is in the group-commit cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RoundState {
    Idle,
    Queued,
    Running,
    /// Appends arrived while a round ran: queue another when it ends.
    RunningDirty,
}

/// A shared partition; cheap to clone.
#[derive(Clone, Debug)]
pub struct Partition {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    name: String,
    dir: PathBuf,
    /// `None` once closed.
    log: Mutex<Option<Log>>,
    /// The log's config: appends are validated against it before locking.
    config: RwLock<LogConfig>,
    round: Mutex<RoundState>,
    /// Signalled (with `round` held) by every append that schedules a round.
    appended: Condvar,
    /// Appends so far, and how many of them the last round's start had seen.
    append_count: AtomicU64,
    appends_at_last_round: AtomicU64,
    /// Appenders that were waiting when the last round published: how many appends
    /// the next round can expect soon.
    expected_appends: AtomicU64,
    /// The longest a round start waits for those expected appends.
    group_commit_linger: Duration,
    durability: watch::Sender<Durability>,
    /// The high watermark: the end of what readers may see. Under
    /// `flush.policy=always` it is the durable offset (nothing is visible before it is
    /// on disk); under `interval` it is the log end offset. Only grows.
    high_watermark: watch::Sender<u64>,
    flusher: Flusher,
    /// Completed flush rounds (a metric: appends per round shows group commit at work).
    flush_round_count: AtomicU64,
    /// Wall-clock start of the last flush round (drives `flush.ms`).
    last_flush_ms: AtomicI64,
    clock: Arc<dyn Clock>,
    /// Set by `close`: waiters on the high watermark stop waiting.
    closed: std::sync::atomic::AtomicBool,
    /// The log end offset, for followers' long polls on a leader.
    log_end: watch::Sender<u64>,
    /// See [`Role`]; taken after the log lock, never before it.
    role: Mutex<Role>,
    /// The leader epoch while leading (-1 otherwise), for waiters that must
    /// not outlive their leadership. Written with the role.
    leading_epoch: AtomicI64,
}

/// Locks, carrying on past poisoning: every guarded value here stays consistent
/// across a panic (plain state, no half-done multi-step updates).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Partition {
    /// Opens (recovering if needed) the partition log in `dir`.
    pub fn open(
        environment: Environment,
        name: String,
        dir: PathBuf,
        config: LogConfig,
        flusher: Flusher,
        group_commit_linger: Duration,
    ) -> Result<Partition, LogError> {
        let log = Log::open(environment.storage.clone(), dir.clone(), config.clone())?;
        let (durability, _) = watch::channel(Durability::Durable(log.durable_offset()));
        let (log_end, _) = watch::channel(log.log_end_offset());
        let (high_watermark, _) = watch::channel(match config.flush_policy {
            FlushPolicy::Always => log.durable_offset(),
            FlushPolicy::Interval => log.log_end_offset(),
        });
        let shared = Shared {
            name,
            dir,
            log: Mutex::new(Some(log)),
            config: RwLock::new(config),
            round: Mutex::new(RoundState::Idle),
            appended: Condvar::new(),
            append_count: AtomicU64::new(0),
            appends_at_last_round: AtomicU64::new(0),
            expected_appends: AtomicU64::new(0),
            group_commit_linger,
            durability,
            high_watermark,
            flusher,
            flush_round_count: AtomicU64::new(0),
            last_flush_ms: AtomicI64::new(environment.clock.now_ms()),
            clock: environment.clock,
            closed: std::sync::atomic::AtomicBool::new(false),
            log_end,
            role: Mutex::new(Role::Standalone),
            leading_epoch: AtomicI64::new(0),
        };
        Ok(Partition { shared: Arc::new(shared) })
    }

    /// `topic-partition`.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Runs `f` on the open log (read-only), with its lock held; fails once the
    /// partition is closed. Changes go through `Partition` methods, which keep the
    /// durable-offset watch in step with the log.
    pub fn with_log<T>(&self, f: impl FnOnce(&Log) -> Result<T, LogError>) -> Result<T, LogError> {
        self.with_log_mut(|log| f(log))
    }

    /// Runs `f` on the open log with its lock held; a failure that fenced the
    /// log is published to every waiter.
    fn with_log_mut<T, E: From<LogError>>(&self, f: impl FnOnce(&mut Log) -> Result<T, E>) -> Result<T, E> {
        let mut log = lock(&self.shared.log);
        let Some(open) = log.as_mut() else { return Err(self.closed().into()) };
        let result = f(open);
        if result.is_err() {
            if let Some(reason) = open.fenced_reason() {
                self.shared.durability.send_replace(Durability::Failed(reason.to_owned()));
            }
        }
        result
    }

    fn closed(&self) -> LogError {
        LogError::Closed { dir: self.shared.dir.clone() }
    }

    /// Appends batches (see [`Log::append`]) as the leader of `leader_epoch`
    /// (refused when this replica does not lead in that epoch); under
    /// `flush.policy=always` also schedules the group-commit round that will
    /// make them durable. Validation (the CRC of every byte) runs before the
    /// lock is taken.
    pub fn append(&self, batches: &mut [u8], leader_epoch: i32) -> Result<AppendInfo, ReplicaError> {
        let config = self.config();
        let validated = ValidatedBatches::new(batches, &config)?;
        let info = self.with_log_mut(|log| -> Result<_, ReplicaError> {
            self.check_leads(leader_epoch)?;
            let info = log.append_validated(validated, leader_epoch)?;
            self.appended(log, &config, info);
            Ok(info)
        })?;
        self.appended_unlocked(&config);
        Ok(info)
    }

    /// [`Partition::append`] in whatever epoch this replica leads now (the
    /// broker's own records: consumer groups); returns the epoch too.
    pub fn append_as_leader(&self, batches: &mut [u8]) -> Result<(AppendInfo, i32), ReplicaError> {
        let leader_epoch = self.leader_epoch().ok_or_else(|| self.not_in_role("does not lead"))?;
        Ok((self.append(batches, leader_epoch)?, leader_epoch))
    }

    /// Fails unless this replica leads in `leader_epoch` (or stands alone);
    /// called with the log lock held.
    fn check_leads(&self, leader_epoch: i32) -> Result<(), ReplicaError> {
        match &*lock(&self.shared.role) {
            Role::Standalone => Ok(()),
            Role::Leader { replicas, .. } if replicas.leader_epoch() == leader_epoch => Ok(()),
            _ => Err(self.not_in_role(&format!("does not lead in leader epoch {leader_epoch}"))),
        }
    }

    /// Fails unless this replica follows the leader of `leader_epoch`; called
    /// with the log lock held.
    fn check_follows(&self, leader_epoch: i32) -> Result<(), ReplicaError> {
        match &*lock(&self.shared.role) {
            Role::Follower { leader_epoch: following } if *following == leader_epoch && leader_epoch >= 0 => Ok(()),
            _ => Err(self.not_in_role(&format!("does not follow the leader of epoch {leader_epoch}"))),
        }
    }

    fn not_in_role(&self, what: &str) -> ReplicaError {
        ReplicaError::Role(format!("this replica of {} {what}", self.shared.name))
    }

    /// What follows an append, with the log lock held (so the offsets given
    /// the high-watermark rule are the log's, never an older append's): the
    /// log end published and, under `interval`, the high watermark moved.
    fn appended(&self, log: &Log, config: &LogConfig, info: AppendInfo) {
        self.shared.append_count.fetch_add(1, Ordering::Relaxed);
        self.shared.log_end.send_replace(info.last_offset + 1);
        if config.flush_policy == FlushPolicy::Interval {
            self.advance_high_watermark(FlushPolicy::Interval, Self::leader_offsets(log));
        }
    }

    /// What follows an append once the log lock is released: under `always`,
    /// the flush round that will make it durable.
    fn appended_unlocked(&self, config: &LogConfig) {
        if config.flush_policy == FlushPolicy::Always {
            self.schedule_round();
        }
    }

    /// Appends batches copied from the leader of `leader_epoch`, byte for byte
    /// (see [`Log::append_replicated`]), made durable by the same group commit;
    /// refused unless this replica follows that leader.
    pub fn append_replicated(&self, batches: &mut [u8], leader_epoch: i32) -> Result<AppendInfo, ReplicaError> {
        let config = self.config();
        let validated = ValidatedBatches::new(batches, &config)?;
        let info = self.with_log_mut(|log| -> Result<_, ReplicaError> {
            self.check_follows(leader_epoch)?;
            let info = log.append_replicated(validated)?;
            self.appended(log, &config, info);
            Ok(info)
        })?;
        self.appended_unlocked(&config);
        Ok(info)
    }

    /// Cuts the log to end at `offset` (whole batches; see [`Log::truncate_to`]):
    /// a follower of the leader of `leader_epoch` whose log diverged from its
    /// leader's. Only followers truncate, so no producer waits on what goes; the
    /// published durable offset, the high watermark and the log end come down
    /// with the log (the one exception to their only growing). Returns the new
    /// log end.
    pub fn truncate_to(&self, offset: u64, leader_epoch: i32) -> Result<u64, ReplicaError> {
        // Published under the log lock, as flush rounds publish (see `publish`),
        // so a round that finished before the cut never raises them again.
        self.with_log_mut(|log| {
            self.check_follows(leader_epoch)?;
            let log_end_offset = log.truncate_to(offset)?;
            Ok(self.publish_cut(log, log_end_offset, false))
        })
    }

    /// Empties the log and restarts it at `offset` (a follower behind its
    /// leader's log start); publishes like [`Partition::truncate_to`].
    pub fn restart_at(&self, offset: u64, leader_epoch: i32) -> Result<u64, ReplicaError> {
        self.with_log_mut(|log| {
            self.check_follows(leader_epoch)?;
            let log_end_offset = log.restart_at(offset)?;
            Ok(self.publish_cut(log, log_end_offset, true))
        })
    }

    /// Publishes a log cut to `log_end_offset` (called with the log lock held):
    /// the durable offset, the high watermark and the log end come down with
    /// it; a log `restarted` empty has its high watermark at its new start.
    fn publish_cut(&self, log: &Log, log_end_offset: u64, restarted: bool) -> u64 {
        self.shared.durability.send_replace(Durability::Durable(log.durable_offset()));
        self.shared.high_watermark.send_if_modified(|high_watermark| {
            let cut = if restarted { log_end_offset } else { (*high_watermark).min(log_end_offset) };
            std::mem::replace(high_watermark, cut) != cut
        });
        self.shared.log_end.send_replace(log_end_offset);
        log_end_offset
    }

    /// The log end offset.
    pub fn log_end_offset(&self) -> u64 {
        *self.shared.log_end.borrow()
    }

    /// KIP-279's lookup on this replica's log: the largest epoch at most
    /// `epoch` and where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Result<Option<(i32, u64)>, LogError> {
        self.with_log(|log| Ok(log.end_offset_for_epoch(epoch)))
    }

    /// The leader epochs of the log's batches.
    pub fn leader_epochs(&self) -> Result<broker_core::replication::LeaderEpochCache, LogError> {
        self.with_log(|log| Ok(log.leader_epochs().clone()))
    }

    /// Waits until the log end passes `offset` or `deadline` comes (a
    /// follower's long poll); returns the log end then.
    pub async fn wait_log_end_above(&self, offset: u64, deadline: tokio::time::Instant) -> u64 {
        let mut receiver = self.shared.log_end.subscribe();
        let closed = &self.shared.closed;
        let advanced = |end: &u64| *end > offset || closed.load(Ordering::Relaxed);
        let _ = tokio::time::timeout_at(deadline, receiver.wait_for(advanced)).await;
        self.log_end_offset()
    }

    /// Reads whole batches from `offset` up to the log end (a follower's fetch,
    /// which copies past the high watermark).
    pub fn read_for_follower(&self, offset: u64, max_bytes: usize, buffer: &mut Vec<u8>) -> Result<ReadInfo, LogError> {
        let plan = self.with_log(|log| log.read(offset, max_bytes, None))?;
        plan.read_into(buffer)
    }

    /// The partition's current config.
    pub fn config(&self) -> LogConfig {
        self.shared.config.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Replaces the config (altered topic configs); see [`Log::set_config`]. Switching
    /// to `flush.policy=interval` makes everything appended so far visible at once.
    pub fn set_config(&self, config: LogConfig) -> Result<(), LogError> {
        self.with_log_mut(|log| {
            log.set_config(config.clone())?;
            let flush_policy = config.flush_policy;
            *self.shared.config.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
            self.advance_high_watermark(flush_policy, Self::leader_offsets(log));
            Ok(())
        })
    }

    /// The high watermark: readers see offsets below it only.
    pub fn high_watermark(&self) -> u64 {
        *self.shared.high_watermark.borrow()
    }

    /// Waits until the high watermark passes `offset` or `deadline` comes; returns
    /// the high watermark then.
    pub async fn wait_high_watermark_above(&self, offset: u64, deadline: tokio::time::Instant) -> u64 {
        let mut receiver = self.shared.high_watermark.subscribe();
        let closed = &self.shared.closed;
        let advanced = |high_watermark: &u64| *high_watermark > offset || closed.load(Ordering::Relaxed);
        let waited = tokio::time::timeout_at(deadline, receiver.wait_for(advanced));
        // Timed out, closed or reached: the current value answers all three.
        let _ = waited.await;
        self.high_watermark()
    }

    /// The high-watermark rule after the leader's own offsets moved: over the
    /// ISR on a leader ([`LeaderReplicas::advance_high_watermark`]), over the
    /// log alone when standalone; a follower's comes from its leader.
    fn advance_high_watermark(&self, policy: FlushPolicy, leader: ReplicaOffsets) {
        let mut role = lock(&self.shared.role);
        self.advance_in_role(&mut role, policy, leader);
    }

    fn advance_in_role(&self, role: &mut Role, policy: FlushPolicy, leader: ReplicaOffsets) {
        let advanced = match role {
            Role::Standalone => {
                let mut high_watermark = HighWatermark::new(self.high_watermark());
                high_watermark.advance(policy, &[leader], 1)
            }
            Role::Leader { replicas, min_insync_replicas } => {
                replicas.advance_high_watermark(policy, leader, *min_insync_replicas)
            }
            Role::Follower { .. } => None,
        };
        if let Some(high_watermark) = advanced {
            self.shared.high_watermark.send_if_modified(|published| {
                let raised = high_watermark > *published;
                *published = (*published).max(high_watermark);
                raised
            });
        }
    }

    /// The leader's offsets now; called with the log lock held.
    fn leader_offsets(log: &Log) -> ReplicaOffsets {
        ReplicaOffsets { log_end_offset: log.log_end_offset(), durable_offset: log.durable_offset() }
    }

    /// Takes up the role the cluster metadata gives this replica (broker `me`)
    /// in `state`: leader when `leads`, else follower of `state`'s leader. A
    /// leader that stays leader in the same epoch learns the new ISR and
    /// replica set. A new leader starts its high watermark from the committed
    /// offset it knew (as a follower, or as the leader before), never from its
    /// own log end: records past it may be on no other ISR member.
    pub fn take_role(&self, me: BrokerId, state: &PartitionState, leads: bool, now_ms: u64) {
        let min_insync_replicas = usize::from(self.config().min_insync_replicas);
        let _ = self.with_log_mut(|log| -> Result<(), LogError> {
            let mut role = lock(&self.shared.role);
            let policy = self.config().flush_policy;
            let known = match &*role {
                // Nothing published by a cluster yet: only the log start is known committed.
                Role::Standalone => log.log_start_offset(),
                Role::Leader { replicas, .. } => replicas.high_watermark(),
                Role::Follower { .. } => self.high_watermark(),
            }
            .clamp(log.log_start_offset(), log.log_end_offset());
            if leads {
                if let Role::Leader { replicas, min_insync_replicas: min } = &mut *role {
                    if replicas.on_partition_state(state, now_ms) {
                        *min = min_insync_replicas;
                        self.advance_in_role(&mut role, policy, Self::leader_offsets(log));
                        return Ok(());
                    }
                }
                let replicas = LeaderReplicas::new(me, state, known, log.log_end_offset(), now_ms);
                *role = Role::Leader { replicas, min_insync_replicas };
                self.shared.leading_epoch.store(i64::from(state.leader_epoch), Ordering::Release);
                tracing::info!(partition = %self.shared.name, leader_epoch = state.leader_epoch, isr = ?state.isr, "leading");
            } else {
                let leader_epoch = if state.leader < 0 { -1 } else { state.leader_epoch };
                if matches!(&*role, Role::Follower { leader_epoch: following } if *following == leader_epoch) {
                    return Ok(());
                }
                *role = Role::Follower { leader_epoch };
                self.shared.leading_epoch.store(-1, Ordering::Release);
            }
            // Always sent: waiters on the old role wake and see it is gone.
            self.shared.high_watermark.send_replace(known);
            self.advance_in_role(&mut role, policy, Self::leader_offsets(log));
            Ok(())
        });
    }

    /// Leads nothing any more (a stopping broker, or another process took
    /// this broker id): follows no one until the metadata says otherwise.
    pub fn stop_leading(&self) {
        // The log lock first, as every role change: no append that checked
        // the old role is still under way.
        let _log = lock(&self.shared.log);
        let mut role = lock(&self.shared.role);
        if matches!(&*role, Role::Leader { .. } | Role::Standalone) {
            let known = self.high_watermark();
            *role = Role::Follower { leader_epoch: -1 };
            self.shared.leading_epoch.store(-1, Ordering::Release);
            self.shared.high_watermark.send_replace(known);
        }
    }

    /// The leader epoch when this replica leads.
    pub fn leader_epoch(&self) -> Option<i32> {
        match &*lock(&self.shared.role) {
            Role::Leader { replicas, .. } => Some(replicas.leader_epoch()),
            Role::Standalone | Role::Follower { .. } => None,
        }
    }

    /// The leader epoch of the leader this replica follows.
    pub fn following_epoch(&self) -> Option<i32> {
        match &*lock(&self.shared.role) {
            Role::Follower { leader_epoch } if *leader_epoch >= 0 => Some(*leader_epoch),
            _ => None,
        }
    }

    /// A follower fetched from `fetch_offset` with everything below
    /// `durable_offset` on its disk (the leader's side of a replica fetch, in
    /// `leader_epoch`): its progress is noted and the high watermark moves.
    pub fn on_follower_fetch(
        &self,
        follower: BrokerId,
        leader_epoch: i32,
        fetch_offset: u64,
        durable_offset: u64,
        now_ms: u64,
    ) -> Result<(), ReplicaError> {
        self.with_log_mut(|log| {
            let mut role = lock(&self.shared.role);
            let Role::Leader { replicas, .. } = &mut *role else {
                return Err(self.not_in_role(&format!("does not lead in leader epoch {leader_epoch}")));
            };
            if replicas.leader_epoch() != leader_epoch {
                return Err(self.not_in_role(&format!("does not lead in leader epoch {leader_epoch}")));
            }
            let leader = Self::leader_offsets(log);
            replicas
                .on_fetch(follower, fetch_offset, durable_offset, leader.log_end_offset, now_ms)
                .map_err(|error| self.not_in_role(&error.to_string()))?;
            let policy = self.config().flush_policy;
            self.advance_in_role(&mut role, policy, leader);
            Ok(())
        })
    }

    /// A follower learns its leader's high watermark (from a fetch answer in
    /// `leader_epoch`): its own is that, as far as its log reaches.
    pub fn follow_high_watermark(&self, leader_epoch: i32, leader_high_watermark: u64) {
        let _ = self.with_log_mut(|log| -> Result<(), ReplicaError> {
            self.check_follows(leader_epoch)?;
            let high_watermark = leader_high_watermark.min(log.log_end_offset());
            self.shared.high_watermark.send_if_modified(|published| {
                let raised = high_watermark > *published;
                *published = (*published).max(high_watermark);
                raised
            });
            Ok(())
        });
    }

    /// The ISR change this leader should ask the controller for now, if any
    /// (noted as asked: see [`LeaderReplicas::asked`]).
    pub fn isr_request(&self, now_ms: u64, lag_max_ms: u64, can_join: impl Fn(BrokerId) -> bool) -> Option<IsrRequest> {
        let policy = self.config().flush_policy;
        let mut role = lock(&self.shared.role);
        let Role::Leader { replicas, .. } = &mut *role else { return None };
        let isr = replicas.isr_change(policy, now_ms, lag_max_ms, can_join)?;
        replicas.asked(isr.clone(), now_ms);
        Some(IsrRequest { leader_epoch: replicas.leader_epoch(), partition_epoch: replicas.partition_epoch(), isr })
    }

    pub fn check_min_insync(&self) -> Result<(), ReplicaError> {
        match &*lock(&self.shared.role) {
            Role::Leader { replicas, min_insync_replicas: min } if replicas.isr().len() < *min => {
                let isr = replicas.isr();
                Err(ReplicaError::NotEnoughReplicas(format!(
                    "{} has {} in-sync replica(s) {isr:?}, fewer than min.insync.replicas={min}",
                    self.shared.name,
                    isr.len()
                )))
            }
            _ => Ok(()),
        }
    }

    /// Waits until the high watermark reaches `offset_end` (everything below
    /// it committed) while this replica leads in `leader_epoch`, or until
    /// `deadline`. Ok(true): committed; Ok(false): the deadline came first;
    /// an error: leadership moved (what was appended may be lost).
    pub async fn wait_committed(
        &self,
        offset_end: u64,
        leader_epoch: i32,
        deadline: tokio::time::Instant,
    ) -> Result<bool, ReplicaError> {
        let mut receiver = self.shared.high_watermark.subscribe();
        let shared = &self.shared;
        let done = |high_watermark: &u64| {
            *high_watermark >= offset_end
                || shared.leading_epoch.load(Ordering::Acquire) != i64::from(leader_epoch)
                || shared.closed.load(Ordering::Relaxed)
        };
        let _ = tokio::time::timeout_at(deadline, receiver.wait_for(done)).await;
        // Read the epoch after the watermark: a watermark raised by another
        // leader's answers is never taken for this one's.
        let high_watermark = self.high_watermark();
        if self.shared.leading_epoch.load(Ordering::Acquire) != i64::from(leader_epoch) {
            return Err(self.not_in_role(&format!("no longer leads in leader epoch {leader_epoch}")));
        }
        if self.shared.closed.load(Ordering::Relaxed) {
            return Err(self.closed().into());
        }
        Ok(high_watermark >= offset_end)
    }

    /// Waits until every offset below `offset` is durable.
    pub async fn wait_durable(&self, offset: u64) -> Result<u64, LogError> {
        let mut receiver = self.shared.durability.subscribe();
        let reached = |state: &Durability| match state {
            Durability::Durable(durable) => *durable >= offset,
            Durability::Failed(_) => true,
        };
        let state = receiver.wait_for(reached).await.map_err(|_| self.closed())?.clone();
        match state {
            Durability::Durable(durable) => Ok(durable),
            Durability::Failed(reason) => Err(self.fenced(reason)),
        }
    }

    fn fenced(&self, reason: String) -> LogError {
        LogError::Fenced { dir: self.shared.dir.clone(), reason }
    }

    /// When the last flush round started (ms since the epoch).
    pub fn last_flush_ms(&self) -> i64 {
        self.shared.last_flush_ms.load(Ordering::Relaxed)
    }

    /// Flush rounds completed since the partition was opened.
    pub fn flush_round_count(&self) -> u64 {
        self.shared.flush_round_count.load(Ordering::Relaxed)
    }

    /// The durable offset as last published.
    pub fn durability(&self) -> Durability {
        self.shared.durability.borrow().clone()
    }

    /// Reads whole batches from `offset` into `buffer` (see [`Log::read`]); the
    /// file IO happens without the lock.
    pub fn read(&self, offset: u64, max_bytes: usize, buffer: &mut Vec<u8>) -> Result<ReadInfo, LogError> {
        let plan = self.with_log(|log| log.read(offset, max_bytes, None))?;
        plan.read_into(buffer)
    }

    /// Reads whole batches from `offset` like [`Partition::read`], but only below
    /// the high watermark (what consumers may see), into the start of `buffer`
    /// without shrinking it (see `ReadPlan::read_into_prefix`). Returns the read,
    /// how many leading bytes of `buffer` hold it, the log start offset and the
    /// high watermark the read saw. Without `first_batch_may_exceed`, a first batch
    /// bigger than `max_bytes` is not read (see `ReadPlan::within_max_bytes`).
    pub fn read_committed_prefix(
        &self,
        offset: u64,
        max_bytes: usize,
        first_batch_may_exceed: bool,
        buffer: &mut Vec<u8>,
    ) -> Result<(ReadInfo, usize, u64, u64), LogError> {
        let high_watermark = self.high_watermark();
        let plan = self.with_log(|log| log.read(offset, max_bytes, Some(high_watermark)))?;
        let plan = if first_batch_may_exceed { plan } else { plan.within_max_bytes() };
        let (info, kept_bytes) = plan.read_into_prefix(buffer)?;
        Ok((info, kept_bytes, plan.log_start_offset, high_watermark))
    }

    /// The log start offset and the high watermark.
    pub fn offsets(&self) -> Result<(u64, u64), LogError> {
        let high_watermark = self.high_watermark();
        self.with_log(|log| Ok((log.log_start_offset(), high_watermark)))
    }

    /// Queues a flush round unless one is queued or running (then marks it dirty).
    pub fn schedule_round(&self) {
        let mut round = lock(&self.shared.round);
        self.shared.appended.notify_one();
        match *round {
            RoundState::Idle => {
                *round = RoundState::Queued;
                drop(round);
                self.shared.flusher.submit(self.clone());
            }
            RoundState::Running => *round = RoundState::RunningDirty,
            RoundState::Queued | RoundState::RunningDirty => {}
        }
    }

    /// One group-commit round; called by a flusher thread.
    pub(crate) fn run_round(&self) {
        *lock(&self.shared.round) = RoundState::Running;
        self.shared.last_flush_ms.store(self.shared.clock.now_ms(), Ordering::Relaxed);
        self.linger_for_expected_appends();
        // Appends that marked the round dirty while it lingered are covered by the
        // ticket taken next: no extra round for them.
        *lock(&self.shared.round) = RoundState::Running;
        self.shared.appends_at_last_round.store(self.shared.append_count.load(Ordering::Relaxed), Ordering::Relaxed);
        let ticket = lock(&self.shared.log).as_mut().and_then(Log::begin_flush);
        match ticket {
            Some(ticket) => {
                let result = ticket.execute();
                // `None`: closed meanwhile; the shutdown flushed everything itself.
                let completed = lock(&self.shared.log).as_mut().map(|log| log.complete_flush(ticket, result));
                if let Some(completed) = completed {
                    self.publish(completed);
                }
                self.shared.flush_round_count.fetch_add(1, Ordering::Relaxed);
            }
            None => self.publish_if_fenced(),
        }
        let mut round = lock(&self.shared.round);
        if *round == RoundState::RunningDirty {
            *round = RoundState::Queued;
            drop(round);
            self.shared.flusher.submit(self.clone());
        } else {
            *round = RoundState::Idle;
        }
    }

    /// Tells every waiter when the log fenced itself (on any operation), so nobody
    /// waits for a durability that will never come.
    fn publish_if_fenced(&self) {
        let reason = lock(&self.shared.log).as_ref().and_then(|log| log.fenced_reason().map(str::to_owned));
        if let Some(reason) = reason {
            self.shared.durability.send_replace(Durability::Failed(reason));
        }
    }

    /// Flushes now in the caller's thread and publishes the result.
    pub fn flush(&self) -> Result<u64, LogError> {
        let flushed = self.with_log_mut(Log::flush);
        match &flushed {
            Ok(durable) => self.publish(Ok(*durable)),
            Err(_) => self.publish_if_fenced(),
        }
        flushed
    }

    /// Appenders released by the previous round usually append again within
    /// microseconds; starting the round before they do splits them across two
    /// fdatasyncs. Wait (at most `group_commit_linger`) until as many appends as
    /// there were waiters have arrived since the last round started. A lone
    /// appender never waits: its own append is the one expected.
    fn linger_for_expected_appends(&self) {
        let shared = &self.shared;
        let expected = shared.expected_appends.load(Ordering::Relaxed);
        let arrived =
            || shared.append_count.load(Ordering::Relaxed) - shared.appends_at_last_round.load(Ordering::Relaxed);
        let lingers = self.config().flush_policy == FlushPolicy::Always && !shared.group_commit_linger.is_zero();
        if !lingers || arrived() >= expected {
            return;
        }
        let deadline = Instant::now() + shared.group_commit_linger;
        let mut round = lock(&shared.round);
        while arrived() < expected {
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) else {
                return;
            };
            round = shared.appended.wait_timeout(round, left).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
        }
    }

    fn publish(&self, completed: Result<u64, LogError>) {
        match completed {
            Ok(durable) => {
                // Under the log lock, never above what the log holds durably now:
                // a truncation may have cut it since the round completed.
                let log = lock(&self.shared.log);
                let durable = log.as_ref().map_or(durable, |log| durable.min(log.durable_offset()));
                let waiters = self.shared.durability.receiver_count() as u64;
                self.shared.expected_appends.store(waiters, Ordering::Relaxed);
                // Visible before acknowledged: a consumer told about an offset by
                // its producer must be able to read it.
                let log_end_offset = log.as_ref().map_or(durable, Log::log_end_offset);
                let leader = ReplicaOffsets { log_end_offset, durable_offset: durable };
                self.advance_high_watermark(FlushPolicy::Always, leader);
                self.shared.durability.send_if_modified(|state| match state {
                    Durability::Durable(published) if *published < durable => {
                        *published = durable;
                        true
                    }
                    _ => false,
                });
                drop(log);
            }
            Err(error) => {
                tracing::error!(partition = %self.shared.name, %error, "flush failed; partition fenced");
                self.shared.durability.send_replace(Durability::Failed(error.to_string()));
            }
        }
    }

    /// Applies retention at `now_ms`; deletes the retired files without the lock.
    /// Returns how many segments and bytes went.
    pub fn apply_retention(&self, now_ms: i64) -> Result<(usize, u64), LogError> {
        let high_watermark = self.high_watermark();
        let retiring = self.with_log_mut(|log| log.apply_retention_below(now_ms, high_watermark))?;
        let Some(retired) = retiring else { return Ok((0, 0)) };
        let (segment_count, size_bytes) = (retired.segment_count, retired.size_bytes);
        retired.delete()?;
        Ok((segment_count, size_bytes))
    }

    /// Seals the active segment (see [`Log::roll`]).
    pub fn roll(&self) -> Result<(), LogError> {
        self.with_log_mut(Log::roll)
    }

    /// [`Partition::retire_segments_below`] on a follower of the leader of
    /// `leader_epoch` (whole segments below the leader's log start).
    pub fn retire_segments_as_follower(&self, offset: u64, leader_epoch: i32) -> Result<usize, ReplicaError> {
        let retired = self.with_log_mut(|log| -> Result<_, ReplicaError> {
            self.check_follows(leader_epoch)?;
            Ok(log.retire_segments_below(offset)?)
        })?;
        let Some(retired) = retired else { return Ok(0) };
        let segment_count = retired.segment_count;
        retired.delete()?;
        Ok(segment_count)
    }

    /// Drops the closed segments entirely below `offset` (see
    /// [`Log::retire_segments_below`]), deleting their files without the lock.
    pub fn retire_segments_below(&self, offset: u64) -> Result<usize, LogError> {
        let Some(retired) = self.with_log_mut(|log| log.retire_segments_below(offset))? else { return Ok(0) };
        let segment_count = retired.segment_count;
        retired.delete()?;
        Ok(segment_count)
    }

    /// Clean shutdown of this partition's log: flush, trim, checkpoint, marker.
    /// Every later call on any clone fails with "closed".
    pub fn close(&self) -> Result<(), LogError> {
        let Some(mut log) = lock(&self.shared.log).take() else { return Ok(()) };
        // Long polls waiting on this partition answer now (their next read fails).
        self.shared.closed.store(true, Ordering::Relaxed);
        self.shared.high_watermark.send_modify(|_| {});
        let flushed = log.flush();
        self.publish(flushed);
        log.close()
    }
}
