//! This broker in the cluster: a broker that is not a voter joins the metadata
//! log as a learner first; then it makes sure the cluster has an id, registers
//! (its broker epoch is the offset of the registration), creates the internal
//! topics a cluster needs when they are missing. A registered broker starts
//! fenced; it asks to be unfenced (to lead) only once its partitions are open,
//! so the metadata never names it leader of a partition it cannot serve yet.

use super::*;

/// Longest a broker waits for the other voters before creating the internal
/// topics on the brokers that are up.
const INTERNAL_TOPICS_WAIT: Duration = Duration::from_secs(30);
/// Bytes of randomness behind a cluster id.
const CLUSTER_ID_BYTES: usize = 16;

impl Node {
    /// Waits for the quorum, gives a new cluster its id, registers this broker.
    pub(super) async fn join_cluster(&self) -> Result<(), NodeError> {
        let unavailable = |error: SubmitError<ControllerError>| NodeError::Controller(error.to_string());
        let address = format!("{}:{}", self.broker.host, self.broker.port);
        self.controller.join_as_learner(&address, CONTROLLER_START_TIMEOUT).await.map_err(NodeError::Controller)?;
        let cluster_id = new_cluster_id(&*self.clock, self.broker.id);
        self.controller
            .request_until(&ControllerRequest::InitCluster { cluster_id }, CONTROLLER_START_TIMEOUT)
            .await
            .map_err(unavailable)?;
        let registration = BrokerRegistration {
            broker_id: self.broker.id,
            incarnation: self.incarnation.clone(),
            host: self.broker.host.clone(),
            port: self.broker.port,
            rack: self.rack.clone(),
        };
        let response = self
            .controller
            .request_until(&ControllerRequest::RegisterBroker(registration), CONTROLLER_START_TIMEOUT)
            .await
            .map_err(unavailable)?;
        if let Some(offset) = response.last_offset {
            self.controller.wait_applied_offset(offset, CONTROLLER_START_TIMEOUT).await;
        }
        let epoch = response.value.unwrap_or(0) as u64;
        self.broker_epoch.store(epoch, std::sync::atomic::Ordering::Release);
        tracing::info!(broker_id = self.broker.id, broker_epoch = epoch, "registered with the controller");
        Ok(())
    }

    /// Asks to be unfenced — to lead — once this broker's partitions are open and
    /// it is about to serve, then takes up the leaderships that gives.
    pub(super) async fn unfence(&self) -> Result<(), NodeError> {
        let broker_epoch = self.broker_epoch.load(std::sync::atomic::Ordering::Acquire);
        let request = ControllerRequest::UnfenceBroker { broker_id: self.broker.id, broker_epoch };
        self.request(&request).await.map_err(|error| NodeError::Controller(error.message))?;
        self.reconcile_logged();
        Ok(())
    }

    /// Creates `__consumer_offsets` when the cluster has none yet — once every
    /// voter is registered and active (or after a while), so its partitions spread
    /// over the whole cluster rather than the first broker up — with a replica on
    /// up to three brokers (Kafka's `offsets.topic.replication.factor`), so
    /// groups fail over with their partition.
    pub(super) async fn ensure_internal_topics(&self) -> Result<(), NodeError> {
        let voters = self.controller.voters().len();
        let started = tokio::time::Instant::now();
        loop {
            let (exists, active) = self.controller.read(|image| {
                let active = image.brokers.values().filter(|broker| !broker.fenced).count();
                (image.topics.contains_key(CONSUMER_OFFSETS_TOPIC), active)
            });
            if exists {
                return Ok(());
            }
            if active >= voters || started.elapsed() >= INTERNAL_TOPICS_WAIT {
                break;
            }
            let mut applied = self.controller.applied().applied_index.clone();
            let _ = tokio::time::timeout(Duration::from_millis(200), applied.changed()).await;
        }
        let active = self.controller.read(|image| image.brokers.values().filter(|broker| !broker.fenced).count());
        let replication_factor = active.clamp(1, CONSUMER_OFFSETS_REPLICATION_FACTOR) as u16;
        // Its own min.insync.replicas (1, Kafka's default), whatever the broker's
        // topic default says: groups must keep working on the brokers left.
        let configs = [
            ("flush.policy", "always"),
            ("retention.ms", "-1"),
            ("segment.bytes", "67108864"),
            ("min.insync.replicas", "1"),
        ]
        .map(|(key, value)| (key.to_owned(), value.to_owned()));
        let request = ControllerRequest::CreateTopic {
            name: CONSUMER_OFFSETS_TOPIC.to_owned(),
            partition_count: CONSUMER_OFFSETS_PARTITIONS,
            replication_factor,
            configs: configs.into_iter().collect(),
            initial_isr: IsrChoice::AllReplicas,
        };
        match self.request(&request).await {
            // Another broker created it meanwhile.
            Ok(_) => {}
            Err(error) if error.code == ErrorCode::TopicAlreadyExists => {}
            Err(error) => return Err(NodeError::Controller(error.message)),
        }
        self.reconcile_logged();
        Ok(())
    }
}

