//! What the cluster test files share: a cluster of real `weir serve` processes
//! started with the README's flags, optionally each behind a userspace fault
//! proxy, and the CLI calls and waits the tests make on it.
//!
//! Waits are on events (log lines, the CLI's answers) with generous deadlines.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const DEADLINE: Duration = Duration::from_secs(120);

pub struct Cluster {
    pub dir: tempfile::TempDir,
    /// Where each broker is reached (by clients and by the other brokers).
    pub ports: Vec<u16>,
    /// Brokers 1..=voter_count are the controller voters; the rest join as
    /// brokers only.
    voter_count: usize,
    pub brokers: Vec<Option<Child>>,
    /// A fault proxy in front of each broker's listener (`Cluster::start_proxied`).
    pub proxies: Vec<Proxy>,
    /// A config file every broker starts with.
    config: Option<PathBuf>,
}

/// A port nothing listens on, for a broker to bind later. Taken below the
/// kernel's ephemeral range: a port from `bind(:0)` comes from that range, and
/// before the broker binds it, any outgoing connection of a test running
/// alongside may take it as its local port (a broker then failed to start
/// with "address in use"). Below the range, only another listener can take
/// it; each test process walks its own sequence from its pid.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const LOWEST: u32 = 10_000;
    if ephemeral_start > LOWEST + 1_000 {
        let span = ephemeral_start - LOWEST;
        let start = std::process::id().wrapping_mul(7_919);
        for _ in 0..span {
            let port = LOWEST + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
            if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
                return port as u16;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Cluster {
    pub fn start(size: usize) -> Cluster {
        Cluster::start_with_voters(size, size)
    }

    pub fn start_with_voters(size: usize, voter_count: usize) -> Cluster {
        let ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster { dir, ports, voter_count, brokers: Vec::new(), proxies: Vec::new(), config: None };
        cluster.started()
    }

    /// `size` voters, each behind a [`Proxy`] (clients and other brokers reach
    /// it through the proxy), all started with the config file `config`.
    pub fn start_proxied(size: usize, config: &str) -> Cluster {
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

    pub fn address(&self, id: usize) -> String {
        format!("127.0.0.1:{}", self.ports[id - 1])
    }

    pub fn log_path(&self, id: usize) -> PathBuf {
        self.dir.path().join(format!("broker-{id}.log"))
    }

    /// Broker `id`'s log, opened for appending (lines from its stdout and
    /// stderr interleave whole).
    fn log_file(&self, id: usize) -> std::fs::File {
        std::fs::OpenOptions::new().create(true).append(true).open(self.log_path(id)).unwrap()
    }

    /// Starts broker `id`; the receiver fires once it listens. Its log goes to a
    /// file (read by a thread, so the broker never blocks on a full pipe).
    pub fn spawn(&mut self, id: usize) -> mpsc::Receiver<()> {
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
            // Errors the broker prints before its log starts (a port in use)
            // land in its log file too.
            .stderr(self.log_file(id))
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        let mut log = self.log_file(id);
        std::thread::spawn(move || {
            use std::io::Write;
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

    pub fn kill(&mut self, id: usize) {
        let mut child = self.brokers[id - 1].take().unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    pub fn restart(&mut self, id: usize) {
        let listening = self.spawn(id);
        if listening.recv_timeout(DEADLINE).is_err() {
            panic!("broker {id} never listened after a restart\n{}", self.logs());
        }
    }

    pub fn logs(&self) -> String {
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
pub struct Proxy {
    /// Where clients and brokers connect.
    port: u16,
    /// The broker's real listener.
    target: u16,
    /// Bumped by every cut; connections of an older generation close.
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
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

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes or the proxy is cut.
pub fn pipe(
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
pub fn weir(address: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
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

pub fn json(address: &str, args: &[&str]) -> Option<Value> {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    let (ok, stdout, _) = weir(address, &args, None);
    ok.then(|| serde_json::from_str(&stdout).ok()).flatten()
}

/// Polls `check` until it gives a value or the deadline passes.
pub fn wait_for<T>(cluster: &Cluster, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "{what}: not within {DEADLINE:?}\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn consume_all(address: &str, topic: &str) -> Vec<String> {
    let (ok, stdout, stderr) =
        weir(address, &["consume", topic, "--offset", "beginning", "--timeout-ms", "5000"], None);
    assert!(ok, "{stderr}");
    stdout.lines().map(str::to_owned).collect()
}

/// The bytes of every segment of `topic-partition` in broker `id`'s data
/// directory, in offset order.
pub fn replica_bytes(cluster: &Cluster, id: usize, topic: &str, partition: u32) -> Vec<u8> {
    let dir = cluster.dir.path().join(format!("data-{id}")).join(format!("{topic}-{partition}"));
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    segments.retain(|path| path.extension().is_some_and(|extension| extension == "log"));
    segments.sort();
    segments.iter().flat_map(|path| std::fs::read(path).unwrap_or_default()).collect()
}

/// The leader of `topic-partition` and its ISR, as broker `via` describes them.
pub fn leader_and_isr(cluster: &Cluster, via: usize, topic: &str, partition: usize) -> Option<(i64, Vec<i64>)> {
    let description = json(&cluster.address(via), &["topic", "describe", topic])?;
    let state = &description["partitions"][partition];
    let isr = state["isr"].as_array()?.iter().filter_map(Value::as_i64).collect();
    Some((state["leader"].as_i64()?, isr))
}
