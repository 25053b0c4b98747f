//! [`Connection`]: one Cap'n Proto RPC connection to one broker, usable from any
//! thread and any tokio runtime.
//!
//! capnp-rpc is `!Send`, so each connection owns a thread with a current-thread
//! runtime and a `LocalSet` that drives the RPC system. Callers send it a
//! `Call`: a `Send` closure that, on that thread, receives the broker capability,
//! makes the call and converts the answer into plain `Send` Rust values, which
//! travel back over a oneshot channel. Calls are pipelined: many may be in flight.
//!
//! A connection that broke stays broken ([`Connection::is_broken`]); the owner
//! ([`crate::cluster::Cluster`]) replaces it. Dropping every handle closes the
//! socket and ends the thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abi::weir_capnp::broker;
use capnp_rpc::{rpc_twoparty_capnp, RpcSystem};
use futures::io::BufWriter;
use rpc_net::{Network, SocketReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::TokioAsyncWriteCompatExt;

use crate::error::ClientError;

/// Buffer between capnp's message writer and the socket.
const SOCKET_BUFFER_BYTES: usize = 256 * 1024;
/// Largest answer accepted from a broker (a fetch of several MiB plus framing).
const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;
/// Work to run on the connection thread with the broker capability.
type Call = Box<dyn FnOnce(broker::Client) -> LocalFuture + Send>;

/// A handle to one broker connection; cheap to clone.
#[derive(Clone, Debug)]
pub struct Connection {
    address: Arc<str>,
    calls: mpsc::UnboundedSender<Call>,
    broken: Arc<AtomicBool>,
}

impl Connection {
    /// Connects to `address` (`host:port`), waiting at most `timeout`.
    pub async fn connect(address: &str, timeout: Duration) -> Result<Connection, ClientError> {
        let (calls, receiver) = mpsc::unbounded_channel();
        let (ready_sender, ready) = oneshot::channel();
        let broken = Arc::new(AtomicBool::new(false));
        let thread_address = address.to_owned();
        let thread_broken = broken.clone();
        let connect_error = |reason: String| ClientError::Connect { address: address.to_owned(), reason };
        std::thread::Builder::new()
            .name(format!("weir-conn-{address}"))
            .spawn(move || run(thread_address, timeout, receiver, ready_sender, thread_broken))
            .map_err(|error| connect_error(error.to_string()))?;
        ready.await.map_err(|_| connect_error("connection thread ended".to_owned()))??;
        Ok(Connection { address: address.into(), calls, broken })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether `other` is a handle to this same connection.
    pub fn same_as(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.broken, &other.broken)
    }

    /// Whether the connection broke (it never recovers; make a new one).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed) || self.calls.is_closed()
    }

    /// Runs `call` on the connection thread with the broker capability; `call`
    /// turns the answer into `Send` values.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(broker::Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ClientError>> + 'static,
    {
        let (sender, receiver) = oneshot::channel();
        let boxed: Call = Box::new(move |client| {
            Box::pin(async move {
                let mut sender = sender;
                // A caller that gave up (dropped its future) cancels the call: the
                // capnp promise is dropped, so the broker gets a Finish and stops
                // work it would answer for nobody (e.g. a long poll after a seek).
                tokio::select! {
                    outcome = call(client) => {
                        let _ = sender.send(outcome);
                    }
                    () = sender.closed() => {}
                }
            })
        });
        let disconnected = || ClientError::Disconnected {
            address: self.address.to_string(),
            reason: "the connection is closed".to_owned(),
        };
        self.calls.send(boxed).map_err(|_| disconnected())?;
        receiver.await.map_err(|_| disconnected())?
    }
}

/// The connection thread: connect, then serve calls until every handle is gone or
/// the connection breaks.
fn run(
    address: String,
    timeout: Duration,
    mut calls: mpsc::UnboundedReceiver<Call>,
    ready: oneshot::Sender<Result<(), ClientError>>,
    broken: Arc<AtomicBool>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(ClientError::Connect { address, reason: error.to_string() }));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let connect_error = |reason: String| ClientError::Connect { address: address.clone(), reason };
        let stream = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&address)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                let _ = ready.send(Err(connect_error(error.to_string())));
                return;
            }
            Err(_) => {
                let _ = ready.send(Err(connect_error(format!("no answer within {} ms", timeout.as_millis()))));
                return;
            }
        };
        let _ = stream.set_nodelay(true);
        let (reader, writer) = stream.into_split();
        let mut options = capnp::message::ReaderOptions::new();
        options.traversal_limit_in_words(Some(RESPONSE_BYTES_MAX / 8));
        let network = Network::new(
            SocketReader::new(reader, RESPONSE_BYTES_MAX),
            BufWriter::with_capacity(SOCKET_BUFFER_BYTES, writer.compat_write()),
            rpc_twoparty_capnp::Side::Client,
            options,
        )
        .sharing_slices();
        let mut rpc = RpcSystem::new(Box::new(network), None);
        let client: broker::Client = rpc.bootstrap(rpc_twoparty_capnp::Side::Server);
        let _ = ready.send(Ok(()));
        let rpc_broken = broken.clone();
        let rpc_address = address.clone();
        let mut driver = tokio::task::spawn_local(async move {
            if let Err(error) = rpc.await {
                tracing::debug!(address = %rpc_address, %error, "connection ended");
            }
            rpc_broken.store(true, Ordering::Relaxed);
        });
        loop {
            tokio::select! {
                call = calls.recv() => match call {
                    Some(call) => {
                        tokio::task::spawn_local(call(client.clone()));
                    }
                    None => break,
                },
                _ = &mut driver => break,
            }
        }
        broken.store(true, Ordering::Relaxed);
    });
}
