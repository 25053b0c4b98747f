//! [`Server`]: the listening broker — accepts TCP connections and serves each one
//! with Cap'n Proto RPC on one of a few `LocalSet` threads.
//!
//! Shape (mini-redis): [`Server::bind`] opens the data directory and binds the
//! listener; [`Server::serve`] runs the accept loop until `shutdown` resolves, then
//! stops the connection threads and closes every partition cleanly. [`run`] does
//! both.
//!
//! Threads: the accept loop runs on the caller's tokio runtime; `rpc_threads`
//! threads each own a current-thread runtime and a `LocalSet` (capnp-rpc is
//! `!Send`) and take connections round-robin. Broker state crosses threads only as
//! `Arc<Node>`.
//!
//! Bounds: at most `connections_max` connections, `connections_per_ip_max` from
//! one address (more are closed at once, with a warning); per connection,
//! `in_flight_calls_max` calls (see `rpc.rs`), `unsent_response_bytes_max` of
//! answers, `request_timeout_ms` to finish a started request and
//! `idle_timeout_ms` of idleness (see `transport.rs`); every incoming message is
//! limited to `request_bytes_max` bytes and `nesting_limit` levels — a message past
//! them closes its connection, nobody else notices.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use abi::weir_capnp::broker;
use capnp_rpc::{rpc_twoparty_capnp, twoparty, RpcSystem};
use futures::io::BufWriter;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::config::{BrokerConfig, Limits};
use crate::node::{Node, NodeError};
use crate::rpc::{BrokerService, CallGate};
use crate::transport::{ConnectionState, GuardedReader, GuardedWriter};

/// How often freed heap pages are given back to the system (when any were).
const MEMORY_TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// How often group sessions are checked for expiry.
const GROUP_EXPIRY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Socket buffer between the kernel and capnp's message reader/writer.
const SOCKET_BUFFER_BYTES: usize = 256 * 1024;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("cannot start a connection thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The controller's storage failed: the broker stops rather than serve
    /// metadata it can no longer follow (a supervisor restarts it).
    #[error("the controller stopped: {0}")]
    ControllerFailed(String),
}

/// A bound, not yet serving broker.
#[derive(Debug)]
pub struct Server {
    listener: Arc<TcpListener>,
    node: Arc<Node>,
    limits: Limits,
    rpc_threads: usize,
    membership: crate::config::ControllerSettings,
}

/// A connection on its way to a connection thread, with its slots.
type Accepted = (TcpStream, ConnectionSlots);

