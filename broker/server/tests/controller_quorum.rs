//! The controller quorum on openraft, in one process over `MemStorage`: a single
//! voter initialises once and restarts from its log and snapshots; three voters
//! elect an active controller, refuse writes elsewhere, fail over when the active
//! one is cut off, and converge on one image when it comes back.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use broker::controller::network::InProcess;
use broker::controller::{Controller, RaftTiming, SubmitError};
use broker_core::cluster::{
    BrokerRegistration, ClusterImage, ControllerError, ControllerRequest, InitialIsr, IsrChoice,
};
use broker_core::storage::mem::{CrashMode, MemStorage};

const WAIT: Duration = Duration::from_secs(60);

fn timing() -> RaftTiming {
    RaftTiming { heartbeat_ms: 50, election_timeout_ms: (300, 600), ..RaftTiming::default() }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn open(storage: &MemStorage, node_id: u64, voters: &[u64], network: &InProcess) -> Arc<Controller> {
    let voters: BTreeMap<u64, String> = voters.iter().map(|id| (*id, format!("node-{id}"))).collect();
    let transport = network.transport(node_id);
    let data_dir = Path::new("/data").join(format!("node-{node_id}"));
    let controller =
        Controller::open(Arc::new(storage.clone()), &data_dir, node_id, voters, timing(), transport).await.unwrap();
    let controller = Arc::new(controller);
    network.register(node_id, &controller);
    controller
}

fn registration(broker_id: i32) -> BrokerRegistration {
    BrokerRegistration {
        broker_id,
        incarnation: "first".to_owned(),
        host: "127.0.0.1".to_owned(),
        port: 9000,
        rack: None,
    }
}

/// Registers and unfences `broker_id` through `controller`.
async fn register(controller: &Controller, broker_id: i32) -> Result<(), SubmitError<ControllerError>> {
    controller.submit(|image| Ok::<_, ControllerError>((image.register_broker(&registration(broker_id)), ()))).await?;
    controller
        .submit(|image| {
            let epoch = image.brokers[&broker_id].epoch;
            Ok((image.unfence_broker(broker_id, epoch)?, ()))
        })
        .await
        .map(|_| ())
}

async fn create_topic(controller: &Controller, name: &str) -> Result<(), SubmitError<ControllerError>> {
    controller
        .submit(|image| Ok((image.create_topic(name, 3, 1, BTreeMap::new(), InitialIsr::AllReplicas)?, ())))
        .await
        .map(|_| ())
}

/// Retries `submit` while the controller does not know yet that it leads (just
/// elected), as clients retry `NotController`.
async fn on_new_leader<F>(mut submit: impl FnMut() -> F)
where
    F: std::future::Future<Output = Result<(), SubmitError<ControllerError>>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match submit().await {
            Ok(()) => return,
            Err(SubmitError::NotController { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(error) => panic!("{error}"),
        }
    }
}

fn image(controller: &Controller) -> ClusterImage {
    controller.read(|image| image.clone())
}

#[test]
fn a_single_voter_initialises_once_and_restarts_from_its_log_and_snapshot() {
    runtime().block_on(async {
        let storage = MemStorage::new();
        let network = InProcess::default();
        let controller = open(&storage, 1, &[1], &network).await;
        assert!(controller.wait_active(WAIT).await);
        register(&controller, 1).await.unwrap();
        create_topic(&controller, "orders").await.unwrap();
        assert_eq!(
            create_topic(&controller, "orders").await,
            Err(SubmitError::Refused(ControllerError::TopicExists("orders".to_owned())))
        );
        // Enough entries for a snapshot and a purge.
        for index in 0..1_100 {
            controller
                .submit(|image| Ok::<_, ControllerError>((image.allocate_producer_ids(1, 1_000)?, ())))
                .await
                .unwrap_or_else(|error| panic!("block {index}: {error}"));
        }
        let before = image(&controller);
        assert_eq!(before.next_producer_id, 1_100_000);
        controller.shutdown().await;
        drop(controller);
        storage.crash(CrashMode::TornTail { seed: 5 });
        assert!(storage.file_paths().iter().any(|path| path.ends_with("snapshot.json")), "a snapshot was taken");

        let network = InProcess::default();
        let controller = open(&storage, 1, &[1], &network).await;
        assert!(controller.wait_active(WAIT).await);
        // Re-applied from the snapshot and the log after it, no new quorum.
        let mut applied = controller.applied().applied_index.clone();
        let committed_index = applied.borrow().to_owned();
        assert!(committed_index > 0);
        controller.submit(|image| Ok::<_, ControllerError>((image.allocate_producer_ids(1, 1)?, ()))).await.unwrap();
        applied.wait_for(|index| *index > committed_index).await.unwrap();
        let after = image(&controller);
        assert_eq!(after.topics, before.topics);
        assert_eq!(after.next_producer_id, before.next_producer_id + 1);
        assert_eq!(controller.voters(), BTreeSet::from([1]));
        controller.shutdown().await;
    });
}

async fn wait_for_leader(controllers: &[Arc<Controller>], except: Option<u64>) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        for controller in controllers {
            let leader = controller.active_controller();
            if let Some(leader) = leader.filter(|leader| Some(*leader) != except) {
                if controllers.iter().filter(|c| c.active_controller() == Some(leader)).count() >= 2 {
                    return leader;
                }
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no active controller elected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn three_voters_fail_over_and_converge() {
    runtime().block_on(async {
        let network = InProcess::default();
        let storages: Vec<MemStorage> = (0..3).map(|_| MemStorage::new()).collect();
        let mut controllers = Vec::new();
        for (index, storage) in storages.iter().enumerate() {
            controllers.push(open(storage, index as u64 + 1, &[1, 2, 3], &network).await);
        }
        wait_for_leader(&controllers, None).await;
        // Right after the quorum forms, leadership may still move once: submit
        // through whichever voter leads, retrying `NotController` as clients do.
        for broker_id in 1..=3 {
            on_new_leader(|| async {
                let leader = wait_for_leader(&controllers, None).await;
                register(&controllers[leader as usize - 1], broker_id).await
            })
            .await;
        }
        on_new_leader(|| async {
            let leader = wait_for_leader(&controllers, None).await;
            create_topic(&controllers[leader as usize - 1], "before").await
        })
        .await;
        let leader = wait_for_leader(&controllers, None).await;
        let active = &controllers[leader as usize - 1];
        let follower = controllers.iter().find(|c| !Arc::ptr_eq(c, active)).unwrap();
        let refused = create_topic(follower, "elsewhere").await;
        assert!(matches!(refused, Err(SubmitError::NotController { .. })), "{refused:?}");

        // Cut the active controller off: the other two elect one of themselves.
        network.isolate(leader, true);
        let others: Vec<Arc<Controller>> = controllers.iter().filter(|c| !Arc::ptr_eq(c, active)).cloned().collect();
        let new_leader = wait_for_leader(&others, Some(leader)).await;
        assert_ne!(new_leader, leader);
        let new_active = &controllers[new_leader as usize - 1];
        on_new_leader(|| create_topic(new_active, "after")).await;
        // The old one cannot commit alone.
        let stranded = tokio::time::timeout(Duration::from_secs(2), create_topic(active, "lost")).await;
        assert!(!matches!(stranded, Ok(Ok(()))), "a cut-off controller committed: {stranded:?}");

        network.isolate(leader, false);
        let expected = image(new_active);
        let deadline = tokio::time::Instant::now() + WAIT;
        for controller in &controllers {
            while controller.read(|image| image.topics.clone()) != expected.topics {
                assert!(tokio::time::Instant::now() < deadline, "voters did not converge");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        assert!(expected.topics.contains_key("before") && expected.topics.contains_key("after"));
        assert!(!expected.topics.contains_key("lost") && !expected.topics.contains_key("elsewhere"));

        // A request made on a voter that does not lead is forwarded to the one that does.
        let leader = wait_for_leader(&controllers, None).await;
        let follower =
            controllers.iter().find(|c| c.active_controller() == Some(leader) && c.node_id() != leader).unwrap();
        let request = ControllerRequest::CreateTopic {
            name: "forwarded".to_owned(),
            partition_count: 2,
            replication_factor: 2,
            configs: BTreeMap::new(),
            initial_isr: IsrChoice::LeaderOnly,
        };
        follower.request_until(&request, WAIT).await.unwrap();
        let created = controllers[leader as usize - 1].read(|image| image.topics["forwarded"].clone());
        assert!(created.partitions.iter().all(|state| state.isr == [state.leader] && state.replicas.len() == 2));
        assert_eq!(
            follower.request_until(&request, WAIT).await,
            Err(SubmitError::Refused(ControllerError::TopicExists("forwarded".to_owned())))
        );
        for controller in &controllers {
            controller.shutdown().await;
        }
    });
}

/// A controller whose storage fails stops, and says why: the broker stops
/// serving on it (`Server::serve` ends with `ControllerFailed`).
#[test]
fn a_controller_whose_storage_fails_reports_it() {
    runtime().block_on(async {
        let storage = MemStorage::new();
        let network = InProcess::default();
        let controller = open(&storage, 1, &[1], &network).await;
        assert!(controller.wait_active(WAIT).await);
        register(&controller, 1).await.unwrap();
        storage.fail_after(0);
        let refused = create_topic(&controller, "lost").await;
        assert!(refused.is_err(), "{refused:?}");
        let error = tokio::time::timeout(WAIT, controller.failed()).await.expect("the failure is reported");
        assert!(error.contains("power cut"), "{error}");
    });
}
