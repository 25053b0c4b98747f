//! A three-broker cluster of real `weir serve` processes started with the README's
//! flags (`--node-id`, `--controller-voters`): a 12-partition topic spread over
//! the brokers round-trips through the CLI from any broker; `kill -9` of the
//! active controller elects a new one and admin works again; the killed broker's
//! partitions come back with every record when it restarts; a consumer group's
//! members on different brokers split the partitions; brokers that are not voters
//! join, lead partitions, forward admin requests and rejoin after `kill -9`; a
//! plugin uploaded to one broker and attached through another runs on a third.
//!
//! Waits are on events (log lines, the CLI's answers) with generous deadlines.
#![allow(clippy::unwrap_used)]

mod cluster_support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use cluster_support::*;
use serde_json::Value;

#[test]
fn three_brokers_spread_a_topic_fail_over_and_bring_every_record_back() {
    let mut cluster = Cluster::start(3);
    let status = wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3 && status["active_controller"].as_i64()? > 0).then_some(status)
    });
    assert_eq!(status["voters"], serde_json::json!([1, 2, 3]));

    let (ok, _, stderr) = weir(&cluster.address(2), &["topic", "create", "orders", "--partitions", "12"], None);
    assert!(ok, "{stderr}");
    // Broker 3 learns of the topic from the metadata log, a moment later.
    let description = wait_for(&cluster, "the topic known to broker 3", || {
        json(&cluster.address(3), &["topic", "describe", "orders"])
    });
    let mut leaders: Vec<i64> =
        description["partitions"].as_array().unwrap().iter().map(|p| p["leader"].as_i64().unwrap()).collect();
    leaders.sort_unstable();
    leaders.dedup();
    assert_eq!(leaders, [1, 2, 3], "leadership spreads over the brokers: {description}");

    let input: String = (0..1200).map(|index| format!("key-{index},value-{index}\n")).collect();
    let (ok, stdout, stderr) = weir(&cluster.address(1), &["produce", "orders", "--key-separator", ","], Some(&input));
    assert!(ok && stdout.contains("1200 record(s) acknowledged"), "{stdout}{stderr}");
    let mut read = consume_all(&cluster.address(2), "orders");
    read.sort();
    let mut expected: Vec<String> = (0..1200).map(|index| format!("value-{index}")).collect();
    expected.sort();
    assert_eq!(read, expected);

    // kill -9 the active controller: another voter takes over and admin works.
    let active = status["active_controller"].as_i64().unwrap() as usize;
    let survivor = if active == 1 { 2 } else { 1 };
    let killed_at = Instant::now();
    cluster.kill(active);
    wait_for(&cluster, "a new active controller", || {
        let status = json(&cluster.address(survivor), &["cluster", "status"])?;
        let controller = status["active_controller"].as_i64()?;
        (controller > 0 && controller as usize != active).then_some(())
    });
    wait_for(&cluster, "admin after the failover", || {
        weir(&cluster.address(survivor), &["topic", "create", "after-failover"], None).0.then_some(())
    });
    eprintln!("controller failover, kill to admin working: {:?}", killed_at.elapsed());
    // The dead broker is fenced: its partitions show no leader.
    wait_for(&cluster, "the killed broker fenced", || {
        let description = json(&cluster.address(survivor), &["topic", "describe", "orders"])?;
        let leaders: Vec<i64> =
            description["partitions"].as_array()?.iter().map(|p| p["leader"].as_i64().unwrap_or(0)).collect();
        (leaders.contains(&-1) && !leaders.contains(&(active as i64))).then_some(())
    });

    // Back again: its partitions return with every record.
    cluster.restart(active);
    wait_for(&cluster, "every partition led again", || {
        let description = json(&cluster.address(active), &["topic", "describe", "orders"])?;
        description["partitions"].as_array()?.iter().all(|p| p["leader"].as_i64() > Some(0)).then_some(())
    });
    let mut read = consume_all(&cluster.address(active), "orders");
    read.sort();
    assert_eq!(read, expected, "records after the restart");
    // The returning broker took its single-replica partitions back when
    // unfenced; the replicated `__consumer_offsets` partitions it led failed
    // over to in-sync followers and stay there until a preferred-leader
    // election moves them back. A second election moves none.
    let elected = json(&cluster.address(survivor), &["cluster", "elect-leaders"]).unwrap();
    assert!(elected["moved"].as_u64() >= Some(1), "{elected}");
    let elected = json(&cluster.address(survivor), &["cluster", "elect-leaders"]).unwrap();
    assert_eq!(elected["moved"], 0, "{elected}");
    let description = json(&cluster.address(survivor), &["topic", "describe", "orders"]).unwrap();
    for partition in description["partitions"].as_array().unwrap() {
        assert_eq!(partition["leader"], partition["replicas"][0], "{description}");
    }
}