/// A connection's slot among `connections_max` and among its address's
/// `connections_per_ip_max`; both are given back when it is dropped.
#[derive(Debug)]
struct ConnectionSlots {
    _global: OwnedSemaphorePermit,
    ip: IpAddr,
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl ConnectionSlots {
    /// Takes a slot for `ip`, or `None` when that address holds its maximum.
    fn take(
        global: OwnedSemaphorePermit,
        ip: IpAddr,
        per_ip: &Arc<Mutex<HashMap<IpAddr, usize>>>,
        per_ip_max: usize,
    ) -> Option<ConnectionSlots> {
        let mut counts = per_ip.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = counts.entry(ip).or_insert(0);
        if *count >= per_ip_max {
            return None;
        }
        *count += 1;
        Some(ConnectionSlots { _global: global, ip, per_ip: per_ip.clone() })
    }
}

impl Drop for ConnectionSlots {
    fn drop(&mut self) {
        let mut counts = self.per_ip.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// Binds, serves until `shutdown`, shuts down cleanly.
pub async fn run(config: BrokerConfig, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
    let server = Server::bind(config).await?;
    tracing::info!(address = %server.local_addr(), "listening");
    server.serve(shutdown).await
}

impl Server {
    /// Binds `config.listen` and opens the data directory.
    pub async fn bind(config: BrokerConfig) -> Result<Server, ServerError> {
        let listener = TcpListener::bind(&config.listen)
            .await
            .map_err(|source| ServerError::Bind { address: config.listen.clone(), source })?;
        let listener = Arc::new(listener);
        let local_addr =
            listener.local_addr().map_err(|source| ServerError::Bind { address: config.listen.clone(), source })?;
        let mut config = config;
        if config.advertised_listener.is_none() {
            // The bound port (`listen` may say 0) is what clients and brokers reach.
            config.advertised_listener = Some(local_addr.to_string());
        }
        let node = match config.controller.in_a_cluster(config.broker_id) {
            false => Node::open(&config).await?,
            true => {
                // The other voters need this one to elect an active controller
                // before any broker can register (and a learner needs the log
                // replicated to it): serve quorum calls while the rest of the
                // broker opens.
                let environment = crate::Environment::real();
                let data_dir_lock = Node::lock_data_dir(&config, &environment)?;
                let links = crate::controller::broker_link::BrokerLinks::start().map_err(ServerError::Thread)?;
                let controller = Node::open_controller(&config, &environment, Arc::new(links)).await?;
                let startup = StartupListener::start(&listener, controller.clone(), config.limits.clone())?;
                let node = Node::start(&config, environment, controller, data_dir_lock).await;
                startup.stop_accepting();
                node?
            }
        };
        Ok(Server {
            listener,
            node: Arc::new(node),
            limits: config.limits.clone(),
            rpc_threads: config.rpc_threads,
            membership: config.controller.clone(),
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The broker's state (tests and embedding).
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Accepts connections until `shutdown` resolves, then closes every connection
    /// and every partition.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let (stop, stopped) = watch::channel(false);
        let mut senders = Vec::new();
        let mut threads = Vec::new();
        for index in 0..self.rpc_threads.max(1) {
            let (sender, receiver) = mpsc::unbounded_channel();
            let thread =
                spawn_connection_thread(index, self.node.clone(), self.limits.clone(), receiver, stopped.clone())?;
            senders.push(sender);
            threads.push(thread);
        }
        self.node.start_transforms(tokio::runtime::Handle::current());
        let metadata_watch = tokio::spawn(self.node.clone().follow_metadata());
        let plugin_fetches = tokio::spawn(self.node.clone().fetch_plugins());
        let plugin_compiles = tokio::spawn(self.node.clone().follow_compiles());
        let replica_fetches = tokio::spawn(self.node.clone().follow_leaders());
        let isr_changes = tokio::spawn(self.node.clone().maintain_isrs());
        let heartbeat = std::time::Duration::from_millis(self.membership.broker_heartbeat_ms);
        let heartbeats = tokio::spawn(self.node.clone().send_heartbeats(heartbeat));
        let session_timeout = std::time::Duration::from_millis(self.membership.broker_session_timeout_ms);
        let fencing = tokio::spawn(self.node.controller().clone().fence_silent_brokers(session_timeout));
        let connection_slots = Arc::new(Semaphore::new(self.limits.connections_max));
        let per_ip = Arc::new(Mutex::new(HashMap::new()));
        let group_expiry = tokio::spawn({
            let node = self.node.clone();
            async move {
                let mut ticks = tokio::time::interval(GROUP_EXPIRY_INTERVAL);
                loop {
                    ticks.tick().await;
                    node.expire_groups().await;
                }
            }
        });
        let memory_trim = tokio::spawn(async {
            let mut ticks = tokio::time::interval(MEMORY_TRIM_INTERVAL);
            loop {
                ticks.tick().await;
                let _ = tokio::task::spawn_blocking(crate::transport::give_back_memory).await;
            }
        });
        let mut next_thread = 0;
        tokio::pin!(shutdown);
        let controller = self.node.controller().clone();
        let controller_failed = controller.failed();
        tokio::pin!(controller_failed);
        let mut failure = None;
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                error = &mut controller_failed => {
                    tracing::error!(%error, "the controller stopped on a storage error; stopping the broker");
                    failure = Some(error);
                    break;
                }
                accepted = self.listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = connection_slots.clone().try_acquire_owned() else {
                tracing::warn!(%peer, connections_max = self.limits.connections_max, "too many connections; closing");
                continue;
            };
            let per_ip_max = self.limits.connections_per_ip_max;
            let Some(slots) = ConnectionSlots::take(permit, peer.ip(), &per_ip, per_ip_max) else {
                tracing::warn!(%peer, connections_per_ip_max = per_ip_max, "too many connections from one address; closing");
                continue;
            };
            tracing::debug!(%peer, "connection accepted");
            let _ = senders[next_thread].send((stream, slots));
            next_thread = (next_thread + 1) % senders.len();
        }
        tracing::info!("shutting down");
        heartbeats.abort();
        // With its controller dead this broker cannot hand its partitions over;
        // the active controller fences it once its session expires.
        if failure.is_none() {
            self.node.controlled_shutdown().await;
        }
        fencing.abort();
        group_expiry.abort();
        memory_trim.abort();
        metadata_watch.abort();
        replica_fetches.abort();
        isr_changes.abort();
        plugin_fetches.abort();
        plugin_compiles.abort();
        let _ = stop.send(true);
        drop(senders);
        for thread in threads {
            let _ = thread.join();
        }
        self.node.stop_transforms();
        // The Raft node stops writing before the data directory is unlocked.
        self.node.stop_controller().await;
        self.node.shutdown();
        if let Some(error) = failure {
            return Err(ServerError::ControllerFailed(error));
        }
        tracing::info!("stopped cleanly");
        Ok(())
    }
}

fn spawn_connection_thread(
    index: usize,
    node: Arc<Node>,
    limits: Limits,
    mut connections: mpsc::UnboundedReceiver<Accepted>,
    mut stopped: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, ServerError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ServerError::Thread)?;
    std::thread::Builder::new()
        .name(format!("weir-rpc-{index}"))
        .spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                loop {
                    tokio::select! {
                        _ = stopped.wait_for(|stopped| *stopped) => break,
                        accepted = connections.recv() => match accepted {
                            Some((stream, permit)) => {
                                tokio::task::spawn_local(serve_connection(stream, permit, node.clone(), limits.clone()));
                            }
                            None => break,
                        },
                    }
                }
            });
        })
        .map_err(ServerError::Thread)
}

