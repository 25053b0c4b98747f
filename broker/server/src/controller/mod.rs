//! [`Controller`]: the cluster metadata quorum (DESIGN §3) — openraft behind a
//! small API of our own, so an openraft upgrade stays inside this module.
//!
//! - [`log_store`]: the Raft log and vote on the `Storage` seam;
//! - [`network`]: voters' calls over a transport (the broker port, or in-process);
//! - [`state_machine`]: the committed log applied to the IO-free
//!   `broker_core::cluster::ClusterImage`, with snapshots;
//! - this file: the type config, and [`Controller`] — open (initialising a new
//!   quorum once, never on restart), [`Controller::submit`] a controller handler,
//!   read the applied image.
//!
//! Writes: [`Controller::submit`] runs a handler (`ClusterImage::create_topic`, …)
//! against the applied image and proposes the records it returns, one submission
//! at a time, so a handler always sees every earlier submission applied. Only the
//! active controller (the Raft leader) accepts submissions; the others answer
//! [`SubmitError::NotController`] with the leader they know.
//!
//! The single-node default is a quorum of one voter on the same path.

pub mod broker_link;
mod compat;
pub mod learners;
pub mod log_store;
pub mod membership;
pub mod network;
pub mod runtime;
pub mod state_machine;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use broker_core::cluster::{ClusterImage, ControllerError, ControllerRequest, ControllerResponse, MetadataRecord};
use broker_core::storage::Storage;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Config, Raft};
use serde::{Deserialize, Serialize};

pub use log_store::LogStore;
use network::{Network, RaftCallKind, RaftTransport};
pub use state_machine::{AppliedImage, StateMachine};

/// A node id: the broker id (`--node-id`), which is never negative.
pub type NodeId = u64;

/// One Raft entry's payload: records applied together.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataCommand {
    pub records: Vec<MetadataRecord>,
}

/// What applying one entry did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataApplied {
    /// Metadata offset of the command's first record (none for an empty command
    /// or a Raft-internal entry).
    pub first_offset: Option<u64>,
    /// Why the command was not applied.
    pub error: Option<String>,
}

openraft::declare_raft_types!(
    /// The controller's openraft types.
    pub TypeConfig:
        D = MetadataCommand,
        R = MetadataApplied,
        NodeId = NodeId,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = runtime::ControllerRuntime,
);

/// A Raft log entry of the controller.
pub type Entry = openraft::Entry<TypeConfig>;

/// Directory of the controller's files inside the data directory.
pub const CONTROLLER_DIR: &str = "__cluster_metadata";
/// Longest a submission waits for its records to commit.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Raft timing of the quorum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftTiming {
    /// How often the active controller heartbeats the other voters.
    pub heartbeat_ms: u64,
    /// A voter that hears no heartbeat for a random time in this range stands
    /// for election.
    pub election_timeout_ms: (u64, u64),
    /// Entries between snapshots, after which the log is purged (a tenth of
    /// them kept for voters a little behind).
    pub snapshot_after_entries: u64,
}

impl Default for RaftTiming {
    fn default() -> RaftTiming {
        RaftTiming { heartbeat_ms: 250, election_timeout_ms: (1_000, 2_000), snapshot_after_entries: 1_000 }
    }
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerStartError {
    #[error("controller storage in {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("controller: {0}")]
    Raft(String),
}

/// Why a submission was not carried out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum SubmitError<E> {
    /// The handler refused the request.
    #[error(transparent)]
    Refused(E),
    /// This node is not the active controller.
    #[error("this broker is not the active controller (the active one is {leader:?})")]
    NotController { leader: Option<NodeId> },
    /// The quorum could not commit it, or did not say in time (the outcome is
    /// unknown: it may still commit).
    #[error("the controller could not commit the change: {0}")]
    Failed(String),
    /// It was committed but does not fit the metadata (applying it changed
    /// nothing, on every replica): retrying cannot help.
    #[error("the controller could not apply the change: {0}")]
    Rejected(String),
}

