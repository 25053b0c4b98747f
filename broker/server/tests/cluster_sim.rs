//! A seeded, deterministic simulation of the controller quorum and its brokers.
//!
//! Every voter is the real `Controller` (openraft, our log store and state
//! machine, the controller handlers, broker liveness and fencing) on a
//! `MemStorage` of its own; every broker runs the register → unfence → heartbeat
//! loop of `node/membership.rs` against it; clients create and delete topics,
//! allocate producer ids and elect preferred leaders through any voter. They all
//! run on one thread, on a tokio clock that is paused and moves only when every
//! task waits — so simulated minutes take milliseconds, and nothing depends on the
//! machine's speed.
//!
//! The network between voters loses, delays (so reorders) and cuts messages, in
//! both directions or one; voters crash (their storage forgets what was not
//! synced, a torn tail included) and restart, and power cuts strike in the middle
//! of a voter's storage work (after a random number of writes). Everything random — the faults, the
//! delays, openraft's election timeouts — is drawn from the run's seed, so a run
//! replays from its seed.
//!
//! Checked while it runs, on every voter at every step:
//! - the applied metadata logs are prefixes of one another: two voters that
//!   applied the same metadata offset hold the same image;
//! - at most one active controller per Raft term;
//! - no partition has two leaders in one leader epoch;
//! - the image's invariants hold (a fenced broker leads nothing, leaders are in
//!   the ISR, …);
//!
//! and at the end, once the network heals and every voter is back:
//! - the voters converge on one image with every broker registered and unfenced;
//! - no acknowledged write is lost (its offset is applied; an acknowledged topic
//!   exists unless a delete of it was tried; a deleted one is gone);
//! - acknowledged producer-id blocks never overlap.
//!
//! `WEIR_SIM_SEEDS=N` runs N seeds (default 1,000); `WEIR_SIM_SEED=S` replays one.
//! A failure names its seed. `WEIR_SIM_VERBOSE=1` prints what each run did,
//! `WEIR_SIM_TRACE=1` every observation.
//!
//! The controller runs openraft with `single-term-leader`: standard Raft, one
//! leader per term (openraft's default lets several candidates lead one term,
//! told apart by node id), so "one active controller per term" is a real check.
#![allow(clippy::unwrap_used)]

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use broker::controller::membership::BrokerHeartbeat;
use broker::controller::network::{CallFuture, RaftCallKind, RaftTransport, TransportError};
use broker::controller::runtime::seed_thread_rng;
use broker::controller::{Controller, NodeId, RaftTiming};
use broker_core::cluster::{BrokerRegistration, ClusterImage, ControllerRequest, IsrChoice};
use broker_core::storage::mem::{CrashMode, MemStorage};
use broker_core::storage::{File, MapMut, Storage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Simulated time of faults and client requests, before the network heals.
const CHAOS: Duration = Duration::from_secs(15);
/// Simulated time the healed cluster has to converge.
const SETTLE: Duration = Duration::from_secs(180);
const BROKER_HEARTBEAT: Duration = Duration::from_millis(100);
const SESSION_TIMEOUT: Duration = Duration::from_millis(900);

fn timing() -> RaftTiming {
    // Snapshots every 25 entries: each run builds, purges and installs them.
    RaftTiming { heartbeat_ms: 50, election_timeout_ms: (300, 600), snapshot_after_entries: 25 }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------- the network

/// Links between voters, with the faults of the moment.
struct Network {
    running: BTreeMap<NodeId, Arc<Controller>>,
    /// Directed links (from, to) that carry nothing.
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Chance that a message is lost, per mille.
    loss_per_mille: u32,
    /// Longest delay of one message.
    delay_max_ms: u64,
    rng: StdRng,
}

type SharedNetwork = Arc<Mutex<Network>>;

/// One voter's side of the network.
struct Link {
    network: SharedNetwork,
    source: NodeId,
}

impl RaftTransport for Link {
    fn call(&self, target: NodeId, _address: &str, kind: RaftCallKind, request: Vec<u8>) -> CallFuture {
        let network = self.network.clone();
        let source = self.source;
        Box::pin(async move {
            let failed = |reason: &str| TransportError { target, reason: reason.to_owned() };
            let (there, lost_there, back, lost_back) = {
                let mut network = lock(&network);
                let (delay, loss) = (network.delay_max_ms, network.loss_per_mille);
                let rng = &mut network.rng;
                let there = Duration::from_millis(rng.gen_range(0..=delay));
                let lost_there = rng.gen_range(0..1_000) < loss;
                let back = Duration::from_millis(rng.gen_range(0..=delay));
                let lost_back = rng.gen_range(0..1_000) < loss;
                (there, lost_there, back, lost_back)
            };
            tokio::time::sleep(there).await;
            let target_controller = {
                let network = lock(&network);
                match lost_there || network.cut.contains(&(source, target)) {
                    true => None,
                    false => network.running.get(&target).cloned(),
                }
            };
            let Some(target_controller) = target_controller else {
                return Err(failed("no answer"));
            };
            let answer = target_controller.handle_raft_call(kind, &request).await;
            drop(target_controller);
            tokio::time::sleep(back).await;
            if lost_back || lock(&network).cut.contains(&(target, source)) {
                return Err(failed("answer lost"));
            }
            answer.map_err(|reason| failed(&reason))
        })
    }
}

// ---------------------------------------------------------------- storage

/// A voter's storage for one life: once the power is off (it crashed) every
/// change fails, so nothing a dead voter still had in flight lands on the disk
/// its next life reads. Handles opened before a crash point at the old files.
#[derive(Debug)]
struct Powered {
    disk: MemStorage,
    on: Arc<AtomicBool>,
}

impl Powered {
    fn check(&self) -> io::Result<()> {
        match self.on.load(Ordering::Acquire) {
            true => Ok(()),
            false => Err(io::Error::other("power is off")),
        }
    }
}

impl Storage for Powered {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.check()?;
        self.disk.create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.check()?;
        self.disk.list_dir(dir)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn File>> {
        self.check()?;
        self.disk.open(path, create)
    }

    fn exists(&self, path: &Path) -> bool {
        self.disk.exists(path)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check()?;
        self.disk.remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check()?;
        self.disk.rename(from, to)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.check()?;
        self.disk.remove_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check()?;
        self.disk.sync_dir(dir)
    }

    fn map_mut(&self, path: &Path, len_bytes: usize) -> io::Result<Box<dyn MapMut>> {
        self.check()?;
        self.disk.map_mut(path, len_bytes)
    }
}

// ---------------------------------------------------------------- voters and brokers

/// A voter and the broker beside it (same id, as with `weir serve`).
struct Voter {
    id: NodeId,
    disk: MemStorage,
    life: Option<Life>,
    lives: u32,
}

struct Life {
    controller: Arc<Controller>,
    power: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

fn registration(broker_id: i32, life: u32) -> BrokerRegistration {
    BrokerRegistration {
        broker_id,
        incarnation: format!("life-{life}"),
        host: "sim".to_owned(),
        port: 9_000 + broker_id as u16,
        rack: Some(format!("rack-{}", broker_id % 2)),
    }
}

/// The broker's side of membership, as `Node` runs it: register (the answer is
/// the broker epoch), ask to be unfenced, heartbeat; ask again when fenced.
async fn broker_loop(controller: Arc<Controller>, broker_id: i32, life: u32) {
    let init = ControllerRequest::InitCluster { cluster_id: "simulated".to_owned() };
    while controller.request_until(&init, Duration::from_secs(30)).await.is_err() {}
    let register = ControllerRequest::RegisterBroker(registration(broker_id, life));
    let broker_epoch = loop {
        if let Ok(response) = controller.request_until(&register, Duration::from_secs(30)).await {
            break response.value.expect("a registration answers the broker epoch") as u64;
        }
    };
    let unfence = ControllerRequest::UnfenceBroker { broker_id, broker_epoch };
    let _ = controller.request_until(&unfence, Duration::from_secs(30)).await;
    let mut ticks = tokio::time::interval(BROKER_HEARTBEAT);
    loop {
        ticks.tick().await;
        let metadata_offset = controller.read(|image| image.applied_offset.map_or(-1, |offset| offset as i64));
        let heartbeat = BrokerHeartbeat { broker_id, broker_epoch, metadata_offset };
        match controller.heartbeat(&heartbeat).await {
            Ok(answer) if !answer.registered => panic!("broker {broker_id} lost its registration of life {life}"),
            Ok(answer) if answer.fenced => {
                let _ = controller.request(&unfence).await;
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------- what clients saw

/// Outcomes of client requests: acknowledged, or unknown (an error or no answer
/// may still have committed).
#[derive(Default)]
struct Ledger {
    /// Acknowledged topic creations.
    created: BTreeSet<String>,
    /// Topics a delete was tried for, and those acknowledged.
    delete_tried: BTreeSet<String>,
    deleted: BTreeSet<String>,
    /// Acknowledged producer-id blocks: (first id, count).
    producer_ids: Vec<(i64, i64)>,
    /// Highest metadata offset of any acknowledged write.
    last_acknowledged: Option<u64>,
}

// ---------------------------------------------------------------- checks

/// What every voter's image must agree on, gathered across the run.
#[derive(Default)]
struct Checker {
    /// Metadata offset → digest of the image at that offset.
    images: BTreeMap<u64, u64>,
    /// Raft term → the voter leading in it.
    terms: BTreeMap<u64, NodeId>,
    /// (topic id, partition, leader epoch) → leader.
    leaders: BTreeMap<(u64, u32, i32), i32>,
    /// A digest of what was observed, step by step (replays must match it).
    trace: u64,
}

fn digest(image: &ClusterImage) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(image).unwrap().hash(&mut hasher);
    hasher.finish()
}

impl Checker {
    fn observe(&mut self, voter: NodeId, controller: &Controller) -> Result<(), String> {
        let image = controller.read(ClusterImage::clone);
        image.check_invariants().map_err(|error| format!("voter {voter}: {error}"))?;
        let image_digest = digest(&image);
        if let Some(offset) = image.applied_offset {
            let first = *self.images.entry(offset).or_insert(image_digest);
            if first != image_digest {
                return Err(format!("voter {voter} applied a different metadata log up to offset {offset}"));
            }
        }
        let (term, leading) = controller.term();
        if std::env::var_os("WEIR_SIM_TRACE").is_some() {
            let active = controller.active_controller();
            let offset = image.applied_offset;
            eprintln!(
                "{:?} voter {voter}: term {term} leading {leading} active {active:?} applied {offset:?}",
                Instant::now()
            );
        }
        if leading {
            let first = *self.terms.entry(term).or_insert(voter);
            if first != voter {
                return Err(format!("voters {first} and {voter} both lead term {term}"));
            }
        }
        for topic in image.topics.values() {
            for (partition, state) in topic.partitions.iter().enumerate() {
                let key = (topic.topic_id, partition as u32, state.leader_epoch);
                let first = *self.leaders.entry(key).or_insert(state.leader);
                if first != state.leader {
                    return Err(format!(
                        "partition {partition} of topic id {} has leaders {first} and {} in leader epoch {}",
                        topic.topic_id, state.leader, state.leader_epoch
                    ));
                }
            }
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (self.trace, voter, image_digest, term, leading).hash(&mut hasher);
        self.trace = hasher.finish();
        Ok(())
    }
}

// ---------------------------------------------------------------- one run

struct Sim {
    rng: StdRng,
    network: SharedNetwork,
    voters: Vec<Voter>,
    voter_ids: BTreeMap<NodeId, String>,
    ledger: Arc<Mutex<Ledger>>,
    checker: Checker,
    next_topic: u32,
    requests: Vec<JoinHandle<()>>,
    /// Faults are over: no more power cuts are armed.
    healed: bool,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let voter_count = if rng.gen_bool(0.25) { 5 } else { 3 };
        let network = Network {
            running: BTreeMap::new(),
            cut: BTreeSet::new(),
            loss_per_mille: 0,
            delay_max_ms: 5,
            rng: StdRng::seed_from_u64(rng.gen()),
        };
        let voters: Vec<Voter> =
            (1..=voter_count).map(|id| Voter { id, disk: MemStorage::new(), life: None, lives: 0 }).collect();
        let voter_ids = (1..=voter_count).map(|id| (id, format!("voter-{id}"))).collect();
        Sim {
            rng,
            network: Arc::new(Mutex::new(network)),
            voters,
            voter_ids,
            ledger: Arc::default(),
            checker: Checker::default(),
            next_topic: 0,
            requests: Vec::new(),
            healed: false,
        }
    }

    async fn start(&mut self, index: usize) {
        let voter = &mut self.voters[index];
        assert!(voter.life.is_none());
        voter.lives += 1;
        // Now and then a power cut lands in the middle of this life's storage
        // work (between a write and its sync, a temporary file and its rename…).
        if !self.healed && self.rng.gen_bool(0.25) {
            voter.disk.fail_after(self.rng.gen_range(1..400));
        }
        let power = Arc::new(AtomicBool::new(true));
        let storage = Arc::new(Powered { disk: voter.disk.clone(), on: power.clone() });
        let link = Arc::new(Link { network: self.network.clone(), source: voter.id });
        let data_dir = Path::new("/sim").join(format!("voter-{}", voter.id));
        let opened = Controller::open(storage, &data_dir, voter.id, self.voter_ids.clone(), timing(), link).await;
        let controller = match opened {
            Ok(controller) => controller,
            // The power cut struck while it opened: it stays down, its disk rebooted.
            Err(_) if voter.disk.is_dead() => {
                voter.disk.crash(CrashMode::TornTail { seed: self.rng.gen() });
                return;
            }
            Err(error) => panic!("voter {} (life {}) did not open: {error}", voter.id, voter.lives),
        };
        let controller = Arc::new(controller);
        lock(&self.network).running.insert(voter.id, controller.clone());
        let tasks = vec![
            tokio::spawn((*controller).clone().fence_silent_brokers(SESSION_TIMEOUT)),
            tokio::spawn(broker_loop(controller.clone(), voter.id as i32, voter.lives)),
        ];
        voter.life = Some(Life { controller, power, tasks });
    }

    /// Kills a voter as `kill -9` would, then reboots its disk: what it had not
    /// synced is gone (a random part of an unsynced tail may survive).
    async fn crash(&mut self, index: usize) {
        let voter = &mut self.voters[index];
        let life = voter.life.take().expect("a running voter");
        life.power.store(false, Ordering::Release);
        voter.disk.crash(CrashMode::TornTail { seed: self.rng.gen() });
        lock(&self.network).running.remove(&voter.id);
        for task in &life.tasks {
            task.abort();
        }
        life.controller.shutdown().await;
    }

    fn running(&self) -> Vec<usize> {
        (0..self.voters.len()).filter(|index| self.voters[*index].life.is_some()).collect()
    }

    /// Voters whose power cut struck crash as a whole (their disk reboots).
    async fn reap_power_cuts(&mut self) {
        for index in 0..self.voters.len() {
            if self.voters[index].life.is_some() && self.voters[index].disk.is_dead() {
                self.crash(index).await;
            }
        }
    }

    fn observe(&mut self) -> Result<(), String> {
        for voter in &self.voters {
            if let Some(life) = &voter.life {
                self.checker.observe(voter.id, &life.controller)?;
            }
        }
        Ok(())
    }

    /// One client request through a random running voter, in a task of its own.
    fn client_request(&mut self) {
        let running = self.running();
        if running.is_empty() {
            return;
        }
        let controller =
            self.voters[running[self.rng.gen_range(0..running.len())]].life.as_ref().unwrap().controller.clone();
        let ledger = self.ledger.clone();
        let created: Vec<String> = lock(&ledger).created.iter().cloned().collect();
        let request = match self.rng.gen_range(0..10) {
            0..=4 => {
                let name = format!("topic-{}", self.next_topic);
                self.next_topic += 1;
                let replication_factor = self.rng.gen_range(1..=3);
                ControllerRequest::CreateTopic {
                    name,
                    partition_count: self.rng.gen_range(1..=4),
                    replication_factor,
                    configs: BTreeMap::new(),
                    initial_isr: if self.rng.gen_bool(0.5) { IsrChoice::AllReplicas } else { IsrChoice::LeaderOnly },
                }
            }
            5 | 6 if !created.is_empty() => {
                let name = created[self.rng.gen_range(0..created.len())].clone();
                lock(&ledger).delete_tried.insert(name.clone());
                ControllerRequest::DeleteTopic { name }
            }
            7 | 8 => ControllerRequest::AllocateProducerIds { broker_id: 1, count: self.rng.gen_range(1..=1_000) },
            _ => ControllerRequest::ElectPreferredLeaders,
        };
        self.requests.push(tokio::spawn(async move {
            let answer = tokio::time::timeout(Duration::from_secs(5), controller.request(&request)).await;
            let Ok(Ok(response)) = answer else { return };
            let mut ledger = lock(&ledger);
            ledger.last_acknowledged = ledger.last_acknowledged.max(response.last_offset);
            match request {
                ControllerRequest::CreateTopic { name, .. } => {
                    ledger.created.insert(name);
                }
                ControllerRequest::DeleteTopic { name } => {
                    ledger.deleted.insert(name);
                }
                ControllerRequest::AllocateProducerIds { count, .. } => {
                    let first = response.value.expect("an allocation answers its first id");
                    ledger.producer_ids.push((first, count));
                }
                _ => {}
            }
        }));
    }

    /// One random fault, or a change of the network's weather.
    async fn fault(&mut self) {
        let count = self.voters.len();
        let ids: Vec<NodeId> = self.voters.iter().map(|voter| voter.id).collect();
        match self.rng.gen_range(0..10) {
            0 => {
                // Cut one voter off, both ways.
                let cut = ids[self.rng.gen_range(0..count)];
                let mut network = lock(&self.network);
                for other in &ids {
                    network.cut.insert((cut, *other));
                    network.cut.insert((*other, cut));
                }
            }
            1 => {
                // One link, one way.
                let (from, to) = (ids[self.rng.gen_range(0..count)], ids[self.rng.gen_range(0..count)]);
                lock(&self.network).cut.insert((from, to));
            }
            2 | 3 => lock(&self.network).cut.clear(),
            4 | 5 => {
                let running = self.running();
                // Keep a majority able to come back quickly often enough for
                // progress, but crash down to none at times.
                if !running.is_empty() && (running.len() > count / 2 + 1 || self.rng.gen_bool(0.3)) {
                    let index = running[self.rng.gen_range(0..running.len())];
                    self.crash(index).await;
                }
            }
            6 | 7 => {
                let stopped: Vec<usize> = (0..count).filter(|index| self.voters[*index].life.is_none()).collect();
                if !stopped.is_empty() {
                    let index = stopped[self.rng.gen_range(0..stopped.len())];
                    self.start(index).await;
                }
            }
            _ => {
                let mut network = lock(&self.network);
                network.loss_per_mille = [0, 0, 50, 200, 500][self.rng.gen_range(0..5)];
                network.delay_max_ms = [1, 5, 20, 100, 400][self.rng.gen_range(0..5)];
            }
        }
    }

    async fn run(mut self) -> Result<u64, String> {
        seed_thread_rng(self.rng.gen());
        // Voters start a few milliseconds apart, as processes do (started in the
        // same instant on the paused clock, their election ticks would align).
        for index in 0..self.voters.len() {
            tokio::time::sleep(Duration::from_millis(self.rng.gen_range(0..20))).await;
            self.start(index).await;
        }
        let chaos_until = Instant::now() + CHAOS;
        while Instant::now() < chaos_until {
            tokio::time::sleep(Duration::from_millis(self.rng.gen_range(5..=150))).await;
            match self.rng.gen_range(0..10) {
                0..=4 => self.client_request(),
                5..=7 => self.fault().await,
                _ => {}
            }
            self.reap_power_cuts().await;
            self.observe()?;
        }
        // Heal: every link, every voter back, no power cut pending.
        self.healed = true;
        self.reap_power_cuts().await;
        for voter in &self.voters {
            voter.disk.fail_after(u64::MAX);
        }
        {
            let mut network = lock(&self.network);
            network.cut.clear();
            network.loss_per_mille = 0;
            network.delay_max_ms = 5;
        }
        for index in 0..self.voters.len() {
            if self.voters[index].life.is_none() {
                tokio::time::sleep(Duration::from_millis(self.rng.gen_range(0..20))).await;
                self.start(index).await;
            }
        }
        for request in std::mem::take(&mut self.requests) {
            let _ = request.await;
        }
        let settle_until = Instant::now() + SETTLE;
        loop {
            self.observe()?;
            match self.converged() {
                Ok(()) => break,
                Err(reason) if Instant::now() >= settle_until => {
                    return Err(format!("the healed cluster did not converge in {SETTLE:?}: {reason}"))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        self.check_ledger()?;
        if std::env::var_os("WEIR_SIM_VERBOSE").is_some() {
            let ledger = lock(&self.ledger);
            let image = self.voters[0].life.as_ref().unwrap().controller.read(ClusterImage::clone);
            eprintln!(
                "{} voters ({} with a snapshot), {} lives, {} terms led, applied offset {:?}; acknowledged: {} creates, {} deletes, {} id blocks; {} topics at the end",
                self.voters.len(),
                self.voters.iter().filter(|voter| voter.disk.file_paths().iter().any(|path| path.ends_with("snapshot.json"))).count(),
                self.voters.iter().map(|voter| voter.lives).sum::<u32>(),
                self.checker.terms.len(),
                image.applied_offset,
                ledger.created.len(),
                ledger.deleted.len(),
                ledger.producer_ids.len(),
                image.topics.len(),
            );
        }
        for voter in &mut self.voters {
            if let Some(life) = voter.life.take() {
                for task in &life.tasks {
                    task.abort();
                }
                life.controller.shutdown().await;
            }
        }
        Ok(self.checker.trace)
    }

    /// One active controller known to all; one image everywhere; every broker
    /// registered and unfenced.
    fn converged(&self) -> Result<(), String> {
        let controllers: Vec<&Arc<Controller>> =
            self.voters.iter().map(|voter| &voter.life.as_ref().unwrap().controller).collect();
        let leaders: BTreeSet<Option<NodeId>> =
            controllers.iter().map(|controller| controller.active_controller()).collect();
        if leaders.len() != 1 || leaders.contains(&None) {
            return Err(format!("voters know active controllers {leaders:?}"));
        }
        let images: BTreeSet<u64> = controllers.iter().map(|controller| controller.read(digest)).collect();
        if images.len() != 1 {
            return Err(format!("{} different images", images.len()));
        }
        let image = controllers[0].read(ClusterImage::clone);
        for voter in &self.voters {
            let broker_id = voter.id as i32;
            let Some(broker) = image.brokers.get(&broker_id) else {
                return Err(format!("broker {broker_id} is not registered"));
            };
            if broker.fenced || broker.registration.incarnation != format!("life-{}", voter.lives) {
                return Err(format!("broker {broker_id} is fenced or not registered in its last life"));
            }
        }
        Ok(())
    }

    fn check_ledger(&self) -> Result<(), String> {
        let image = self.voters[0].life.as_ref().unwrap().controller.read(ClusterImage::clone);
        let ledger = lock(&self.ledger);
        if ledger.last_acknowledged > image.applied_offset {
            return Err(format!(
                "an acknowledged write at metadata offset {:?} is lost (applied {:?})",
                ledger.last_acknowledged, image.applied_offset
            ));
        }
        for name in &ledger.created {
            if !ledger.delete_tried.contains(name) && !image.topics.contains_key(name) {
                return Err(format!("acknowledged topic {name} is lost"));
            }
        }
        for name in &ledger.deleted {
            if image.topics.contains_key(name) {
                return Err(format!("topic {name} was deleted, and is back"));
            }
        }
        let mut blocks = ledger.producer_ids.clone();
        blocks.sort_unstable();
        let mut end = i64::MIN;
        for (first, count) in &blocks {
            if *first < end {
                return Err(format!("producer-id block {first}+{count} overlaps the one before"));
            }
            end = first + count;
        }
        if end > image.next_producer_id {
            return Err(format!("producer ids up to {end} were handed out, the image says {}", image.next_producer_id));
        }
        Ok(())
    }
}

thread_local! {
    static PANICS: Cell<u32> = const { Cell::new(0) };
}

/// Runs one seed: its observation trace, or why it failed.
fn run_seed(seed: u64) -> Result<u64, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    PANICS.with(|panics| panics.set(0));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(Sim::new(seed).run())));
    drop(runtime);
    let outcome = outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()));
        Err(format!("panicked: {}", message.unwrap_or_default()))
    });
    // A panic inside a task (a broken invariant assertion) is caught by tokio:
    // count it as a failure too.
    match PANICS.with(Cell::get) {
        0 => outcome,
        panics => Err(format!("{panics} task(s) panicked; first outcome: {outcome:?}")),
    }
}

fn count_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|panics| panics.set(panics.get() + 1));
            previous(info);
        }));
    });
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("WEIR_SIM_SEED") {
        return vec![seed.parse().expect("WEIR_SIM_SEED is a number")];
    }
    let count: u64 = std::env::var("WEIR_SIM_SEEDS").map_or(1_000, |count| count.parse().expect("a number"));
    (0..count).collect()
}

#[test]
fn the_cluster_keeps_its_promises_under_seeded_faults() {
    count_panics();
    let seeds = seeds();
    let workers = std::thread::available_parallelism().map_or(2, |count| count.get()).min(seeds.len()).max(1);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let seeds: Vec<u64> = seeds.iter().copied().skip(worker).step_by(workers).collect();
                scope.spawn(move || {
                    seeds
                        .into_iter()
                        .filter_map(|seed| run_seed(seed).err().map(|error| format!("seed {seed}: {error}")))
                        .collect::<Vec<String>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|handle| handle.join().unwrap()).collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed (replay one with WEIR_SIM_SEED=<seed>):\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}

#[test]
fn a_seed_replays_exactly() {
    count_panics();
    for seed in [7, 1_000_003] {
        let first = run_seed(seed).unwrap_or_else(|error| panic!("seed {seed}: {error}"));
        let second = run_seed(seed).unwrap_or_else(|error| panic!("seed {seed}: {error}"));
        assert_eq!(first, second, "seed {seed} observed different runs");
    }
}