/// Runs one connection's RPC system until the peer goes away or breaks a limit.
async fn serve_connection(stream: TcpStream, slots: ConnectionSlots, node: Arc<Node>, limits: Limits) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    let mut options = capnp::message::ReaderOptions::new();
    options.traversal_limit_in_words(Some(limits.request_bytes_max / 8)).nesting_limit(limits.nesting_limit);
    let connection = ConnectionState::new(limits.connection());
    // The guarded reader buffers and frames requests itself; the writer counts
    // what reaches the socket (below the write buffer).
    let network = twoparty::VatNetwork::new(
        GuardedReader::new(reader.compat(), connection.clone()),
        BufWriter::with_capacity(SOCKET_BUFFER_BYTES, GuardedWriter::new(writer.compat_write(), connection.clone())),
        rpc_twoparty_capnp::Side::Server,
        options,
    );
    let service = BrokerService::new(node, CallGate::new(limits.in_flight_calls_max, connection));
    let bootstrap: broker::Client = capnp_rpc::new_client(service);
    let rpc = RpcSystem::new(Box::new(network), Some(bootstrap.client));
    match rpc.await {
        Ok(()) => tracing::debug!(?peer, "connection closed"),
        Err(error) => tracing::info!(?peer, %error, "connection closed after a protocol error or timeout"),
    }
    drop(slots);
    crate::transport::memory_freed();
}

/// Serves the controller quorum's calls on connections accepted while the broker
/// is still opening (see [`Server::bind`]). A connection that makes any other
/// call (a client) is closed, so the client connects again and, once the broker
/// is open, reaches it. Other brokers' connections stay served here: closing them
/// under calls in flight would leave those calls neither answered nor dropped.
#[derive(Debug)]
struct StartupListener {
    accepting: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl StartupListener {
    fn start(
        listener: &Arc<TcpListener>,
        controller: crate::controller::Controller,
        limits: Limits,
    ) -> Result<StartupListener, ServerError> {
        let (sender, mut receiver) = mpsc::unbounded_channel::<TcpStream>();
        let (stop, mut stopped) = watch::channel(false);
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ServerError::Thread)?;
        std::thread::Builder::new()
            .name("weir-rpc-startup".to_owned())
            .spawn(move || {
                let local = tokio::task::LocalSet::new();
                // Returning drops the LocalSet, and with it every connection.
                local.block_on(&runtime, async move {
                    loop {
                        tokio::select! {
                            _ = stopped.wait_for(|stopped| *stopped) => break,
                            stream = receiver.recv() => match stream {
                                Some(stream) => {
                                    let serving = serve_startup_connection(stream, controller.clone(), limits.clone());
                                    tokio::task::spawn_local(serving);
                                }
                                None => break,
                            },
                        }
                    }
                    // Streams accepted just before the stop are served too (a
                    // client's is closed at its first call).
                    while let Ok(stream) = receiver.try_recv() {
                        tokio::task::spawn_local(serve_startup_connection(stream, controller.clone(), limits.clone()));
                    }
                    // Keep serving the brokers' connections until they close.
                    std::future::pending::<()>().await;
                });
            })
            .map_err(ServerError::Thread)?;
        let listener = listener.clone();
        let accepting = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        if sender.send(stream).is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        });
        Ok(StartupListener { accepting, stop })
    }

    /// Stops accepting.
    fn stop_accepting(self) {
        self.accepting.abort();
        let _ = self.stop.send(true);
    }
}

async fn serve_startup_connection(stream: TcpStream, controller: crate::controller::Controller, limits: Limits) {
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    let mut options = capnp::message::ReaderOptions::new();
    options.traversal_limit_in_words(Some(limits.request_bytes_max / 8)).nesting_limit(limits.nesting_limit);
    let network = twoparty::VatNetwork::new(
        futures::io::BufReader::new(reader.compat()),
        BufWriter::new(writer.compat_write()),
        rpc_twoparty_capnp::Side::Server,
        options,
    );
    let client_seen = std::rc::Rc::new(tokio::sync::Notify::new());
    let service = crate::rpc::QuorumOnlyService::new(controller, client_seen.clone());
    let bootstrap: broker::Client = capnp_rpc::new_client(service);
    let rpc = RpcSystem::new(Box::new(network), Some(bootstrap.client));
    tokio::select! {
        outcome = rpc => if let Err(error) = outcome {
            tracing::debug!(%error, "startup connection closed");
        },
        // A client: closed, so that it connects again to the opened broker.
        () = client_seen.notified() => tracing::debug!("closed a client's connection made while starting"),
    }
}
