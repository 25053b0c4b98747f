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

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);

struct Cluster {
    dir: tempfile::TempDir,
    /// Where each broker is reached (by clients and by the other brokers).
    ports: Vec<u16>,
    /// Brokers 1..=voter_count are the controller voters; the rest join as
    /// brokers only.
    voter_count: usize,
    brokers: Vec<Option<Child>>,
    /// A fault proxy in front of each broker's listener (`Cluster::start_proxied`).
    proxies: Vec<Proxy>,
    /// A config file every broker starts with.
    config: Option<PathBuf>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Cluster {
    fn start(size: usize) -> Cluster {
        Cluster::start_with_voters(size, size)
    }

    fn start_with_voters(size: usize, voter_count: usize) -> Cluster {
        let ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster { dir, ports, voter_count, brokers: Vec::new(), proxies: Vec::new(), config: None };
        cluster.started()
    }

    /// `size` voters, each behind a [`Proxy`] (clients and other brokers reach
    /// it through the proxy), all started with the config file `config`.
    fn start_proxied(size: usize, config: &str) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("weir.toml");
        std::fs::write(&config_path, config).unwrap();
        let proxies: Vec<Proxy> = (0..size).map(|_| Proxy::start(free_port())).collect();
        let ports = proxies.iter().map(|proxy| proxy.port).collect();
        let cluster =
            Cluster { dir, ports, voter_count: size, brokers: Vec::new(), proxies, config: Some(config_path) };
        cluster.started()
    }

    fn started(mut self) -> Cluster {
        let cluster = &mut self;
        let size = cluster.ports.len();
        let starting: Vec<mpsc::Receiver<()>> = (1..=size).map(|id| cluster.spawn(id)).collect();
        for (index, listening) in starting.iter().enumerate() {
            if listening.recv_timeout(DEADLINE).is_err() {
                panic!("broker {} never listened\n{}", index + 1, cluster.logs());
            }
        }
        self
    }

    fn voters(&self) -> String {
        let voters: Vec<String> = (self.ports.iter().enumerate().take(self.voter_count))
            .map(|(index, port)| format!("{}@127.0.0.1:{port}", index + 1))
            .collect();
        voters.join(",")
    }

    fn address(&self, id: usize) -> String {
        format!("127.0.0.1:{}", self.ports[id - 1])
    }

    fn log_path(&self, id: usize) -> PathBuf {
        self.dir.path().join(format!("broker-{id}.log"))
    }