/// A fresh cluster id: 22 URL-safe characters (like Kafka's), from the clock, the
/// process and the broker id mixed by SplitMix64 (unique enough for an id that
/// only tells clusters apart; the first InitCluster wins).
fn new_cluster_id(clock: &dyn broker_core::clock::Clock, broker_id: i32) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut state =
        (clock.now_ms() as u64) ^ (u64::from(std::process::id()) << 32) ^ (broker_id as u64).rotate_left(17);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    };
    let bytes: Vec<u8> = (0..CLUSTER_ID_BYTES).map(|_| next() as u8).collect();
    let mut id = String::new();
    let mut bits = 0u32;
    let mut value = 0u32;
    for byte in bytes {
        value = (value << 8) | u32::from(byte);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            id.push(ALPHABET[((value >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        id.push(ALPHABET[((value << (6 - bits)) & 63) as usize] as char);
    }
    id
}

/// How long a stopping broker waits for the controller to move its leaderships.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The cluster as one broker sees it (`weir cluster status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    pub cluster_id: String,
    pub active_controller: i32,
    pub voters: Vec<i32>,
    pub brokers: Vec<BrokerStatus>,
    pub answered_by: i32,
    /// The last metadata offset the answering broker applied (-1: none).
    pub metadata_offset: i64,
    pub health: PartitionHealth,
}

/// Partitions that are not fully served, as `topic-partition` names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionHealth {
    /// Every partition, internal topics included.
    pub partition_count: u32,
    /// Fewer in-sync replicas than replicas.
    pub under_replicated: Vec<String>,
    /// Fewer in-sync replicas than the topic's `min.insync.replicas`
    /// (`acks=all` produces are refused).
    pub under_min_isr: Vec<String>,
    /// No leader: nothing can be read or written.
    pub offline: Vec<String>,
}

/// One registered broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerStatus {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub epoch: u64,
    pub fenced: bool,
    pub rack: Option<String>,
    /// The last metadata offset it reported (-1: not known to the answering broker).
    pub metadata_offset: i64,
}