#[test]
fn group_members_on_different_brokers_split_the_partitions() {
    let cluster = Cluster::start(3);
    wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(())
    });
    let (ok, _, stderr) = weir(&cluster.address(1), &["topic", "create", "events", "--partitions", "6"], None);
    assert!(ok, "{stderr}");
    let members: Vec<std::process::Child> = [1, 3]
        .iter()
        .map(|id| {
            Command::new(env!("CARGO_BIN_EXE_weir"))
                .args(["consume", "events", "--group", "split", "--offset", "beginning", "--timeout-ms", "20000"])
                .args(["--brokers", &cluster.address(*id)])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Both members own partitions before anything is produced.
    wait_for(&cluster, "two members sharing the partitions", || {
        let group = json(&cluster.address(2), &["group", "describe", "split"])?;
        let members = group["members"].as_array()?;
        let owned: Vec<usize> = members.iter().map(|m| m["assigned"].as_array().map_or(0, Vec::len)).collect();
        (owned.len() == 2 && owned.iter().all(|count| *count > 0) && owned.iter().sum::<usize>() == 6).then_some(())
    });
    let input: String = (0..600).map(|index| format!("k{index},v{index}\n")).collect();
    let (ok, stdout, stderr) = weir(&cluster.address(2), &["produce", "events", "--key-separator", ","], Some(&input));
    assert!(ok, "{stdout}{stderr}");
    let outputs: Vec<Vec<String>> = members
        .into_iter()
        .map(|member| {
            let output = member.wait_with_output().unwrap();
            String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect()
        })
        .collect();
    assert!(
        outputs.iter().all(|read| !read.is_empty()),
        "both members read: {:?}",
        outputs.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let mut read: Vec<String> = outputs.concat();
    read.sort();
    let mut expected: Vec<String> = (0..600).map(|index| format!("v{index}")).collect();
    expected.sort();
    assert_eq!(read, expected, "each record once, across the two members");
}

#[test]
fn brokers_that_are_not_voters_join_lead_partitions_and_rejoin_after_a_kill() {
    // Broker 1 is the quorum; brokers 2 and 3 follow the metadata log.
    let mut cluster = Cluster::start_with_voters(3, 1);
    let status = wait_for(&cluster, "three active brokers, seen from a learner", || {
        let status = json(&cluster.address(3), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(status)
    });
    assert_eq!(status["voters"], serde_json::json!([1]), "{status}");
    assert_eq!(status["active_controller"], 1, "{status}");

    // Created through a learner (forwarded to the active controller), led by all three.
    let (ok, _, stderr) = weir(&cluster.address(3), &["topic", "create", "spread", "--partitions", "6"], None);
    assert!(ok, "{stderr}");
    let description = wait_for(&cluster, "the topic known to broker 2", || {
        json(&cluster.address(2), &["topic", "describe", "spread"])
    });
    let leaders: std::collections::BTreeSet<i64> =
        description["partitions"].as_array().unwrap().iter().map(|p| p["leader"].as_i64().unwrap()).collect();
    assert_eq!(leaders, [1, 2, 3].into(), "{description}");
    let input: String = (0..600).map(|index| format!("k{index},v{index}\n")).collect();
    let (ok, stdout, stderr) = weir(&cluster.address(2), &["produce", "spread", "--key-separator", ","], Some(&input));
    assert!(ok, "{stdout}{stderr}");
    let mut expected: Vec<String> = (0..600).map(|index| format!("v{index}")).collect();
    expected.sort();
    let mut read = consume_all(&cluster.address(3), "spread");
    read.sort();
    assert_eq!(read, expected);

    // kill -9 a learner: its partitions lose their leader, then come back with
    // every record when it restarts and rejoins.
    cluster.kill(3);
    wait_for(&cluster, "the killed learner fenced", || {
        let description = json(&cluster.address(1), &["topic", "describe", "spread"])?;
        let leaders: Vec<i64> =
            description["partitions"].as_array()?.iter().map(|p| p["leader"].as_i64().unwrap_or(0)).collect();
        (leaders.contains(&-1) && !leaders.contains(&3)).then_some(())
    });
    cluster.restart(3);
    wait_for(&cluster, "every partition led again", || {
        let description = json(&cluster.address(3), &["topic", "describe", "spread"])?;
        description["partitions"].as_array()?.iter().all(|p| p["leader"].as_i64() > Some(0)).then_some(())
    });
    let mut read = consume_all(&cluster.address(1), "spread");
    read.sort();
    assert_eq!(read, expected, "records after the learner's restart");
    let (ok, _, stderr) = weir(&cluster.address(3), &["topic", "create", "after-rejoin"], None);
    assert!(ok, "{stderr}");
}

fn plugin_file(name: &str) -> String {
    let dir = match std::env::var_os("WEIR_PLUGIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/wasm32-wasip2/release"),
    };
    let path = dir.join(format!("{name}.wasm"));
    assert!(path.exists(), "{}: build the plugins first: ./scripts/build-plugins.sh", path.display());
    path.to_string_lossy().into_owned()
}

#[test]
fn a_plugin_uploaded_to_one_broker_runs_on_the_others() {
    let cluster = Cluster::start(3);
    wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(())
    });
    let (ok, _, stderr) = weir(&cluster.address(1), &["topic", "create", "checked", "--partitions", "3"], None);
    assert!(ok, "{stderr}");
    // Uploaded to broker 1, attached through broker 2.
    let (ok, _, stderr) =
        weir(&cluster.address(1), &["plugin", "upload", &plugin_file("json_validator"), "--name", "json"], None);
    assert!(ok, "{stderr}");
    // Metadata reaches each broker a moment apart (as in Kafka): wait until
    // broker 2 knows the plugin.
    wait_for(&cluster, "the plugin listed by broker 2", || {
        let (ok, stdout, _) = weir(&cluster.address(2), &["plugin", "list", "--format", "json"], None);
        (ok && stdout.contains("\"json\"")).then_some(())
    });
    let (ok, _, stderr) = weir(&cluster.address(2), &["topic", "add-interceptor", "checked", "--plugin", "json"], None);
    assert!(ok, "{stderr}");
    // Broker 3 fetched the bytes from broker 1 and runs its own instance.
    wait_for(&cluster, "the interceptor running on broker 3", || {
        let attachment = json(&cluster.address(3), &["topic", "interceptors", "checked"])?;
        (attachment["status"] == "running").then_some(())
    });
    let description = json(&cluster.address(3), &["topic", "describe", "checked"]).unwrap();
    for partition in description["partitions"].as_array().unwrap() {
        let (index, leader) = (partition["partition"].as_i64().unwrap(), partition["leader"].as_i64().unwrap());
        let index = index.to_string();
        let refused = weir(&cluster.address(1), &["produce", "checked", "--partition", &index], Some("not json\n"));
        assert!(!refused.0 && refused.2.contains("invalid JSON"), "partition {index} led by {leader}: {refused:?}");
        let accepted = weir(&cluster.address(1), &["produce", "checked", "--partition", &index], Some("{\"ok\":1}\n"));
        assert!(accepted.0, "partition {index} led by {leader}: {accepted:?}");
    }

    // A partitioner uploaded to broker 2 and set through broker 3 places the
    // records of a producer bootstrapped from broker 1.
    let (ok, _, stderr) = weir(&cluster.address(1), &["topic", "create", "orders", "--partitions", "3"], None);
    assert!(ok, "{stderr}");
    let upload = ["plugin", "upload", &plugin_file("region_partitioner"), "--name", "regions"];
    let (ok, _, stderr) = weir(&cluster.address(2), &upload, None);
    assert!(ok, "{stderr}");
    wait_for(&cluster, "the partitioner listed by broker 3", || {
        let (ok, stdout, _) = weir(&cluster.address(3), &["plugin", "list", "--format", "json"], None);
        (ok && stdout.contains("\"regions\"")).then_some(())
    });
    let set = ["topic", "set-partitioner", "orders", "--plugin", "regions", "--config", "region.eu=2"];
    let (ok, _, stderr) = weir(&cluster.address(3), &set, None);
    assert!(ok, "{stderr}");
    wait_for(&cluster, "broker 1 naming the partitioner", || {
        let attachment = json(&cluster.address(1), &["topic", "interceptors", "orders"])?;
        (attachment["plugin"] == "regions").then_some(())
    });
    let (ok, stdout, stderr) =
        weir(&cluster.address(1), &["produce", "orders", "--key-separator", " "], Some("eu:1 first\neu:2 second\n"));
    assert!(ok, "{stdout}{stderr}");
    let consume = ["consume", "orders", "--partition", "2", "--offset", "beginning", "--timeout-ms", "3000"];
    let (ok, stdout, stderr) = weir(&cluster.address(3), &consume, None);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["first", "second"], "both eu keys in partition 2");
    // Removed everywhere: detached through broker 3, deleted through broker 1.
    let (ok, _, stderr) =
        weir(&cluster.address(3), &["topic", "remove-interceptor", "checked", "--plugin", "json"], None);
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = weir(&cluster.address(1), &["plugin", "delete", "json"], None);
    assert!(ok, "{stderr}");
    wait_for(&cluster, "the plugin gone from broker 3", || {
        let (ok, stdout, _) = weir(&cluster.address(3), &["plugin", "list", "--format", "json"], None);
        (ok && !stdout.contains("\"json\"")).then_some(())
    });
}

