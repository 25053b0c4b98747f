//! How controller voters talk: openraft's network traits over a [`RaftTransport`]
//! that carries one request and its answer as bytes.
//!
//! Messages are JSON (openraft's own serde types): a request is
//! `(kind, payload)` with kind `append-entries`, `vote` or `install-snapshot`, and
//! the answer is the JSON of `Result<response, RaftError>`. The server side is
//! [`super::Controller::handle_raft_call`].
//!
//! Transports: the brokers' own Cap'n Proto port (one port serves clients,
//! brokers and the controller), and [`InProcess`] — voters in one process, with
//! links that a test or the simulator can cut.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use broker_core::cluster::ControllerRequest;

use super::{Controller, NodeId, TypeConfig};

/// Which Raft call a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaftCallKind {
    AppendEntries,
    Vote,
    InstallSnapshot,
    /// A `ControllerRequest` forwarded to the active controller.
    ControllerRequest,
    /// A broker's heartbeat to the active controller.
    BrokerHeartbeat,
    /// A broker that is not a voter asks the active controller to replicate the
    /// metadata log to it (as a Raft learner).
    AddLearner,
    /// The bytes of a plugin, by digest (served by the broker, not its
    /// controller: a broker that lacks a registered plugin fetches it).
    FetchPlugin,
    /// A transform task's output batch, forwarded to the leader of its output
    /// partition (served by the broker).
    Produce,
    /// What a broker runs of each transform (`listTransforms` on another broker).
    TransformStatus,
    /// A follower pulls batches from the leader of its partitions.
    ReplicaFetch,
    /// A follower asks a leader where a leader epoch ends in its log (KIP-279).
    EpochEndOffset,
    /// A transform task's checkpoint read, commit or deletion, forwarded to
    /// the coordinator of its group (served by the broker).
    Checkpoint,
}

impl RaftCallKind {
    pub fn name(self) -> &'static str {
        match self {
            RaftCallKind::AppendEntries => "append-entries",
            RaftCallKind::Vote => "vote",
            RaftCallKind::InstallSnapshot => "install-snapshot",
            RaftCallKind::ControllerRequest => "controller-request",
            RaftCallKind::BrokerHeartbeat => "broker-heartbeat",
            RaftCallKind::AddLearner => "add-learner",
            RaftCallKind::FetchPlugin => "fetch-plugin",
            RaftCallKind::Produce => "produce",
            RaftCallKind::TransformStatus => "transform-status",
            RaftCallKind::ReplicaFetch => "replica-fetch",
            RaftCallKind::EpochEndOffset => "epoch-end-offset",
            RaftCallKind::Checkpoint => "checkpoint",
        }
    }

    /// Calls served by the broker itself rather than its controller.
    pub fn is_broker_call(self) -> bool {
        matches!(
            self,
            RaftCallKind::FetchPlugin
                | RaftCallKind::Produce
                | RaftCallKind::TransformStatus
                | RaftCallKind::ReplicaFetch
                | RaftCallKind::EpochEndOffset
                | RaftCallKind::Checkpoint
        )
    }

    pub fn parse(name: &str) -> Option<RaftCallKind> {
        let kinds = [
            RaftCallKind::AppendEntries,
            RaftCallKind::Vote,
            RaftCallKind::InstallSnapshot,
            RaftCallKind::ControllerRequest,
            RaftCallKind::BrokerHeartbeat,
            RaftCallKind::AddLearner,
            RaftCallKind::FetchPlugin,
            RaftCallKind::Produce,
            RaftCallKind::TransformStatus,
            RaftCallKind::ReplicaFetch,
            RaftCallKind::EpochEndOffset,
            RaftCallKind::Checkpoint,
        ];
        kinds.into_iter().find(|kind| kind.name() == name)
    }
}

/// Why a call did not get an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("raft call to node {target} failed: {reason}")]
pub struct TransportError {
    pub target: NodeId,
    pub reason: String,
}

/// A boxed future of a call's answer.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, TransportError>> + Send>>;

/// Carries one Raft request to voter `target` (at `address`) and its answer back.
pub trait RaftTransport: Send + Sync + 'static {
    fn call(&self, target: NodeId, address: &str, kind: RaftCallKind, request: Vec<u8>) -> CallFuture;
}

/// openraft's network factory over a transport.
#[derive(Clone)]
pub struct Network {
    transport: Arc<dyn RaftTransport>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Network").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Connection").field("target", &self.target).field("address", &self.address).finish()
    }
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("InProcess").finish_non_exhaustive()
    }
}

impl Network {
    pub fn new(transport: Arc<dyn RaftTransport>) -> Network {
        Network { transport }
    }
}

/// openraft's connection to one voter.
pub struct Connection {
    transport: Arc<dyn RaftTransport>,
    target: NodeId,
    address: String,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        Connection { transport: self.transport.clone(), target, address: node.addr.clone() }
    }
}