    /// Starts broker `id`; the receiver fires once it listens. Its log goes to a
    /// file (read by a thread, so the broker never blocks on a full pipe).
    fn spawn(&mut self, id: usize) -> mpsc::Receiver<()> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
        command.args(["serve", "--node-id", &id.to_string()]);
        match self.proxies.get(id - 1) {
            Some(proxy) => {
                let listen = format!("127.0.0.1:{}", proxy.target);
                command.args(["--listen", &listen, "--advertised-listener", &self.address(id)]);
            }
            None => {
                command.args(["--listen", &self.address(id)]);
            }
        }
        match &self.config {
            Some(config) => command.env("WEIR_CONFIG", config),
            None => command.env_remove("WEIR_CONFIG"),
        };
        let mut child = command
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("data-{id}")))
            .args(["--controller-voters", &self.voters()])
            .env("RUST_LOG", "info,openraft=warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        let log_path = self.log_path(id);
        std::thread::spawn(move || {
            use std::io::Write;
            let mut log = std::fs::OpenOptions::new().create(true).append(true).open(log_path).unwrap();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening address=") {
                    let _ = sender.send(());
                }
                let _ = writeln!(log, "{line}");
            }
        });
        while self.brokers.len() < id {
            self.brokers.push(None);
        }
        self.brokers[id - 1] = Some(child);
        receiver
    }

    fn kill(&mut self, id: usize) {
        let mut child = self.brokers[id - 1].take().unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    fn restart(&mut self, id: usize) {
        let listening = self.spawn(id);
        if listening.recv_timeout(DEADLINE).is_err() {
            panic!("broker {id} never listened after a restart\n{}", self.logs());
        }
    }

    fn logs(&self) -> String {
        (1..=self.ports.len())
            .map(|id| format!("--- broker {id}\n{}", std::fs::read_to_string(self.log_path(id)).unwrap_or_default()))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.brokers.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A userspace fault proxy in front of one broker's listener (no `tc netem`
/// here): it passes bytes both ways until cut; a cut closes every connection
/// through it and refuses new ones until healed. Cutting broker N's proxy cuts
/// every link *into* N, from clients and from the other brokers; N's own calls
/// out still go through.
struct Proxy {
    /// Where clients and brokers connect.
    port: u16,
    /// The broker's real listener.
    target: u16,
    /// Bumped by every cut; connections of an older generation close.
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let proxy = Proxy { port, target, generation: generation.clone(), cut: cut.clone() };
        std::thread::spawn(move || {
            for inbound in listener.incoming().map_while(Result::ok) {
                if cut.load(Ordering::SeqCst) {
                    continue; // dropped: refused
                }
                let Ok(outbound) = std::net::TcpStream::connect(("127.0.0.1", target)) else { continue };
                let born = generation.load(Ordering::SeqCst);
                for (from, to) in [(&inbound, &outbound), (&outbound, &inbound)] {
                    let (from, to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                    let generation = generation.clone();
                    std::thread::spawn(move || pipe(from, to, &generation, born));
                }
            }
        });
        proxy
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes or the proxy is cut.
fn pipe(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    generation: &std::sync::atomic::AtomicU64,
    born: u64,
) {
    use std::io::{Read, Write};
    from.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buffer = vec![0u8; 64 << 10];
    while generation.load(std::sync::atomic::Ordering::SeqCst) == born {
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
            Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// Runs `weir args… --brokers address`; returns (success, stdout, stderr).
fn weir(address: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command.args(args).args(["--brokers", address]).env_remove("WEIR_BROKERS");
    command.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (output.status.success(), text(output.stdout), text(output.stderr))
}

fn json(address: &str, args: &[&str]) -> Option<Value> {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    let (ok, stdout, _) = weir(address, &args, None);
    ok.then(|| serde_json::from_str(&stdout).ok()).flatten()
}

/// Polls `check` until it gives a value or the deadline passes.
fn wait_for<T>(cluster: &Cluster, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "{what}: not within {DEADLINE:?}\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn consume_all(address: &str, topic: &str) -> Vec<String> {
    let (ok, stdout, stderr) =
        weir(address, &["consume", topic, "--offset", "beginning", "--timeout-ms", "5000"], None);
    assert!(ok, "{stderr}");
    stdout.lines().map(str::to_owned).collect()
}

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
    let description = json(&cluster.address(3), &["topic", "describe", "orders"]).unwrap();
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
    let description = json(&cluster.address(2), &["topic", "describe", "spread"]).unwrap();
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
    let deploy = [
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
    let mut seen = Vec::new();
    for topic in ["eu", "elsewhere"] {
        for line in consume_all(&cluster.address(3), topic) {
            let value: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(value["region"] == "eu", topic == "eu", "{topic}: {line}");
            seen.push(value["n"].as_u64().unwrap());
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..3000).collect::<Vec<u64>>(), "every input once, none twice");

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

/// The bytes of every segment of `topic-partition` in broker `id`'s data
/// directory, in offset order.
fn replica_bytes(cluster: &Cluster, id: usize, topic: &str, partition: u32) -> Vec<u8> {
    let dir = cluster.dir.path().join(format!("data-{id}")).join(format!("{topic}-{partition}"));
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    segments.retain(|path| path.extension().is_some_and(|extension| extension == "log"));
    segments.sort();
    segments.iter().flat_map(|path| std::fs::read(path).unwrap_or_default()).collect()
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

/// The leader of `topic-partition` and its ISR, as broker `via` describes them.
fn leader_and_isr(cluster: &Cluster, via: usize, topic: &str, partition: usize) -> Option<(i64, Vec<i64>)> {
    let description = json(&cluster.address(via), &["topic", "describe", topic])?;
    let state = &description["partitions"][partition];
    let isr = state["isr"].as_array()?.iter().filter_map(Value::as_i64).collect();
    Some((state["leader"].as_i64()?, isr))
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
    consumer.close().await;
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
                delivery_timeout: Duration::from_secs(90),
                ..client::ProducerConfig::default()
            };
            let producer = client::Producer::new(config).unwrap();
            let (mut acknowledged, mut failed, mut sent) = (Vec::<Placed>::new(), Vec::new(), 0u64);
            while producing.load(Ordering::SeqCst) {
                let mut deliveries = Vec::new();
                for _ in 0..20 {
                    let value = format!("v{sent}");
                    sent += 1;
                    deliveries.push((value.clone(), producer.send(client::ProducerRecord::new(TOPIC, value)).await));
                }
                for (value, delivery) in deliveries {
                    match delivery {
                        Ok(delivery) => match delivery.wait().await {
                            Ok(metadata) => acknowledged.push((metadata.partition, metadata.offset, value)),
                            Err(error) => failed.push((value, error.to_string())),
                        },
                        Err(error) => failed.push((value, error.to_string())),
                    }
                }
            }
            producer.close().await;
            (acknowledged, failed)
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
            consumer.close().await;
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
                wait_for(&cluster, "a new leader", || {
                    leader_and_isr(&cluster, via, TOPIC, partition)
                        .filter(|(next, _)| *next > 0 && *next != leader as i64)
                });
                cluster.restart(leader);
            }
            1 => {
                let broker = 1 + choices.below(3) as usize;
                eprintln!("jepsen: fault {cycle}: kill -9 broker {broker}");
                cluster.kill(broker);
                let via = alive(&cluster);
                wait_for(&cluster, "the killed broker out of every ISR", || {
                    (0..PARTITIONS as usize)
                        .all(|partition| {
                            leader_and_isr(&cluster, via, TOPIC, partition)
                                .is_some_and(|(_, isr)| !isr.contains(&(broker as i64)))
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
    let (acknowledged, failed) = runtime.block_on(producer).unwrap();
    let final_log = runtime.block_on(read_everything(&bootstrap, TOPIC, PARTITIONS));
    consuming.store(false, Ordering::SeqCst);
    let seen = runtime.block_on(consumer).unwrap();
    eprintln!(
        "jepsen: {} acknowledged, {} failed, {} in the log, {} read by the group consumer",
        acknowledged.len(),
        failed.len(),
        final_log.len(),
        seen.len()
    );
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