/// See the module docs.
#[derive(Clone)]
pub struct Controller {
    node_id: NodeId,
    raft: Raft<TypeConfig>,
    transport: Arc<dyn RaftTransport>,
    applied: AppliedImage,
    /// One submission at a time (see the module docs).
    submitting: Arc<tokio::sync::Mutex<()>>,
    /// Brokers' heartbeats, while this node is the active controller.
    liveness: membership::SharedLiveness,
    /// The runtime the Raft node runs on: submissions run there as tasks of their
    /// own, never inside a caller (an RPC connection) that may vanish mid-way.
    runtime: tokio::runtime::Handle,
    /// The voters this node was started with (id → address): whom a broker
    /// that is not one of them asks to join.
    configured_voters: Arc<BTreeMap<NodeId, String>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Controller").field("node_id", &self.node_id).finish_non_exhaustive()
    }
}

impl Controller {
    /// Opens the controller's files in `data_dir` and starts its Raft node. A node
    /// that has never been part of a quorum initialises one of `voters` (id →
    /// address); a restarted node carries on from its log.
    pub async fn open(
        storage: Arc<dyn Storage>,
        data_dir: &Path,
        node_id: NodeId,
        voters: BTreeMap<NodeId, String>,
        timing: RaftTiming,
        transport: Arc<dyn RaftTransport>,
    ) -> Result<Controller, ControllerStartError> {
        let dir = data_dir.join(CONTROLLER_DIR);
        let storage_error = |source| ControllerStartError::Storage { path: dir.display().to_string(), source };
        let log_store = LogStore::open(storage.clone(), &dir).map_err(storage_error)?;
        let state_machine = StateMachine::open(storage, &dir).map_err(storage_error)?;
        log_store.purge_within(state_machine.durable_snapshot());
        let applied = state_machine.applied_image();
        let config = Config {
            cluster_name: "weir".to_owned(),
            heartbeat_interval: timing.heartbeat_ms,
            election_timeout_min: timing.election_timeout_ms.0,
            election_timeout_max: timing.election_timeout_ms.1,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(timing.snapshot_after_entries),
            max_in_snapshot_log_to_keep: timing.snapshot_after_entries / 10,
            ..Config::default()
        };
        let config = Arc::new(config.validate().map_err(|error| ControllerStartError::Raft(error.to_string()))?);
        let network = Network::new(transport.clone());
        let raft = Raft::new(node_id, config, network, log_store.clone(), state_machine)
            .await
            .map_err(|error| ControllerStartError::Raft(error.to_string()))?;
        let controller = Controller {
            node_id,
            raft,
            transport,
            applied,
            submitting: Arc::default(),
            liveness: Arc::default(),
            runtime: tokio::runtime::Handle::current(),
            configured_voters: Arc::new(voters.clone()),
        };
        // Only a voter initialises: a broker that is not one joins the quorum's
        // log as a learner (`learners.rs`).
        if log_store.is_new() && voters.contains_key(&node_id) {
            let members: BTreeMap<NodeId, BasicNode> =
                voters.into_iter().map(|(id, address)| (id, BasicNode::new(address))).collect();
            match controller.raft.initialize(members).await {
                Ok(()) => tracing::info!(node_id, "controller quorum initialised"),
                Err(RaftError::APIError(error)) => {
                    tracing::info!(node_id, %error, "controller quorum already initialised")
                }
                Err(error) => return Err(ControllerStartError::Raft(error.to_string())),
            }
        }
        Ok(controller)
    }