/// Deploys `route_transform` as `route`: events with `region` `eu` to `eu`,
/// the rest to `elsewhere`, from the earliest input.
const ROUTE_DEPLOY: [&str; 17] = [
    "transform",
    "deploy",
    "route",
    "--plugin",
    "route",
    "--input",
    "events",
    "--output",
    "eu",
    "--output",
    "elsewhere",
    "--from",
    "earliest",
    "--config",
    "field=region",
    "--config",
    "match=eu",
];

/// The `n` of every record the route transform wrote (read through broker
/// `via`), sorted, each checked to be in the output its region says.
fn routed(cluster: &Cluster, via: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    for topic in ["eu", "elsewhere"] {
        for line in consume_all(&cluster.address(via), topic) {
            let value: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(value["region"] == "eu", topic == "eu", "{topic}: {line}");
            seen.push(value["n"].as_u64().unwrap());
        }
    }
    seen.sort_unstable();
    seen
}

/// Every partition of transform `name` caught up (as seen through `address`),
/// and its state `running`.
fn transform_caught_up(address: &str, name: &str) -> Option<()> {
    let status = json(address, &["transform", "describe", name])?;
    let partitions = status["partitions"].as_array()?;
    let caught_up = partitions.iter().all(|partition| partition["lag"] == 0);
    (caught_up && status["state"] == "running").then_some(())
}

