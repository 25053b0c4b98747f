//! [`BrokerLinks`]: the controller's calls to other brokers over their Cap'n Proto
//! port (`Broker.controllerCall`) — the same port clients use.
//!
//! capnp-rpc is `!Send`, so one thread ("weir-brokers") owns a current-thread
//! runtime, a `LocalSet` and one connection per peer address; calls reach it over
//! a channel and answer through a oneshot. A connection that fails is dropped and
//! the next call to that peer connects again. Every call is bounded by
//! [`CALL_TIMEOUT`]: a dead peer costs a timeout, never a hang.

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
    calls: mpsc::UnboundedSender<LinkCall>,
}

impl BrokerLinks {
    /// Starts the link thread.
    pub fn start() -> std::io::Result<BrokerLinks> {
        let (calls, receiver) = mpsc::unbounded_channel();
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
        let sent = self.calls.send(call).is_ok();
        Box::pin(async move {
            let gone = || TransportError { target, reason: "the broker link thread stopped".to_owned() };
            if !sent {
                return Err(gone());
            }
            answered.await.map_err(|_| gone())?
        })
    }
}

async fn serve_calls(mut calls: mpsc::UnboundedReceiver<LinkCall>) {
    let mut peers: HashMap<String, broker::Client> = HashMap::new();
    while let Some(call) = calls.recv().await {
        let client = match peers.get(&call.address) {
            Some(client) => Ok(client.clone()),
            None => connect(&call.address).await,
        };
        let client = match client {
            Ok(client) => client,
            Err(reason) => {
                let _ = call.answer.send(Err(TransportError { target: call.target, reason }));
                continue;
            }
        };
        peers.insert(call.address.clone(), client.clone());
        // Calls run concurrently; a failed one drops its peer's connection.
        let broken = std::rc::Rc::new(std::cell::Cell::new(false));
        let flag = broken.clone();
        let address = call.address.clone();
        tokio::task::spawn_local(async move {
            let outcome = tokio::time::timeout(CALL_TIMEOUT, call_once(&client, call.kind, call.payload)).await;
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(_) => Err(format!("no answer within {} ms", CALL_TIMEOUT.as_millis())),
            };
            if outcome.is_err() {
                flag.set(true);
            }
            let _ = call.answer.send(outcome.map_err(|reason| TransportError { target: call.target, reason }));
        });
        // A broken connection is forgotten at the next call to that peer.
        tokio::task::yield_now().await;
        if broken.get() {
            peers.remove(&address);
        }
    }
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
