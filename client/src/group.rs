//! Consumer-group membership: [`Consumer::subscribe`] and offset commits.
//!
//! A `Membership` task heartbeats the group coordinator (server-side
//! assignment, KIP-848 style) and applies what it answers:
//! 1. join with the subscription (member epoch 0); the coordinator picks the
//!    member id;
//! 2. on every answer, partitions owned but no longer assigned are *revoked*:
//!    the consumer stops delivering them and takes their positions in one step
//!    (so nothing is handed out after the positions are read), commits those
//!    positions (with auto-commit; retried until `request_timeout`), the
//!    listener's `on_revoked` runs, and the next heartbeat (sent at once) reports
//!    them gone — only then can another member get them, and it starts at the
//!    commit, so a graceful hand-over delivers no record twice;
//! 3. newly assigned partitions start at their committed offset (or
//!    `auto.offset.reset`), the listener's `on_assigned` runs;
//! 4. otherwise heartbeat every `heartbeat_interval` the coordinator asks for, and
//!    commit positions every `auto_commit_interval` (with auto-commit);
//! 5. fenced (unknown member, fenced epoch): the partitions are lost (no commit:
//!    someone else may own them), `on_revoked` runs, and the member rejoins;
//!    transport errors back off and retry within the session timeout;
//! 6. `close` stops delivery, commits (with auto-commit) what was delivered, and
//!    leaves (member epoch -1), so the partitions move at once.
//!
//! Commits carry the member epoch; the coordinator refuses them from a member that
//! was fenced, so a zombie never overwrites a newer commit.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use abi::weir_capnp::broker;
use abi::ErrorCode;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::consumer::{Consumer, Inner, Offset};
use crate::error::refused_or_ok;
use crate::error::{broker_error, ClientError};
use crate::record::ConsumerRecord;

type Key = (String, i32);

/// Called by the membership task when the assignment changes (keep it short:
/// heartbeats wait for it).
pub trait RebalanceListener: Send + Sync {
    /// Partitions just assigned (they start at their committed offsets).
    fn on_assigned(&self, _partitions: &[(String, i32)]) {}
    /// Partitions taken away (after their positions were committed, with
    /// auto-commit), or lost when the member was fenced.
    fn on_revoked(&self, _partitions: &[(String, i32)]) {}
}

/// What the member knows about itself.
#[derive(Debug, Default, Clone)]
struct MemberState {
    member_id: String,
    member_epoch: i32,
    owned: BTreeSet<Key>,
}

/// A running membership; see the module docs.
pub(crate) struct Membership {
    group_id: String,
    state: Arc<Mutex<MemberState>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Membership").field("group_id", &self.group_id).finish_non_exhaustive()
    }
}

impl Membership {
    /// Commits (with auto-commit) and leaves the group.
    pub(crate) async fn leave(self, inner: &Arc<Inner>) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        if state.member_id.is_empty() {
            return;
        }
        let owned: Vec<Key> = state.owned.iter().cloned().collect();
        let positions = inner.take_partitions(&owned);
        commit_released(inner, &self.group_id, &state, positions).await;
        let request = Beat { member_epoch: LEAVE, ..Beat::new(&self.group_id, &state) };
        if let Err(error) = heartbeat(&inner.cluster, &request, inner.config.common.request_timeout).await {
            tracing::debug!(group = %self.group_id, %error, "leave failed; the session will time out");
        }
    }

    pub(crate) fn abort(self) {
        self.task.abort();
    }
}

const LEAVE: i32 = -1;

/// One heartbeat's content.
#[derive(Clone, Debug, Default)]
struct Beat {
    group_id: String,
    member_id: String,
    instance_id: Option<String>,
    member_epoch: i32,
    subscription: Option<Vec<String>>,
    assignor: Option<String>,
    owned: Option<Vec<Key>>,
    session_timeout_ms: u32,
}