#[test]
fn a_transform_runs_on_the_leader_of_each_input_partition_and_survives_a_kill() {
    let mut cluster = Cluster::start(3);
    wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(())
    });
    for (topic, partitions) in [("events", "6"), ("eu", "1"), ("elsewhere", "3")] {
        let (ok, _, stderr) = weir(&cluster.address(1), &["topic", "create", topic, "--partitions", partitions], None);
        assert!(ok, "{stderr}");
    }
    let upload = ["plugin", "upload", &plugin_file("route_transform"), "--name", "route"];
    let (ok, _, stderr) = weir(&cluster.address(2), &upload, None);
    assert!(ok, "{stderr}");
    let regions = ["eu", "us", "ap"];
    let input: String = (0..3000).map(|n| format!("{{\"n\":{n},\"region\":\"{}\"}}\n", regions[n % 3])).collect();
    let (ok, stdout, stderr) = weir(&cluster.address(1), &["produce", "events"], Some(&input));
    assert!(ok && stdout.contains("3000 record(s) acknowledged"), "{stdout}{stderr}");
    wait_for(&cluster, "the plugin listed by broker 3", || {
        let (ok, stdout, _) = weir(&cluster.address(3), &["plugin", "list", "--format", "json"], None);
        (ok && stdout.contains("\"route\"")).then_some(())
    });
    // Deployed through broker 3: the leaders of the six input partitions (all
    // three brokers) run them, writing to output partitions led anywhere.
    let deploy = ROUTE_DEPLOY;
    let (ok, _, stderr) = weir(&cluster.address(3), &deploy, None);
    assert!(ok, "{stderr}");
    // A deployment is one per name, cluster-wide.
    let (ok, _, stderr) = weir(&cluster.address(1), &deploy, None);
    assert!(!ok && stderr.contains("exists"), "{stderr}");
    wait_for(&cluster, "some records transformed", || {
        let status = json(&cluster.address(1), &["transform", "describe", "route"])?;
        let processed: u64 = status["partitions"].as_array()?.iter().filter_map(|p| p["processed"].as_u64()).sum();
        (processed > 0).then_some(())
    });
    // kill -9 of a broker, most likely mid-stream: its input partitions wait
    // for it (one replica each), then carry on from their checkpoints.
    cluster.kill(2);
    cluster.restart(2);
    for id in 1..=3 {
        wait_for(&cluster, &format!("the transform caught up, seen from broker {id}"), || {
            transform_caught_up(&cluster.address(id), "route")
        });
    }
    assert_eq!(routed(&cluster, 3), (0..3000).collect::<Vec<u64>>(), "every input once, none twice");

    // Paused through one broker, paused everywhere; the plugin it runs stays.
    let (ok, _, stderr) = weir(&cluster.address(1), &["transform", "pause", "route"], None);
    assert!(ok, "{stderr}");
    wait_for(&cluster, "paused, seen from broker 3", || {
        let status = json(&cluster.address(3), &["transform", "describe", "route"])?;
        (status["state"] == "paused").then_some(())
    });
    let (ok, _, stderr) = weir(&cluster.address(2), &["plugin", "delete", "route"], None);
    assert!(!ok && stderr.contains("runs in transform"), "{stderr}");
    let (ok, _, stderr) = weir(&cluster.address(3), &["topic", "delete", "eu"], None);
    assert!(!ok && stderr.contains("delete them first"), "{stderr}");
    let (ok, _, stderr) = weir(&cluster.address(2), &["transform", "delete", "route"], None);
    assert!(ok, "{stderr}");
    wait_for(&cluster, "the transform gone from broker 1", || {
        let (ok, stdout, _) = weir(&cluster.address(1), &["transform", "list", "--format", "json"], None);
        (ok && !stdout.contains("\"route\"")).then_some(())
    });
    let (ok, _, stderr) = weir(&cluster.address(3), &["topic", "delete", "eu"], None);
    assert!(ok, "{stderr}");
}

