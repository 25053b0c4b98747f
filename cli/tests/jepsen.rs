//! Jepsen-style, with real processes (its own test binary, so it never shares
//! the machine with the other cluster tests): see the test's docs.
#![allow(clippy::unwrap_used)]

mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::*;

/// The producer's `delivery.timeout.ms` in this test.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the test waits on any one client future: past its own timeouts.
const DELIVERY_BOUND: Duration = Duration::from_secs(150);

/// A small deterministic generator for the nemesis's choices (splitmix64).
struct Choices(u64);

impl Choices {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound
    }
}

/// (partition, offset, value) of a record.
type Placed = (i32, i64, String);

/// Every record of `topic` (partitions 0..count), read from the beginning up to
/// each partition's high watermark.
async fn read_everything(bootstrap: &str, topic: &str, count: i32) -> Vec<Placed> {
    let common = client::CommonConfig { bootstrap_servers: bootstrap.to_owned(), ..client::CommonConfig::default() };
    let config = client::ConsumerConfig { common, ..client::ConsumerConfig::default() };
    let consumer = client::Consumer::new(config).unwrap();
    let partitions: Vec<(String, i32)> = (0..count).map(|partition| (topic.to_owned(), partition)).collect();
    consumer.assign(&partitions).await.unwrap();
    consumer.seek_all(client::Offset::Beginning).unwrap();
    let mut ends = Vec::new();
    for partition in 0..count {
        ends.push(consumer.watermarks(topic, partition).await.unwrap().1);
    }
    let mut records = Vec::new();
    let started = Instant::now();
    while (0..count).any(|partition| consumer.position(topic, partition).unwrap_or(0) < ends[partition as usize]) {
        assert!(started.elapsed() < DEADLINE, "the final read did not reach the high watermarks {ends:?}");
        for record in consumer.poll(Duration::from_millis(500)).await.unwrap_or_default() {
            let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned();
            records.push((record.partition, record.offset, value));
        }
    }
    let _ = tokio::time::timeout(DELIVERY_BOUND, consumer.close()).await;
    records
}