impl Node {
    /// Heartbeats the active controller every `interval` until aborted; asks to be
    /// unfenced when it says this broker is fenced (cut off for a while, now back).
    pub async fn send_heartbeats(self: Arc<Self>, interval: Duration) {
        let mut ticks = tokio::time::interval(interval);
        loop {
            ticks.tick().await;
            if self.stopping.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            let broker_epoch = self.broker_epoch.load(std::sync::atomic::Ordering::Acquire);
            let metadata_offset = self.controller.read(|image| image.applied_offset.map_or(-1, |offset| offset as i64));
            let heartbeat = BrokerHeartbeat { broker_id: self.broker.id, broker_epoch, metadata_offset };
            match self.controller.heartbeat(&heartbeat).await {
                Ok(answer) if !answer.registered => {
                    // Another process registered under this id: never lead beside it.
                    tracing::error!(
                        broker_id = self.broker.id,
                        broker_epoch,
                        "another start of this broker id registered; this one stops leading"
                    );
                    self.stop_leading();
                }
                Ok(answer) if answer.fenced && !self.stopping.load(std::sync::atomic::Ordering::Acquire) => {
                    tracing::info!(broker_id = self.broker.id, "fenced by the controller; asking to lead again");
                    let request = ControllerRequest::UnfenceBroker { broker_id: self.broker.id, broker_epoch };
                    if let Err(error) = self.request(&request).await {
                        tracing::warn!(%error, "unfencing failed");
                    }
                }
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "heartbeat not taken"),
            }
        }
    }

    /// Leads nothing from now on (until the next reconcile says otherwise).
    pub(super) fn stop_leading(&self) {
        for topic in self.topics().values() {
            for slot in &topic.slots {
                if let Some(partition) = slot.partition() {
                    partition.stop_leading();
                }
            }
        }
    }

    /// Before a stop (SIGTERM): stops heartbeating and asks the controller to
    /// fence this broker, which moves its leaderships to other in-sync replicas
    /// first, so clients move on at once instead of waiting out a session.
    pub async fn controlled_shutdown(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Release);
        let broker_epoch = self.broker_epoch.load(std::sync::atomic::Ordering::Acquire);
        let request = ControllerRequest::FenceBroker { broker_id: self.broker.id, broker_epoch };
        match self.controller.request_until(&request, CONTROLLED_SHUTDOWN_TIMEOUT).await {
            Ok(_) => tracing::info!(broker_id = self.broker.id, "controlled shutdown: leaderships moved"),
            Err(error) => tracing::warn!(%error, "controlled shutdown: the controller did not fence this broker"),
        }
    }

    /// Moves leadership back to each partition's preferred replica where it
    /// can lead (active, in the ISR); answers how many partitions moved.
    pub async fn elect_preferred_leaders(&self) -> Result<u32, ApiError> {
        let response = self.request(&ControllerRequest::ElectPreferredLeaders).await?;
        Ok(response.value.unwrap_or(0).max(0) as u32)
    }

    /// Starts moving partitions of `topic` to new replicas: (partition,
    /// target replicas); answers once this broker's image holds the change.
    pub async fn reassign_partitions(&self, topic: &str, assignments: Vec<(u32, Vec<i32>)>) -> Result<(), ApiError> {
        let request = ControllerRequest::ReassignPartitions { topic: topic.to_owned(), assignments };
        self.request(&request).await.map(|_| ())
    }

    /// The cluster as this broker sees it.
    pub fn cluster_status(&self) -> ClusterStatus {
        let reported = self.controller.reported_offsets();
        let default_min_isr = self.log_defaults.min_insync_replicas;
        let (cluster_id, brokers, metadata_offset, health) = self.controller.read(|image| {
            let mut health = PartitionHealth::default();
            for (name, topic) in &image.topics {
                let min_isr = topic
                    .configs
                    .get("min.insync.replicas")
                    .and_then(|value| value.trim().parse::<u16>().ok())
                    .unwrap_or(default_min_isr);
                for (index, state) in topic.partitions.iter().enumerate() {
                    health.partition_count += 1;
                    let partition = format!("{name}-{index}");
                    if state.isr.len() < state.replicas.len() {
                        health.under_replicated.push(partition.clone());
                    }
                    if state.isr.len() < usize::from(min_isr) {
                        health.under_min_isr.push(partition.clone());
                    }
                    if state.leader < 0 {
                        health.offline.push(partition);
                    }
                }
            }
            let brokers = image
                .brokers
                .values()
                .map(|broker| BrokerStatus {
                    id: broker.registration.broker_id,
                    host: broker.registration.host.clone(),
                    port: broker.registration.port,
                    epoch: broker.epoch,
                    fenced: broker.fenced,
                    rack: broker.registration.rack.clone(),
                    metadata_offset: reported.get(&broker.registration.broker_id).copied().unwrap_or(-1),
                })
                .collect();
            (
                image.cluster_id.clone().unwrap_or_default(),
                brokers,
                image.applied_offset.map_or(-1, |offset| offset as i64),
                health,
            )
        });
        ClusterStatus {
            cluster_id,
            active_controller: self.controller.active_controller().map_or(-1, |id| id as i32),
            voters: self.controller.voters().into_iter().map(|id| id as i32).collect(),
            brokers,
            answered_by: self.broker.id,
            metadata_offset,
            health,
        }
    }
}