/// Transform checkpoints are replicated: when the leader of an input
/// partition is killed, the task on the new leader resumes from the last
/// committed checkpoint (not from the start), and the outputs hold every input
/// record once. Without replicated checkpoints the new leader's task starts
/// over, and its outputs' idempotent sequences no longer line up.
#[test]
fn a_transform_stays_exactly_once_when_the_leaders_of_its_input_are_killed() {
    let mut cluster = Cluster::start(3);
    wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(())
    });
    for (topic, partitions) in [("events", "3"), ("eu", "1"), ("elsewhere", "2")] {
        let create = [
            "topic",
            "create",
            topic,
            "--partitions",
            partitions,
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ];
        let (ok, _, stderr) = weir(&cluster.address(1), &create, None);
        assert!(ok, "{stderr}");
    }
    let upload = ["plugin", "upload", &plugin_file("route_transform"), "--name", "route"];
    let (ok, _, stderr) = weir(&cluster.address(1), &upload, None);
    assert!(ok, "{stderr}");
    let regions = ["eu", "us", "ap"];
    let mut produced = 0;
    let mut produce = |cluster: &Cluster, via: usize, count: usize| {
        let input: String = (produced..produced + count)
            .map(|n| format!("{{\"n\":{n},\"region\":\"{}\"}}\n", regions[n % 3]))
            .collect();
        let (ok, stdout, stderr) = weir(&cluster.address(via), &["produce", "events", "--acks", "all"], Some(&input));
        assert!(ok && stdout.contains(&format!("{count} record(s) acknowledged")), "{stdout}{stderr}");
        produced += count;
    };
    produce(&cluster, 1, 3000);
    let deploy = ROUTE_DEPLOY;
    let (ok, _, stderr) = weir(&cluster.address(2), &deploy, None);
    assert!(ok, "{stderr}");
    for cycle in 0..3 {
        let via = 1 + cycle % 3;
        wait_for(&cluster, "the transform caught up", || transform_caught_up(&cluster.address(via), "route"));
        // More input, then kill -9 the leader of events-0 while its task
        // works through it.
        let (leader, _) =
            wait_for(&cluster, "a leader", || leader_and_isr(&cluster, via, "events", 0).filter(|(l, _)| *l > 0));
        let leader = leader as usize;
        let other = (1..=3).find(|id| *id != leader).unwrap();
        produce(&cluster, other, 3000);
        cluster.kill(leader);
        wait_for(&cluster, "a new leader of events-0", || {
            leader_and_isr(&cluster, other, "events", 0).filter(|(next, _)| *next > 0 && *next != leader as i64)
        });
        produce(&cluster, other, 1000);
        cluster.restart(leader);
        wait_for(&cluster, "every replica of the input back in sync", || {
            let synced = (0..3).all(|partition| {
                leader_and_isr(&cluster, other, "events", partition).is_some_and(|(_, isr)| isr.len() == 3)
            });
            synced.then_some(())
        });
    }
    for id in 1..=3 {
        wait_for(&cluster, &format!("the transform caught up, seen from broker {id}"), || {
            transform_caught_up(&cluster.address(id), "route")
        });
    }
    let seen = routed(&cluster, 3);
    assert_eq!(seen, (0..produced as u64).collect::<Vec<u64>>(), "every input once, none twice\n{}", cluster.logs());

    // The checkpoints are a group's offsets: readable, not writable by clients.
    let groups = json(&cluster.address(1), &["group", "list"]).unwrap();
    let group = groups.as_array().unwrap().iter().find_map(|group| {
        let id = group["group_id"].as_str()?;
        id.starts_with("__transform.route.").then(|| id.to_owned())
    });
    let group = group.unwrap_or_else(|| panic!("no checkpoint group in {groups}"));
    let description = json(&cluster.address(2), &["group", "describe", &group]).unwrap();
    assert!(description.to_string().contains("\"events\""), "{description}");
    let reset = ["group", "reset-offsets", &group, "--topic", "events", "--to-earliest"];
    let (ok, _, stderr) = weir(&cluster.address(3), &reset, None);
    assert!(!ok && stderr.contains("transform checkpoints"), "{stderr}");
    // Deleting the deployment deletes its checkpoints.
    let (ok, _, stderr) = weir(&cluster.address(2), &["transform", "delete", "route"], None);
    assert!(ok, "{stderr}");
    wait_for(&cluster, "the checkpoint group gone", || {
        let groups = json(&cluster.address(1), &["group", "list"])?;
        (!groups.to_string().contains("__transform.route.")).then_some(())
    });
}