impl Beat {
    fn new(group_id: &str, state: &MemberState) -> Beat {
        Beat {
            group_id: group_id.to_owned(),
            member_id: state.member_id.clone(),
            member_epoch: state.member_epoch,
            ..Beat::default()
        }
    }
}

/// The coordinator's answer.
#[derive(Clone, Debug)]
struct Answer {
    member_id: String,
    member_epoch: i32,
    heartbeat_interval: Duration,
    assignment: BTreeSet<Key>,
}

impl Consumer {
    /// Joins the consumer group of `group.id` and consumes `topics` as one of its
    /// members: the group splits the topics' partitions between its members (see
    /// the `group` module docs). Replaces any `assign`ment. Fails without a
    /// `group_id` in the config.
    pub async fn subscribe(
        &self,
        topics: &[String],
        listener: Option<Arc<dyn RebalanceListener>>,
    ) -> Result<(), ClientError> {
        if topics.is_empty() {
            return Err(ClientError::InvalidArgument("subscribe to at least one topic".to_owned()));
        }
        for topic in topics {
            self.inner().cluster.topic(topic).await?;
        }
        self.start_membership(Subscription::Topics(topics.to_vec()), listener)
    }

    /// Like [`Consumer::subscribe`], for every topic whose whole name matches the
    /// regular expression `pattern` — now and as topics are created or deleted
    /// (checked every [`PATTERN_REFRESH`]).
    pub async fn subscribe_pattern(
        &self,
        pattern: &str,
        listener: Option<Arc<dyn RebalanceListener>>,
    ) -> Result<(), ClientError> {
        let regex = regex::Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|error| ClientError::InvalidArgument(format!("bad topic pattern {pattern:?}: {error}")))?;
        self.start_membership(Subscription::Pattern(regex), listener)
    }

    fn start_membership(
        &self,
        subscription: Subscription,
        listener: Option<Arc<dyn RebalanceListener>>,
    ) -> Result<(), ClientError> {
        let Some(group_id) = self.inner().config.group_id.clone() else {
            return Err(ClientError::InvalidConfig { problems: vec!["subscribe needs group.id".to_owned()] });
        };
        // Checked and installed under the membership lock: `close` marks the
        // consumer closed before it takes that lock, so a member is never
        // installed after a close took the last one.
        let mut membership = self.membership();
        self.inner().refuse_closed()?;
        let inner = self.inner().clone();
        let assigned_before: Vec<Key> = self.assignment();
        inner.change_assignment(&[], &assigned_before);
        let state = Arc::new(Mutex::new(MemberState::default()));
        let (stop, stopped) = watch::channel(false);
        let task =
            tokio::spawn(run_membership(inner, group_id.clone(), subscription, listener, state.clone(), stopped));
        let previous = membership.replace(Membership { group_id, state, stop, task });
        drop(membership);
        if let Some(previous) = previous {
            previous.abort();
        }
        Ok(())
    }

    /// Commits the position of every partition this member owns (the offset of
    /// the next record `poll` returns; its stored offset instead with
    /// `enable.auto.offset.store` off), and waits for the coordinator.
    pub async fn commit(&self) -> Result<(), ClientError> {
        self.with_current_epoch(
            |group_id, state| async move { commit_positions(self.inner(), &group_id, &state).await },
        )
        .await
    }

    /// Commits exactly these offsets (each the next offset to read).
    pub async fn commit_offsets(&self, offsets: &[((String, i32), i64)]) -> Result<(), ClientError> {
        let offsets: Vec<(Key, i64, String)> =
            offsets.iter().map(|(key, offset)| (key.clone(), *offset, String::new())).collect();
        self.commit_offsets_with_metadata(&offsets).await
    }

    /// Commits offsets with a metadata string each (kept with the offset, shown
    /// by `weir group describe --format json`).
    pub async fn commit_offsets_with_metadata(
        &self,
        offsets: &[((String, i32), i64, String)],
    ) -> Result<(), ClientError> {
        self.with_current_epoch(|group_id, state| async move {
            commit_call(&self.inner().cluster, &group_id, &state.member_id, state.member_epoch, offsets).await
        })
        .await
    }

    /// Runs a commit with the member's current epoch. The coordinator bumps the
    /// epoch when it reassigns partitions and the member learns it with its next
    /// heartbeat; a commit in between is refused as `StaleMemberEpoch`, so it is
    /// tried again once the epoch moved (until `request.timeout.ms`).
    async fn with_current_epoch<'a, F, Fut>(&'a self, commit: F) -> Result<(), ClientError>
    where
        F: Fn(String, MemberState) -> Fut,
        Fut: std::future::Future<Output = Result<(), ClientError>> + 'a,
    {
        let deadline = tokio::time::Instant::now() + self.inner().config.common.request_timeout;
        loop {
            let (group_id, state) = self.group_state()?;
            let epoch = state.member_epoch;
            match commit(group_id, state).await {
                Err(ClientError::Broker { code: ErrorCode::StaleMemberEpoch, .. })
                    if tokio::time::Instant::now() < deadline =>
                {
                    while self.group_state()?.1.member_epoch == epoch && tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                outcome => return outcome,
            }
        }
    }

    /// Commits the offset after `record` (it and everything before it count as done).
    pub async fn commit_record(&self, record: &ConsumerRecord) -> Result<(), ClientError> {
        self.commit_offsets(&[((record.topic.to_string(), record.partition), record.offset + 1)]).await
    }

    /// The committed offset of a partition in this consumer's group.
    pub async fn committed(&self, topic: &str, partition: i32) -> Result<Option<i64>, ClientError> {
        let Some(group_id) = self.inner().config.group_id.clone() else {
            return Err(ClientError::InvalidConfig { problems: vec!["committed needs group.id".to_owned()] });
        };
        let key = (topic.to_owned(), partition);
        let offsets = fetch_committed(&self.inner().cluster, &group_id, std::slice::from_ref(&key)).await?;
        Ok(offsets.into_iter().find(|(found, _)| *found == key).map(|(_, offset)| offset))
    }

    fn group_state(&self) -> Result<(String, MemberState), ClientError> {
        match self.membership().as_ref() {
            Some(membership) => {
                let state = membership.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
                Ok((membership.group_id.clone(), state))
            }
            None => match &self.inner().config.group_id {
                // Not subscribed: commit from outside the group (the group must be empty).
                Some(group_id) => Ok((group_id.clone(), MemberState { member_epoch: -1, ..MemberState::default() })),
                None => Err(ClientError::InvalidConfig { problems: vec!["commits need group.id".to_owned()] }),
            },
        }
    }
}

