//! [`BrokerLinks`]: the controller's calls to other brokers over their Cap'n Proto
//! port (`Broker.controllerCall`) — the same port clients use.
//!
//! capnp-rpc is `!Send`, so one thread ("weir-brokers") owns a current-thread
//! runtime, a `LocalSet` and one connection per peer address; calls reach it over
//! a bounded channel ([`CALLS_QUEUED_MAX`]) and answer through a oneshot. Each call
//! runs as its own task — connecting included — so a peer that does not answer
//! holds up only its own calls. A call that fails or times out drops its peer's
//! connection (unless a newer one replaced it), and the next call connects again.
//! Every call is bounded by [`CALL_TIMEOUT`]; a call whose caller gave up is
//! skipped.

use std::collections::HashMap;
use std::time::Duration;

use abi::weir_capnp::broker;
use capnp_rpc::{rpc_twoparty_capnp, twoparty, RpcSystem};
use futures::io::BufWriter;
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use super::network::{CallFuture, RaftCallKind, RaftTransport, TransportError};
use super::NodeId;

/// Longest one call to another broker may take, connecting included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer accepted from a peer (a snapshot of the metadata image).
const ANSWER_BYTES_MAX: usize = 256 << 20;
/// Calls waiting for the link thread; past it, calls fail at once.
pub const CALLS_QUEUED_MAX: usize = 4096;

struct LinkCall {
    target: NodeId,
    address: String,
    kind: RaftCallKind,
    payload: Vec<u8>,
    answer: oneshot::Sender<Result<Vec<u8>, TransportError>>,
}

/// See the module docs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct BrokerLinks {
    calls: mpsc::Sender<LinkCall>,
}

impl BrokerLinks {
    /// Starts the link thread.
    pub fn start() -> std::io::Result<BrokerLinks> {
        let (calls, receiver) = mpsc::channel(CALLS_QUEUED_MAX);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        std::thread::Builder::new().name("weir-brokers".to_owned()).spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, serve_calls(receiver));
        })?;
        Ok(BrokerLinks { calls })
    }
}

impl RaftTransport for BrokerLinks {
    fn call(&self, target: NodeId, address: &str, kind: RaftCallKind, payload: Vec<u8>) -> CallFuture {
        let (answer, answered) = oneshot::channel();
        let call = LinkCall { target, address: address.to_owned(), kind, payload, answer };
        let sent = self.calls.try_send(call);
        Box::pin(async move {
            let gone = || TransportError { target, reason: "the broker link thread stopped".to_owned() };
            match sent {
                Ok(()) => answered.await.map_err(|_| gone())?,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    Err(TransportError { target, reason: format!("{CALLS_QUEUED_MAX} calls already queued") })
                }
                Err(mpsc::error::TrySendError::Closed(_)) => Err(gone()),
            }
        })
    }
}

/// A connection to one peer; `generation` tells a newer one from an older.
struct Peer {
    client: broker::Client,
    generation: u64,
}

type Peers = std::rc::Rc<std::cell::RefCell<HashMap<String, Peer>>>;

async fn serve_calls(mut calls: mpsc::Receiver<LinkCall>) {
    let peers: Peers = Peers::default();
    let mut generations = 0u64;
    while let Some(call) = calls.recv().await {
        if call.answer.is_closed() {
            continue;
        }
        generations += 1;
        let new_generation = generations;
        tokio::task::spawn_local(run_call(peers.clone(), call, new_generation));
    }
}

/// One call, connecting first when there is no connection to its peer.
async fn run_call(peers: Peers, call: LinkCall, new_generation: u64) {
    let address = call.address.clone();
    // The connection this call used, once it has one.
    let used = std::cell::Cell::new(None);
    let attempt = async {
        let known = peers.borrow().get(&address).map(|peer| (peer.client.clone(), peer.generation));
        let (client, generation) = match known {
            Some(known) => known,
            None => {
                let client = connect(&address).await.map_err(|reason| (reason, None))?;
                let peer = Peer { client: client.clone(), generation: new_generation };
                peers.borrow_mut().insert(address.clone(), peer);
                (client, new_generation)
            }
        };
        used.set(Some(generation));
        call_once(&client, call.kind, call.payload).await.map_err(|reason| (reason, Some(generation)))
    };
    let outcome = match tokio::time::timeout(CALL_TIMEOUT, attempt).await {
        Ok(outcome) => outcome,
        Err(_) => Err((format!("no answer within {} ms", CALL_TIMEOUT.as_millis()), used.get())),
    };
    let outcome = outcome.map_err(|(reason, generation)| {
        // Forget the connection that failed, not a newer one made meanwhile.
        let mut peers = peers.borrow_mut();
        if generation.is_some() && peers.get(&address).map(|peer| peer.generation) == generation {
            peers.remove(&address);
        }
        TransportError { target: call.target, reason }
    });
    let _ = call.answer.send(outcome);
}

async fn call_once(client: &broker::Client, kind: RaftCallKind, payload: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut request = client.controller_call_request();
    request.get().set_kind(kind.name());
    request.get().set_payload(&payload);
    let response = request.send().promise.await.map_err(|error| error.to_string())?;
    let response = response.get().map_err(|error| error.to_string())?;
    if response.has_error() {
        let error = response.get_error().map_err(|error| error.to_string())?;
        let message = error.get_message().map_err(|error| error.to_string())?.to_str().unwrap_or("?").to_owned();
        return Err(message);
    }
    Ok(response.get_payload().map_err(|error| error.to_string())?.to_vec())
}

async fn connect(address: &str) -> Result<broker::Client, String> {
    let stream = tokio::time::timeout(CALL_TIMEOUT, tokio::net::TcpStream::connect(address))
        .await
        .map_err(|_| format!("connecting to {address} timed out"))?
        .map_err(|error| format!("connecting to {address}: {error}"))?;
    stream.set_nodelay(true).map_err(|error| error.to_string())?;
    let (reader, writer) = stream.into_split();
    let mut options = capnp::message::ReaderOptions::new();
    options.traversal_limit_in_words(Some(ANSWER_BYTES_MAX / 8));
    let network = twoparty::VatNetwork::new(
        futures::io::BufReader::new(reader.compat()),
        BufWriter::new(writer.compat_write()),
        rpc_twoparty_capnp::Side::Client,
        options,
    );
    let mut rpc = RpcSystem::new(Box::new(network), None);
    let client: broker::Client = rpc.bootstrap(rpc_twoparty_capnp::Side::Server);
    let address = address.to_owned();
    tokio::task::spawn_local(async move {
        if let Err(error) = rpc.await {
            tracing::debug!(%address, %error, "broker link closed");
        }
    });
    Ok(client)
}