#[test]
fn followers_copy_their_leaders_logs_byte_for_byte_and_catch_up_after_a_kill() {
    let mut cluster = Cluster::start(3);
    wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(())
    });
    let create = ["topic", "create", "copied", "--partitions", "3", "--replication-factor", "3"];
    let (ok, _, stderr) = weir(&cluster.address(1), &create, None);
    assert!(ok, "{stderr}");
    let produce = |address: String, first: usize, partition: Option<&str>| {
        let input: String = (first..first + 1500).map(|n| format!("key-{n},value-{n}\n")).collect();
        let mut args = vec!["produce", "copied", "--key-separator", ","];
        args.extend(partition.map(|partition| ["--partition", partition]).into_iter().flatten());
        let (ok, stdout, stderr) = weir(&address, &args, Some(&input));
        assert!(ok && stdout.contains("1500 record(s) acknowledged"), "{stdout}{stderr}");
    };
    let all_copied = |cluster: &Cluster| {
        (0..3).all(|partition| {
            let copies: Vec<Vec<u8>> = (1..=3).map(|id| replica_bytes(cluster, id, "copied", partition)).collect();
            !copies[0].is_empty() && copies.iter().all(|copy| *copy == copies[0])
        })
    };
    produce(cluster.address(1), 0, None);
    wait_for(&cluster, "every replica a byte-for-byte copy", || all_copied(&cluster).then_some(()));
    // A follower killed while records keep coming catches up when it returns
    // (to partition 0, which it does not lead: until ISRs grow, a partition
    // whose leader is down waits for it).
    let description = json(&cluster.address(1), &["topic", "describe", "copied"]).unwrap();
    let leader_of_0 = description["partitions"][0]["leader"].as_i64().unwrap() as usize;
    let follower = (1..=3).find(|id| *id != leader_of_0).unwrap();
    cluster.kill(follower);
    let producer = (1..=3).find(|id| *id != follower).unwrap();
    produce(cluster.address(producer), 1500, Some("0"));
    cluster.restart(follower);
    produce(cluster.address(producer), 3000, Some("0"));
    wait_for(&cluster, "the returning follower caught up", || all_copied(&cluster).then_some(()));
    let mut read = consume_all(&cluster.address(follower), "copied");
    read.sort();
    let mut expected: Vec<String> = (0..4500).map(|n| format!("value-{n}")).collect();
    expected.sort();
    assert_eq!(read, expected);
}

#[test]
fn acknowledged_records_survive_leader_kills_and_the_killed_leader_rejoins_the_isr() {
    let mut cluster = Cluster::start(3);
    wait_for(&cluster, "three active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 3).then_some(())
    });
    let create = ["topic", "create", "ledger", "--replication-factor", "3", "--config", "min.insync.replicas=2"];
    let (ok, _, stderr) = weir(&cluster.address(1), &create, None);
    assert!(ok, "{stderr}");
    let (_, isr) = leader_and_isr(&cluster, 1, "ledger", 0).unwrap();
    assert_eq!(isr.len(), 3, "a new topic starts with every replica in sync");

    let mut produced = 0;
    let mut produce = |cluster: &Cluster, via: usize| {
        let input: String = (produced..produced + 300).map(|n| format!("value-{n}\n")).collect();
        let (ok, stdout, stderr) = weir(&cluster.address(via), &["produce", "ledger", "--acks", "all"], Some(&input));
        assert!(ok && stdout.contains("300 record(s) acknowledged"), "{stdout}{stderr}\n{}", cluster.logs());
        produced += 300;
    };
    for cycle in 0..3 {
        let (leader, _) = wait_for(&cluster, "a leader", || {
            leader_and_isr(&cluster, 1 + cycle % 3, "ledger", 0).filter(|(leader, _)| *leader > 0)
        });
        let leader = leader as usize;
        let other = (1..=3).find(|id| *id != leader).unwrap();
        produce(&cluster, other);
        // kill -9 the leader: an in-sync follower takes over with every
        // acknowledged record, and takes more at once (two replicas are left,
        // min.insync.replicas=2).
        cluster.kill(leader);
        let (next, isr) = wait_for(&cluster, "a new leader from the ISR", || {
            leader_and_isr(&cluster, other, "ledger", 0).filter(|(next, _)| *next > 0 && *next != leader as i64)
        });
        assert!(!isr.contains(&(leader as i64)), "the killed leader left the ISR: {isr:?}");
        let status = json(&cluster.address(other), &["cluster", "status"]).unwrap();
        let under_replicated = status["partitions"]["under_replicated"].as_array().unwrap();
        assert!(under_replicated.contains(&Value::from("ledger-0")), "{status}");
        produce(&cluster, next as usize);
        // Back again: it truncates what it alone had, copies the rest, and
        // rejoins the ISR.
        cluster.restart(leader);
        wait_for(&cluster, "the killed leader back in the ISR", || {
            let (_, isr) = leader_and_isr(&cluster, other, "ledger", 0)?;
            (isr.len() == 3).then_some(())
        });
    }
    let status = json(&cluster.address(1), &["cluster", "status"]).unwrap();
    assert!(!status["partitions"]["under_replicated"].as_array().unwrap().contains(&Value::from("ledger-0")));
    assert_eq!(status["partitions"]["offline"], serde_json::json!([]), "{status}");
    let expected: Vec<String> = (0..produced).map(|n| format!("value-{n}")).collect();
    for id in 1..=3 {
        assert_eq!(consume_all(&cluster.address(id), "ledger"), expected, "read through broker {id}");
    }
    wait_for(&cluster, "every replica a byte-for-byte copy", || {
        let copies: Vec<Vec<u8>> = (1..=3).map(|id| replica_bytes(&cluster, id, "ledger", 0)).collect();
        copies.iter().all(|copy| *copy == copies[0]).then_some(())
    });
}