/// Commits the positions of `state.owned` (of every assigned partition outside a group).
async fn commit_positions(inner: &Arc<Inner>, group_id: &str, state: &MemberState) -> Result<(), ClientError> {
    let positions: Vec<(Key, i64)> = inner
        .positions()
        .into_iter()
        .filter(|(key, _)| state.owned.contains(key) || state.member_id.is_empty())
        .collect();
    if positions.is_empty() {
        return Ok(());
    }
    let positions: Vec<(Key, i64, String)> =
        positions.into_iter().map(|(key, offset)| (key, offset, String::new())).collect();
    commit_call(&inner.cluster, group_id, &state.member_id, state.member_epoch, &positions).await
}

/// Commits (with auto-commit) the final `positions` of partitions this member
/// gives up, retrying retriable failures until `request_timeout`: a lost commit
/// means the next owner reads those records again.
async fn commit_released(inner: &Arc<Inner>, group_id: &str, state: &MemberState, positions: Vec<(Key, i64)>) {
    if !inner.config.auto_commit || positions.is_empty() {
        return;
    }
    let offsets: Vec<(Key, i64, String)> =
        positions.into_iter().map(|(key, offset)| (key, offset, String::new())).collect();
    // Bounded by the request timeout, and well inside the session: no heartbeat is
    // sent meanwhile, and the member must not be fenced while handing over.
    let budget = inner.config.common.request_timeout.min(inner.config.session_timeout / 2);
    let deadline = tokio::time::Instant::now() + budget;
    let mut backoff = inner.config.common.retry_backoff;
    loop {
        let call = commit_call(&inner.cluster, group_id, &state.member_id, state.member_epoch, &offsets);
        let timed_out = ClientError::Timeout { operation: "commit", timeout_ms: budget.as_millis() as u64 };
        let outcome = tokio::time::timeout_at(deadline, call).await.unwrap_or(Err(timed_out));
        match outcome {
            Ok(()) => return,
            Err(error) if error.is_retriable() && tokio::time::Instant::now() + backoff < deadline => {
                tracing::debug!(group = %group_id, %error, "commit of released partitions failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(inner.config.common.retry_backoff_max);
            }
            Err(error) => {
                tracing::warn!(group = %group_id, %error, "commit of released partitions failed; their next owner re-reads from the last commit");
                return;
            }
        }
    }
}

/// What a member subscribes to.
enum Subscription {
    Topics(Vec<String>),
    Pattern(regex::Regex),
}

/// How often a pattern subscription looks for new or deleted topics.
pub const PATTERN_REFRESH: Duration = Duration::from_secs(3);

/// The topics `subscription` means now (a pattern asks the cluster).
async fn resolve(cluster: &Cluster, subscription: &Subscription) -> Result<Vec<String>, ClientError> {
    match subscription {
        Subscription::Topics(topics) => Ok(topics.clone()),
        Subscription::Pattern(regex) => {
            let mut topics: Vec<String> = cluster
                .refresh(&[])
                .await?
                .iter()
                .filter(|topic| regex.is_match(&topic.name))
                .map(|topic| topic.name.clone())
                .collect();
            topics.sort();
            Ok(topics)
        }
    }
}

async fn run_membership(
    inner: Arc<Inner>,
    group_id: String,
    subscription: Subscription,
    listener: Option<Arc<dyn RebalanceListener>>,
    shared: Arc<Mutex<MemberState>>,
    mut stopped: watch::Receiver<bool>,
) {
    let config = inner.config.clone();
    let timeout = config.common.request_timeout;
    let mut state = MemberState::default();
    let mut send_subscription = true;
    let mut backoff = config.common.retry_backoff;
    let mut last_commit = tokio::time::Instant::now();
    let mut topics: Vec<String> = Vec::new();
    let mut resolved_at: Option<tokio::time::Instant> = None;
    loop {
        if resolved_at.is_none_or(|at| at.elapsed() >= PATTERN_REFRESH) {
            match resolve(&inner.cluster, &subscription).await {
                Ok(now) => {
                    resolved_at = Some(tokio::time::Instant::now());
                    if now != topics {
                        topics = now;
                        send_subscription = true;
                    }
                }
                Err(error) => tracing::debug!(group = %group_id, %error, "resolving the subscription failed"),
            }
        }
        let beat = Beat {
            instance_id: config.group_instance_id.clone(),
            subscription: send_subscription.then(|| topics.clone()),
            assignor: config.group_assignor.clone(),
            owned: Some(state.owned.iter().cloned().collect()),
            session_timeout_ms: config.session_timeout.as_millis().min(u32::MAX as u128) as u32,
            ..Beat::new(&group_id, &state)
        };
        let mut wait = match heartbeat(&inner.cluster, &beat, timeout).await {
            Ok(answer) => {
                backoff = config.common.retry_backoff;
                send_subscription = false;
                let changed = apply(&inner, &group_id, &mut state, answer.clone(), listener.as_deref()).await;
                *shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = state.clone();
                if changed {
                    Duration::ZERO
                } else {
                    answer.heartbeat_interval
                }
            }
            Err(ClientError::Broker { code: ErrorCode::UnknownMemberId | ErrorCode::FencedMemberEpoch, message }) => {
                tracing::warn!(group = %group_id, %message, "fenced; partitions lost, rejoining");
                let lost: Vec<Key> = state.owned.iter().cloned().collect();
                inner.change_assignment(&[], &lost);
                if let (Some(listener), false) = (&listener, lost.is_empty()) {
                    listener.on_revoked(&lost);
                }
                state = MemberState::default();
                send_subscription = true;
                *shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = state.clone();
                Duration::ZERO
            }
            Err(error) => {
                tracing::debug!(group = %group_id, %error, "heartbeat failed; retrying");
                backoff = (backoff * 2).min(config.common.retry_backoff_max);
                backoff
            }
        };
        if config.auto_commit && last_commit.elapsed() >= config.auto_commit_interval && !state.member_id.is_empty() {
            last_commit = tokio::time::Instant::now();
            if let Err(error) = commit_positions(&inner, &group_id, &state).await {
                tracing::debug!(group = %group_id, %error, "auto-commit failed");
            }
            wait = wait.min(config.auto_commit_interval);
        }
        tokio::select! {
            _ = stopped.wait_for(|stopped| *stopped) => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Applies an answer (module docs, steps 2 and 3). Returns whether the owned set
/// changed (then the coordinator must hear about it at once).
async fn apply(
    inner: &Arc<Inner>,
    group_id: &str,
    state: &mut MemberState,
    answer: Answer,
    listener: Option<&dyn RebalanceListener>,
) -> bool {
    state.member_id = answer.member_id;
    // The answer's epoch is the coordinator's current one: commits from here on carry it.
    state.member_epoch = answer.member_epoch;
    let revoked: BTreeSet<Key> = state.owned.difference(&answer.assignment).cloned().collect();
    let added: Vec<Key> = answer.assignment.difference(&state.owned).cloned().collect();
    if !revoked.is_empty() {
        let revoked: Vec<Key> = revoked.into_iter().collect();
        let positions = inner.take_partitions(&revoked);
        commit_released(inner, group_id, state, positions).await;
        if let Some(listener) = listener {
            listener.on_revoked(&revoked);
        }
    }
    if !added.is_empty() {
        let committed = fetch_committed(&inner.cluster, group_id, &added).await.unwrap_or_else(|error| {
            tracing::warn!(group = %group_id, %error, "fetching committed offsets failed; starting from auto.offset.reset");
            Vec::new()
        });
        let reset = inner.reset_offset();
        let starts: Vec<(Key, Offset)> = added
            .iter()
            .map(|key| {
                let start =
                    committed.iter().find(|(found, _)| found == key).map_or(reset, |(_, offset)| Offset::At(*offset));
                (key.clone(), start)
            })
            .collect();
        inner.change_assignment(&starts, &[]);
        if let Some(listener) = listener {
            listener.on_assigned(&added);
        }
    }
    let changed = state.owned != answer.assignment;
    state.owned = answer.assignment;
    changed
}

async fn heartbeat(cluster: &Cluster, beat: &Beat, timeout: Duration) -> Result<Answer, ClientError> {
    heartbeat_coordinator(cluster, beat, timeout)
        .await
        .map_err(|error| cluster.forget_coordinator_on(&beat.group_id, error))
}

async fn heartbeat_coordinator(cluster: &Cluster, beat: &Beat, timeout: Duration) -> Result<Answer, ClientError> {
    // Finding the coordinator counts against the heartbeat's time too.
    let deadline = tokio::time::Instant::now() + timeout;
    let timed_out = || ClientError::Timeout { operation: "group heartbeat", timeout_ms: timeout.as_millis() as u64 };
    let connection =
        tokio::time::timeout_at(deadline, cluster.coordinator(&beat.group_id)).await.map_err(|_| timed_out())??;
    let address = connection.address().to_owned();
    let beat = beat.clone();
    let call = connection.call(move |client: broker::Client| async move {
        let mut request = client.group_heartbeat_request();
        let mut builder = request.get().init_request();
        builder.set_group_id(&beat.group_id[..]);
        builder.set_member_id(&beat.member_id[..]);
        builder.set_instance_id(beat.instance_id.as_deref().unwrap_or(""));
        builder.set_member_epoch(beat.member_epoch);
        builder.set_assignor(beat.assignor.as_deref().unwrap_or(""));
        builder.set_session_timeout_ms(beat.session_timeout_ms);
        if let Some(topics) = &beat.subscription {
            builder.set_subscription_changed(true);
            let mut list = builder.reborrow().init_subscribed_topics(topics.len() as u32);
            for (index, topic) in topics.iter().enumerate() {
                list.set(index as u32, &topic[..]);
            }
        }
        if let Some(owned) = &beat.owned {
            builder.set_owned_reported(true);
            let mut list = builder.init_owned(owned.len() as u32);
            for (index, (topic, partition)) in owned.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_topic(&topic[..]);
                entry.set_partition(*partition);
            }
        }
        let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
        let response = response.get()?.get_response()?;
        if response.has_error() {
            return Err(broker_error(response.get_error()?));
        }
        let assignment = response
            .get_assignment()?
            .iter()
            .map(|entry| Ok((entry.get_topic()?.to_str()?.to_owned(), entry.get_partition())))
            .collect::<Result<BTreeSet<Key>, ClientError>>()?;
        Ok(Answer {
            member_id: response.get_member_id()?.to_str()?.to_owned(),
            member_epoch: response.get_member_epoch(),
            heartbeat_interval: Duration::from_millis(response.get_heartbeat_interval_ms().max(100) as u64),
            assignment,
        })
    });
    match tokio::time::timeout_at(deadline, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(timed_out()),
    }
}

pub(crate) async fn commit_call(
    cluster: &Cluster,
    group_id: &str,
    member_id: &str,
    member_epoch: i32,
    offsets: &[(Key, i64, String)],
) -> Result<(), ClientError> {
    let connection =
        cluster.coordinator(group_id).await.map_err(|error| cluster.forget_coordinator_on(group_id, error))?;
    let address = connection.address().to_owned();
    let group = group_id.to_owned();
    let (group_id, member_id, offsets) = (group_id.to_owned(), member_id.to_owned(), offsets.to_vec());
    cluster
        .bounded_call("commit", &connection, move |client: broker::Client| async move {
            let mut request = client.commit_offsets_request();
            let mut params = request.get();
            params.set_group_id(&group_id[..]);
            params.set_member_id(&member_id[..]);
            params.set_member_epoch(member_epoch);
            let mut list = params.init_offsets(offsets.len() as u32);
            for (index, ((topic, partition), offset, metadata)) in offsets.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_topic(&topic[..]);
                entry.set_partition(*partition);
                entry.set_offset(*offset);
                entry.set_metadata(&metadata[..]);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
        .map_err(|error| cluster.forget_coordinator_on(&group, error))
}

/// Committed offsets of `partitions` (all of the group's when empty).
pub(crate) async fn fetch_committed(
    cluster: &Cluster,
    group_id: &str,
    partitions: &[Key],
) -> Result<Vec<(Key, i64)>, ClientError> {
    let connection =
        cluster.coordinator(group_id).await.map_err(|error| cluster.forget_coordinator_on(group_id, error))?;
    let address = connection.address().to_owned();
    let group = group_id.to_owned();
    let (group_id, partitions) = (group_id.to_owned(), partitions.to_vec());
    cluster
        .bounded_call("fetch committed offsets", &connection, move |client: broker::Client| async move {
            let mut request = client.fetch_offsets_request();
            let mut params = request.get();
            params.set_group_id(&group_id[..]);
            let mut list = params.init_partitions(partitions.len() as u32);
            for (index, (topic, partition)) in partitions.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_topic(&topic[..]);
                entry.set_partition(*partition);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            response
                .get_offsets()?
                .iter()
                .map(|entry| Ok(((entry.get_topic()?.to_str()?.to_owned(), entry.get_partition()), entry.get_offset())))
                .collect()
        })
        .await
        .map_err(|error| cluster.forget_coordinator_on(&group, error))
}