/// Jepsen-style, with real processes: 3 brokers, a topic with replication
/// factor 3 and `min.insync.replicas=2`, an idempotent `acks=all` producer and
/// a group consumer running while a nemesis kill -9s partition leaders and
/// other brokers and cuts every link into a broker (its [`Proxy`]). After each
/// fault heals, the test waits until every partition has all three replicas in
/// sync again. Checker: every acknowledged record is in the log once, at the
/// offset its acknowledgement gave; offsets are dense; every record the
/// consumer read is in the final log at the offset it was read at (no consumer
/// saw a record later lost); the replicas are byte-for-byte equal.
///
/// `WEIR_JEPSEN_CYCLES` sets the number of faults (default 10);
/// `WEIR_JEPSEN_SEED` replays the nemesis's choices of a run (printed).
#[test]
fn jepsen_acknowledged_records_survive_kills_and_cut_links() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let cycles: usize = std::env::var("WEIR_JEPSEN_CYCLES").ok().and_then(|text| text.parse().ok()).unwrap_or(10);
    let seed: u64 = std::env::var("WEIR_JEPSEN_SEED").ok().and_then(|text| text.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("jepsen: {cycles} fault(s), seed {seed} (WEIR_JEPSEN_SEED={seed} replays the nemesis's choices)");
    let config = "[controller]\nbroker_heartbeat_ms = 500\nbroker_session_timeout_ms = 3000\n\n\
                  [replication]\nreplica_lag_time_max_ms = 3000\n";
    let mut cluster = Cluster::start_proxied(3, config);
    wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(())
    });
    const TOPIC: &str = "jepsen";
    const PARTITIONS: i32 = 3;
    let create = [
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "3",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ];
    let (ok, _, stderr) = weir(&cluster.address(1), &create, None);
    assert!(ok, "{stderr}");
    let bootstrap: Vec<String> = (1..=3).map(|id| cluster.address(id)).collect();
    let bootstrap = bootstrap.join(",");
    let common = client::CommonConfig { bootstrap_servers: bootstrap.clone(), ..client::CommonConfig::default() };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();

    let producing = Arc::new(AtomicBool::new(true));
    let producer = runtime.spawn({
        let (common, producing) = (common.clone(), producing.clone());
        async move {
            let config = client::ProducerConfig {
                common,
                delivery_timeout: DELIVERY_TIMEOUT,
                ..client::ProducerConfig::default()
            };
            let producer = client::Producer::new(config).unwrap();
            let (mut acknowledged, mut failed, mut sent) = (Vec::<Placed>::new(), Vec::new(), 0u64);
            // A delivery must resolve within its timeout; one that does not is a
            // client liveness failure, counted apart (it is neither acknowledged
            // nor lost) so the safety checks still run.
            let mut unresolved = Vec::new();
            while producing.load(Ordering::SeqCst) {
                let mut deliveries = Vec::new();
                for _ in 0..20 {
                    let value = format!("v{sent}");
                    sent += 1;
                    deliveries.push((value.clone(), producer.send(client::ProducerRecord::new(TOPIC, value)).await));
                }
                for (value, delivery) in deliveries {
                    match delivery {
                        Ok(delivery) => match tokio::time::timeout(DELIVERY_BOUND, delivery.wait()).await {
                            Ok(Ok(metadata)) => acknowledged.push((metadata.partition, metadata.offset, value)),
                            Ok(Err(error)) => failed.push((value, error.to_string())),
                            Err(_) => unresolved.push(value),
                        },
                        Err(error) => failed.push((value, error.to_string())),
                    }
                }
            }
            if tokio::time::timeout(DELIVERY_BOUND, producer.close()).await.is_err() {
                unresolved.push("(the producer's close)".to_owned());
            }
            (acknowledged, failed, unresolved)
        }
    });
    let consuming = Arc::new(AtomicBool::new(true));
    let consumer = runtime.spawn({
        let (common, consuming) = (common.clone(), consuming.clone());
        async move {
            let config = client::ConsumerConfig {
                common,
                group_id: Some("jepsen".to_owned()),
                auto_offset_reset: client::OffsetReset::Earliest,
                ..client::ConsumerConfig::default()
            };
            let consumer = client::Consumer::new(config).unwrap();
            while consumer.subscribe(&[TOPIC.to_owned()], None).await.is_err() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let mut seen = Vec::<Placed>::new();
            while consuming.load(Ordering::SeqCst) {
                match consumer.poll(Duration::from_millis(500)).await {
                    Ok(records) => {
                        for record in records {
                            let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default());
                            seen.push((record.partition, record.offset, value.into_owned()));
                        }
                        let _ = consumer.commit().await;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            let _ = tokio::time::timeout(DELIVERY_BOUND, consumer.close()).await;
            seen
        }
    });

    let all_in_sync = |cluster: &Cluster, via: usize| {
        (0..PARTITIONS as usize).all(|partition| {
            leader_and_isr(cluster, via, TOPIC, partition).is_some_and(|(leader, isr)| leader > 0 && isr.len() == 3)
        })
    };
    let mut choices = Choices(seed);
    for cycle in 0..cycles {
        let alive = |cluster: &Cluster| (1..=3).find(|id| cluster.brokers[id - 1].is_some()).unwrap();
        match choices.below(3) {
            0 => {
                let partition = choices.below(PARTITIONS as u64) as usize;
                let via = alive(&cluster);
                let (leader, _) = leader_and_isr(&cluster, via, TOPIC, partition).unwrap();
                let leader = leader as usize;
                eprintln!("jepsen: fault {cycle}: kill -9 broker {leader}, leader of {TOPIC}-{partition}");
                cluster.kill(leader);
                let via = alive(&cluster);
                // A new leader — or none, when the ISR had shrunk to the killed
                // leader alone (a cut just before can do that): then the
                // partition rightly waits for it (no unclean election).
                let failed_over = wait_for(&cluster, "a new leader, or a wait for the last in-sync replica", || {
                    let (next, isr) = leader_and_isr(&cluster, via, TOPIC, partition)?;
                    match next {
                        next if next > 0 && next != leader as i64 => Some(true),
                        -1 if isr == [leader as i64] => Some(false),
                        _ => None,
                    }
                });
                if !failed_over {
                    eprintln!("jepsen: {TOPIC}-{partition} waits for broker {leader}, its last in-sync replica");
                }
                cluster.restart(leader);
            }
            1 => {
                let broker = 1 + choices.below(3) as usize;
                eprintln!("jepsen: fault {cycle}: kill -9 broker {broker}");
                cluster.kill(broker);
                let via = alive(&cluster);
                // Out of every ISR, except where it was the last member (that
                // partition waits for it, leaderless).
                wait_for(&cluster, "the killed broker out of every ISR", || {
                    (0..PARTITIONS as usize)
                        .all(|partition| {
                            leader_and_isr(&cluster, via, TOPIC, partition).is_some_and(|(leader, isr)| {
                                !isr.contains(&(broker as i64)) || (leader == -1 && isr == [broker as i64])
                            })
                        })
                        .then_some(())
                });
                cluster.restart(broker);
            }
            _ => {
                let broker = 1 + choices.below(3) as usize;
                let hold = Duration::from_millis(1_000 + choices.below(4_000));
                eprintln!("jepsen: fault {cycle}: every link into broker {broker} cut for {hold:?}");
                cluster.proxies[broker - 1].cut();
                // The fault's length is the schedule itself, not a wait for an event.
                std::thread::sleep(hold);
                cluster.proxies[broker - 1].heal();
            }
        }
        wait_for(&cluster, "every replica back in sync", || all_in_sync(&cluster, 1 + cycle % 3).then_some(()));
    }

    producing.store(false, Ordering::SeqCst);
    let (acknowledged, failed, unresolved) = runtime.block_on(producer).unwrap();
    let final_log = runtime.block_on(read_everything(&bootstrap, TOPIC, PARTITIONS));
    consuming.store(false, Ordering::SeqCst);
    let seen = runtime.block_on(consumer).unwrap();
    eprintln!(
        "jepsen: {} acknowledged, {} failed, {} unresolved, {} in the log, {} read by the group consumer",
        acknowledged.len(),
        failed.len(),
        unresolved.len(),
        final_log.len(),
        seen.len()
    );
    if !unresolved.is_empty() {
        eprintln!("jepsen: CLIENT LIVENESS: deliveries not resolved within {DELIVERY_BOUND:?}: {unresolved:?}");
    }
    assert!(
        !acknowledged.is_empty(),
        "nothing was acknowledged; failures: {:?}",
        failed.iter().take(5).collect::<Vec<_>>()
    );

    // Offsets are dense, and no value is in the log twice.
    let mut by_position = std::collections::BTreeMap::new();
    let mut values = std::collections::BTreeSet::new();
    for (partition, offset, value) in &final_log {
        assert!(values.insert(value.clone()), "{value} is in the log twice (seed {seed})");
        by_position.insert((*partition, *offset), value.clone());
    }
    for partition in 0..PARTITIONS {
        let offsets: Vec<i64> = final_log.iter().filter(|(p, _, _)| *p == partition).map(|(_, o, _)| *o).collect();
        let dense: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, dense, "partition {partition}'s offsets are not dense (seed {seed})");
    }
    // Every acknowledged record is there, at the offset it was acknowledged at.
    for (partition, offset, value) in &acknowledged {
        assert_eq!(
            by_position.get(&(*partition, *offset)),
            Some(value),
            "acknowledged {value} at {partition}/{offset} is lost (seed {seed})"
        );
    }
    // No consumer read a record that was later lost.
    for (partition, offset, value) in &seen {
        assert_eq!(
            by_position.get(&(*partition, *offset)),
            Some(value),
            "the consumer read {value} at {partition}/{offset}, which is not in the log (seed {seed})"
        );
    }
    wait_for(&cluster, "every replica a byte-for-byte copy", || {
        (0..PARTITIONS as u32)
            .all(|partition| {
                let copies: Vec<Vec<u8>> = (1..=3).map(|id| replica_bytes(&cluster, id, TOPIC, partition)).collect();
                copies.iter().all(|copy| *copy == copies[0])
            })
            .then_some(())
    });
}