#[test]
fn an_offline_partition_waits_for_its_isr_unless_unclean_elections_are_allowed() {
    // Brokers 1-3 are the quorum, broker 4 only a broker: two replicas can go
    // down while the controller keeps a majority.
    let mut cluster = Cluster::start_with_voters(4, 3);
    // The ids of the active brokers, as broker `via` sees them.
    let active = |cluster: &Cluster, via: usize| -> Option<Vec<i64>> {
        let status = json(&cluster.address(via), &["cluster", "status"])?;
        let brokers = status["brokers"].as_array()?.iter();
        Some(brokers.filter(|broker| broker["state"] == "active").filter_map(|broker| broker["id"].as_i64()).collect())
    };
    wait_for(&cluster, "four active brokers", || (active(&cluster, 1)? == [1, 2, 3, 4]).then_some(()));
    let create = ["topic", "create", "stranded", "--partitions", "4", "--replication-factor", "2"];
    let (ok, _, stderr) = weir(&cluster.address(1), &create, None);
    assert!(ok, "{stderr}");
    // A partition on broker 4 and one voter.
    let description = json(&cluster.address(1), &["topic", "describe", "stranded"]).unwrap();
    let (partition, voter) = (0..4)
        .find_map(|partition| {
            let replicas: Vec<i64> =
                description["partitions"][partition]["replicas"].as_array()?.iter().filter_map(Value::as_i64).collect();
            let voter = *replicas.iter().find(|id| **id != 4)?;
            replicas.contains(&4).then_some((partition, voter as usize))
        })
        .unwrap_or_else(|| panic!("no partition on broker 4: {description}"));
    let partition_arg = partition.to_string();
    let produce = |cluster: &Cluster, via: usize, value: &str| {
        let args = ["produce", "stranded", "--partition", partition_arg.as_str()];
        let (ok, stdout, stderr) = weir(&cluster.address(via), &args, Some(&format!("{value}\n")));
        assert!(ok, "{stdout}{stderr}");
    };
    let survivor = (1..=3).find(|id| *id != voter).unwrap();
    produce(&cluster, survivor, "before");
    wait_for(&cluster, "both replicas in sync", || {
        let (_, isr) = leader_and_isr(&cluster, survivor, "stranded", partition)?;
        (isr.len() == 2).then_some(())
    });

    // Broker 4 goes down: the voter leads alone and takes a record 4 never saw.
    cluster.kill(4);
    wait_for(&cluster, "the voter leading alone", || {
        let (leader, isr) = leader_and_isr(&cluster, survivor, "stranded", partition)?;
        (leader == voter as i64 && isr == [voter as i64]).then_some(())
    });
    produce(&cluster, survivor, "only-on-the-voter");
    // Then the voter goes down too, and broker 4 comes back: out of sync, it
    // may not lead, so the partition stays offline.
    cluster.kill(voter);
    cluster.restart(4);
    wait_for(&cluster, "broker 4 active again, the voter fenced", || {
        let active = active(&cluster, survivor)?;
        (active.contains(&4) && !active.contains(&(voter as i64))).then_some(())
    });
    let (leader, isr) = leader_and_isr(&cluster, survivor, "stranded", partition).unwrap();
    assert_eq!((leader, isr), (-1, vec![voter as i64]), "an out-of-sync replica led a clean topic");

    // Allowing unclean elections brings it back at once, led by broker 4 alone;
    // the record only the voter held is given up.
    let alter = ["topic", "alter-config", "stranded", "--config", "unclean.leader.election.enable=true"];
    let (ok, _, stderr) = weir(&cluster.address(survivor), &alter, None);
    assert!(ok, "{stderr}");
    wait_for(&cluster, "broker 4 leading after an unclean election", || {
        let (leader, isr) = leader_and_isr(&cluster, survivor, "stranded", partition)?;
        (leader == 4 && isr == [4]).then_some(())
    });
    produce(&cluster, survivor, "after");
    let read = |cluster: &Cluster| {
        let args = ["consume", "stranded", "--partition", partition_arg.as_str(), "--offset", "beginning"];
        let (ok, stdout, stderr) =
            weir(&cluster.address(survivor), &[&args[..], &["--timeout-ms", "5000"]].concat(), None);
        assert!(ok, "{stderr}");
        stdout.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(read(&cluster), ["before", "after"]);
    let logs = cluster.logs();
    assert!(logs.contains("unclean leader election"), "the election is logged");

    // The old leader returns, truncates the record it alone held, and copies
    // the new leader's log byte for byte.
    cluster.restart(voter);
    wait_for(&cluster, "the old leader back in sync", || {
        let (_, isr) = leader_and_isr(&cluster, survivor, "stranded", partition)?;
        let same = replica_bytes(&cluster, voter, "stranded", partition as u32)
            == replica_bytes(&cluster, 4, "stranded", partition as u32);
        (isr.len() == 2 && same).then_some(())
    });
    assert_eq!(read(&cluster), ["before", "after"]);
}

#[test]
fn a_reassignment_moves_a_partition_to_other_brokers_while_records_keep_coming() {
    let mut cluster = Cluster::start_with_voters(4, 3);
    wait_for(&cluster, "four active brokers", || {
        let status = json(&cluster.address(1), &["cluster", "status"])?;
        let active = status["brokers"].as_array()?.iter().filter(|broker| broker["state"] == "active").count();
        (active == 4).then_some(())
    });
    let create = ["topic", "create", "moved", "--partitions", "1", "--replication-factor", "2"];
    let (ok, _, stderr) = weir(&cluster.address(1), &create, None);
    assert!(ok, "{stderr}");
    let produce = |cluster: &Cluster, via: usize, first: usize| {
        let input: String = (first..first + 2000).map(|n| format!("value-{n}\n")).collect();
        let (ok, stdout, stderr) = weir(&cluster.address(via), &["produce", "moved"], Some(&input));
        assert!(ok && stdout.contains("2000 record(s) acknowledged"), "{stdout}{stderr}");
    };
    produce(&cluster, 1, 0);
    let description = json(&cluster.address(1), &["topic", "describe", "moved"]).unwrap();
    let old: Vec<i64> =
        description["partitions"][0]["replicas"].as_array().unwrap().iter().filter_map(Value::as_i64).collect();
    let new: Vec<i64> = (1..=4).filter(|id| !old.contains(id)).collect();
    let target = format!("{},{}", new[0], new[1]);
    // One old replica is down for the whole move: it deletes its copy when it
    // returns and learns the move.
    let leader = description["partitions"][0]["leader"].as_i64().unwrap();
    let down = *old.iter().find(|id| **id != leader).unwrap() as usize;
    cluster.kill(down);
    // Every call below goes through the new replicas' brokers, never stopped.
    let (via, other) = (new[0] as usize, new[1] as usize);

    // Started without waiting; records keep coming while the new replicas copy.
    let start = ["topic", "reassign", "moved", "--partition", "0", "--replicas", &target, "--no-wait"];
    let (ok, stdout, stderr) = weir(&cluster.address(via), &start, None);
    assert!(ok, "{stdout}{stderr}");
    produce(&cluster, via, 2000);
    // Waiting for it (the same target again does not start it over).
    let wait = ["topic", "reassign", "moved", "--partition", "0", "--replicas", &target, "--format", "json"];
    let (ok, stdout, stderr) = weir(&cluster.address(other), &wait, None);
    assert!(ok, "{stdout}{stderr}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["done"], true, "{answer}");
    let moved = &answer["partitions"][0];
    assert_eq!(moved["replicas"], serde_json::json!(new), "{answer}");
    assert_eq!(moved["target_replicas"], serde_json::json!([]), "{answer}");
    assert!(new.contains(&moved["leader"].as_i64().unwrap()), "{answer}");

    // Every record, once, on the new replicas (byte for byte alike); the old
    // replicas' data is gone.
    cluster.restart(down);
    produce(&cluster, via, 4000);
    let mut read = consume_all(&cluster.address(other), "moved");
    read.sort();
    let mut expected: Vec<String> = (0..6000).map(|n| format!("value-{n}")).collect();
    expected.sort();
    assert_eq!(read, expected);
    wait_for(&cluster, "the new replicas alike, the old ones deleted", || {
        let copies: Vec<Vec<u8>> = new.iter().map(|id| replica_bytes(&cluster, *id as usize, "moved", 0)).collect();
        let gone = old.iter().all(|id| !cluster.dir.path().join(format!("data-{id}")).join("moved-0").exists());
        (!copies[0].is_empty() && copies[0] == copies[1] && gone).then_some(())
    });
}