    /// Waits until this node is the active controller or `timeout` passes.
    pub async fn wait_active(&self, timeout: Duration) -> bool {
        let node_id = self.node_id;
        self.raft.wait(Some(timeout)).current_leader(node_id, "active controller").await.is_ok()
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The active controller this node knows of.
    pub fn active_controller(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// This node's Raft term, and whether it leads in that term (is the active
    /// controller as far as it knows).
    pub fn term(&self) -> (u64, bool) {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        (metrics.current_term, metrics.state == openraft::ServerState::Leader)
    }

    /// The voters of the quorum.
    pub fn voters(&self) -> BTreeSet<NodeId> {
        self.raft.metrics().borrow().membership_config.membership().voter_ids().collect()
    }

    /// The brokers that are not voters and follow the metadata log (learners).
    pub fn learners(&self) -> BTreeSet<NodeId> {
        self.raft.metrics().borrow().membership_config.membership().learner_ids().collect()
    }

    /// The applied image and its progress.
    pub fn applied(&self) -> &AppliedImage {
        &self.applied
    }

    /// Reads the applied image.
    pub fn read<T>(&self, reader: impl FnOnce(&ClusterImage) -> T) -> T {
        reader(&self.applied.image.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Runs `handler` against the applied image and commits the records it
    /// returns; answers the handler's value, and the metadata offset of the last
    /// record (none when there were none), once they are applied here. See the
    /// module docs.
    pub async fn submit<T, E>(
        &self,
        handler: impl FnOnce(&ClusterImage) -> Result<(Vec<MetadataRecord>, T), E>,
    ) -> Result<(T, Option<u64>), SubmitError<E>> {
        let _one_at_a_time = self.submitting.lock().await;
        // Everything committed before (by this or an earlier leader) is applied.
        // Bounded: without a quorum it would wait for ever.
        let linearized = tokio::time::timeout(SUBMIT_TIMEOUT, self.raft.ensure_linearizable()).await;
        let Ok(linearized) = linearized else {
            return Err(SubmitError::Failed(format!(
                "no quorum confirmed leadership within {} ms",
                SUBMIT_TIMEOUT.as_millis()
            )));
        };
        if let Err(error) = linearized {
            return Err(match error.forward_to_leader() {
                Some(forward) => SubmitError::NotController { leader: forward.leader_id },
                None => SubmitError::Failed(error.to_string()),
            });
        }
        // A write of an earlier submission that timed out may still be in the log:
        // plan only once everything this leader holds is applied, so the handler
        // sees it.
        if !self.log_applied(SUBMIT_TIMEOUT).await {
            return Err(SubmitError::Failed("earlier changes are not applied yet".to_owned()));
        }
        let (records, value) = self
            .read(|image| {
                let planned = handler(image)?;
                for record in planned.0.iter().filter(|record| image.is_unclean_election(record)) {
                    if let MetadataRecord::PartitionChange { topic, partition, state } = record {
                        tracing::warn!(
                            %topic, partition, leader = state.leader,
                            "unclean leader election (unclean.leader.election.enable=true): no in-sync replica \
                             is available, so an out-of-sync one leads; records only the old ISR held are lost"
                        );
                    }
                }
                Ok(planned)
            })
            .map_err(SubmitError::Refused)?;
        if records.is_empty() {
            return Ok((value, None));
        }
        let count = records.len() as u64;
        // Bounded: a leader that lost its quorum never commits, and would hold
        // every later submission (and a controlled shutdown) behind this one.
        let written = tokio::time::timeout(SUBMIT_TIMEOUT, self.raft.client_write(MetadataCommand { records })).await;
        let Ok(written) = written else {
            return Err(SubmitError::Failed(format!("not committed within {} ms", SUBMIT_TIMEOUT.as_millis())));
        };
        match written {
            Ok(response) => match (response.data.error, response.data.first_offset) {
                (None, Some(first)) => Ok((value, Some(first + count - 1))),
                (None, None) => Ok((value, None)),
                (Some(error), _) => Err(SubmitError::Rejected(error)),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                Err(SubmitError::NotController { leader: forward.leader_id })
            }
            Err(error) => Err(SubmitError::Failed(error.to_string())),
        }
    }

    /// Carries `request` out here (this node must be the active controller).
    pub(crate) async fn carry_out(
        &self,
        request: &ControllerRequest,
    ) -> Result<ControllerResponse, SubmitError<ControllerError>> {
        // A task of its own on the controller's runtime: it holds the submission
        // lock, and must finish (or time out) and release it even when the caller
        // — a connection from another broker — goes away while it runs.
        let controller = self.clone();
        let request = request.clone();
        let task = self.runtime.spawn(async move { controller.carry_out_here(&request).await });
        task.await.unwrap_or_else(|error| Err(SubmitError::Failed(format!("the submission task failed: {error}"))))
    }

    async fn carry_out_here(
        &self,
        request: &ControllerRequest,
    ) -> Result<ControllerResponse, SubmitError<ControllerError>> {
        let (mut response, last_offset) = self.submit(|image| request.plan(image)).await?;
        response.last_offset = last_offset;
        if let (ControllerRequest::RegisterBroker(registration), Some(offset)) = (request, last_offset) {
            // The registration is the last record written: its offset, as applied,
            // is the broker's epoch.
            response.value = Some(offset as i64);
            self.heard_from(registration.broker_id, offset);
        }
        if let ControllerRequest::UnfenceBroker { broker_id, broker_epoch } = request {
            self.heard_from(*broker_id, *broker_epoch);
        }
        Ok(response)
    }

    /// Waits until every entry of this node's Raft log is applied, or `timeout`.
    async fn log_applied(&self, timeout: Duration) -> bool {
        let mut metrics = self.raft.metrics();
        let caught_up = |metrics: &openraft::RaftMetrics<NodeId, BasicNode>| {
            metrics.last_applied.map(|log_id| log_id.index) >= metrics.last_log_index
        };
        let waited = tokio::time::timeout(timeout, async {
            while !caught_up(&metrics.borrow()) {
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        });
        let _ = waited.await;
        caught_up(&self.raft.metrics().borrow())
    }

    /// Waits until this node's image has applied metadata offset `offset`, or
    /// `timeout` passes; returns whether it has.
    pub async fn wait_applied_offset(&self, offset: u64, timeout: Duration) -> bool {
        let mut applied_index = self.applied.applied_index.clone();
        let reached = |controller: &Controller| controller.read(|image| image.applied_offset >= Some(offset));
        let waited = tokio::time::timeout(timeout, async {
            while !reached(self) {
                if applied_index.changed().await.is_err() {
                    return;
                }
            }
        });
        let _ = waited.await;
        reached(self)
    }

    /// Carries `request` out on the active controller: here when this node is it,
    /// else forwarded to it.
    pub async fn request(
        &self,
        request: &ControllerRequest,
    ) -> Result<ControllerResponse, SubmitError<ControllerError>> {
        let leader = self.active_controller();
        if leader.is_none() || leader == Some(self.node_id) {
            return self.carry_out(request).await;
        }
        let leader = leader.expect("checked above");
        let payload = serde_json::to_vec(request).map_err(|error| SubmitError::Failed(error.to_string()))?;
        let answer = self.forward(leader, RaftCallKind::ControllerRequest, payload).await?;
        serde_json::from_slice(&answer).map_err(|error| SubmitError::Failed(format!("malformed answer: {error}")))?
    }

    /// Sends one call to voter `leader` (the active controller) and returns its
    /// answer's bytes.
    async fn forward<E>(
        &self,
        leader: NodeId,
        kind: RaftCallKind,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, SubmitError<E>> {
        let address = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .nodes()
            .find(|(id, _)| **id == leader)
            .map(|(_, node)| node.addr.clone());
        let Some(address) = address else {
            return Err(SubmitError::NotController { leader: None });
        };
        self.transport
            .call(leader, &address, kind, payload)
            .await
            .map_err(|error| SubmitError::Failed(error.to_string()))
    }

    /// Sends one call to broker `target` at `address` over the brokers'
    /// transport (a call the broker answers, not its controller).
    pub async fn call_broker(
        &self,
        target: NodeId,
        address: &str,
        kind: RaftCallKind,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, network::TransportError> {
        self.transport.call(target, address, kind, payload).await
    }

    /// [`Controller::request`], retried while no controller is active or
    /// reachable (an election, a restart), until `timeout`.
    pub async fn request_until(
        &self,
        request: &ControllerRequest,
        timeout: Duration,
    ) -> Result<ControllerResponse, SubmitError<ControllerError>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let attempt = tokio::time::timeout(left, self.request(request)).await;
            let attempt = attempt.unwrap_or_else(|_| Err(SubmitError::Failed("no answer in time".to_owned())));
            match attempt {
                Err(SubmitError::Refused(error)) => return Err(SubmitError::Refused(error)),
                Err(SubmitError::Rejected(error)) => return Err(SubmitError::Rejected(error)),
                Err(error) if tokio::time::Instant::now() + pause < deadline => {
                    tracing::debug!(%error, "controller request retried");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                answer => return answer,
            }
        }
    }

    /// Waits until the Raft node stops on a fatal error (its storage failed, or
    /// its core panicked), and returns it; pending for ever while it runs or
    /// after a shutdown.
    pub async fn failed(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(error) = &metrics.borrow().running_state {
                if !matches!(error, openraft::error::Fatal::Stopped) {
                    return error.to_string();
                }
            }
            if metrics.changed().await.is_err() {
                // The core is gone. A shutdown says `Stopped` first; a core that
                // panicked leaves its last state `Ok`.
                let stopped = metrics.borrow().running_state.is_err();
                return match stopped {
                    true => std::future::pending().await,
                    false => "the controller's Raft core exited unexpectedly (it panicked)".to_owned(),
                };
            }
        }
    }

    /// Stops the Raft node.
    pub async fn shutdown(&self) {
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "controller did not shut down cleanly");
        }
    }
}