impl Connection {
    async fn call<Request, Response, E>(
        &self,
        kind: RaftCallKind,
        request: &Request,
    ) -> Result<Response, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Request: Serialize,
        Response: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let bytes = serde_json::to_vec(request).map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        let answer = self
            .transport
            .call(self.target, &self.address, kind, bytes)
            .await
            .map_err(|error| RPCError::Unreachable(Unreachable::new(&error)))?;
        let answer: Result<Response, RaftError<NodeId, E>> =
            serde_json::from_slice(&answer).map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        answer.map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(RaftCallKind::AppendEntries, &request).await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        self.call(RaftCallKind::InstallSnapshot, &request).await
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(RaftCallKind::Vote, &request).await
    }
}

impl Controller {
    /// Serves one Raft call from another voter: the JSON answer to a JSON request.
    pub async fn handle_raft_call(&self, kind: RaftCallKind, request: &[u8]) -> Result<Vec<u8>, String> {
        fn answer<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
            serde_json::to_vec(value).map_err(|error| error.to_string())
        }
        let bad = |error: serde_json::Error| format!("malformed {} request: {error}", kind.name());
        match kind {
            RaftCallKind::AppendEntries => {
                let request: AppendEntriesRequest<TypeConfig> = serde_json::from_slice(request).map_err(bad)?;
                answer(&self.raft.append_entries(request).await)
            }
            RaftCallKind::Vote => {
                let request: VoteRequest<NodeId> = serde_json::from_slice(request).map_err(bad)?;
                answer(&self.raft.vote(request).await)
            }
            RaftCallKind::InstallSnapshot => {
                let request: InstallSnapshotRequest<TypeConfig> = serde_json::from_slice(request).map_err(bad)?;
                answer(&self.raft.install_snapshot(request).await)
            }
            RaftCallKind::ControllerRequest => {
                let request: ControllerRequest = serde_json::from_slice(request).map_err(bad)?;
                answer(&self.carry_out(&request).await)
            }
            RaftCallKind::BrokerHeartbeat => {
                let heartbeat: super::membership::BrokerHeartbeat = serde_json::from_slice(request).map_err(bad)?;
                answer(&self.take_heartbeat(&heartbeat))
            }
            RaftCallKind::AddLearner => {
                let learner: super::learners::Learner = serde_json::from_slice(request).map_err(bad)?;
                answer(&self.add_learner(&learner).await)
            }
            // `is_broker_call`: answered by the broker once it is open.
            broker_call => Err(format!("this broker is starting; it serves {} calls once open", broker_call.name())),
        }
    }
}

/// Voters in one process: calls go straight to the target's controller, unless
/// the link is cut. Controllers register after they open.
#[derive(Clone, Default)]
pub struct InProcess {
    shared: Arc<Mutex<InProcessState>>,
}

#[derive(Default)]
struct InProcessState {
    controllers: BTreeMap<NodeId, Weak<Controller>>,
    /// Voters whose links are all cut (a crashed or partitioned node).
    isolated: std::collections::BTreeSet<NodeId>,
}

impl InProcess {
    pub fn register(&self, node_id: NodeId, controller: &Arc<Controller>) {
        let mut state = self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.controllers.insert(node_id, Arc::downgrade(controller));
    }

    /// The transport voter `source` sends through.
    pub fn transport(&self, source: NodeId) -> Arc<dyn RaftTransport> {
        Arc::new(InProcessLink { shared: self.shared.clone(), source })
    }

    /// Cuts (or restores) every link of `node_id`.
    pub fn isolate(&self, node_id: NodeId, isolated: bool) {
        let mut state = self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match isolated {
            true => state.isolated.insert(node_id),
            false => state.isolated.remove(&node_id),
        };
    }
}

/// One voter's side of [`InProcess`].
struct InProcessLink {
    shared: Arc<Mutex<InProcessState>>,
    source: NodeId,
}

impl RaftTransport for InProcessLink {
    fn call(&self, target: NodeId, _address: &str, kind: RaftCallKind, request: Vec<u8>) -> CallFuture {
        let shared = self.shared.clone();
        let source = self.source;
        Box::pin(async move {
            let unreachable = |reason: &str| TransportError { target, reason: reason.to_owned() };
            let controller = {
                let state = shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if state.isolated.contains(&target) || state.isolated.contains(&source) {
                    return Err(unreachable("link cut"));
                }
                state.controllers.get(&target).and_then(Weak::upgrade).ok_or_else(|| unreachable("not running"))?
            };
            controller.handle_raft_call(kind, &request).await.map_err(|reason| unreachable(&reason))
        })
    }
}

/// No way to reach other voters: a quorum of one needs none.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unconnected;

impl RaftTransport for Unconnected {
    fn call(&self, target: NodeId, _address: &str, _kind: RaftCallKind, _request: Vec<u8>) -> CallFuture {
        Box::pin(async move { Err(TransportError { target, reason: "no transport to other brokers".to_owned() }) })
    }
}
