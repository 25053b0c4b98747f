//! The servers under test, as child processes: Weir, NATS JetStream (one server
//! per durability: `sync_interval` is server-wide) and Kafka in KRaft mode, each
//! as one process; and, for the replicated workload, a Weir cluster and a Kafka
//! cluster of three processes each (a [`Server`] of three members).
//!
//! Each is started fresh for a run with its data in the run's work directory,
//! pinned to the CPU set the harness gives it (every member of a cluster on the
//! same set), killed if the harness dies (`PR_SET_PDEATHSIG`), and sampled through
//! `/proc/<pid>`: CPU seconds (user + system, all threads; a cluster's is the sum
//! over its members) and peak resident memory (`VmHWM`, reset through `clear_refs`
//! before each measurement; a cluster's is the sum of its members' peaks).

use std::fs;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// How long a server may take to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a server may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// One system under test: one process, or the members of a cluster.
#[derive(Debug)]
pub struct Server {
    pub name: String,
    /// What clients bootstrap from: `host:port`, comma-separated for a cluster.
    pub address: String,
    members: Vec<Member>,
    /// Where its members keep their data (one directory for a cluster's).
    data_dir: PathBuf,
}

/// One process of a [`Server`].
#[derive(Debug)]
struct Member {
    /// `host:port` of its client listener.
    address: String,
    child: Child,
    log_path: PathBuf,
}

/// Where and how to start servers.
#[derive(Clone, Debug)]
pub struct Launch {
    pub work_dir: PathBuf,
    /// CPUs the servers run on (empty: no pinning).
    pub cpus: Vec<usize>,
}

impl Launch {
    fn spawn(&self, name: &str, command: &mut Command) -> anyhow::Result<(Child, PathBuf)> {
        let log_path = self.work_dir.join(format!("{name}.log"));
        let log = fs::File::create(&log_path).with_context(|| format!("create {}", log_path.display()))?;
        command.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        let cpus = self.cpus.clone();
        // SAFETY: between fork and exec only async-signal-safe calls are made
        // (prctl, sched_setaffinity), on memory prepared before the fork.
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if pin_current_thread(&cpus) {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = command.spawn().with_context(|| format!("start {name}: {command:?}"))?;
        Ok((child, log_path))
    }

    fn data_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.work_dir.join(name);
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    pub fn weir(&self, weir_bin: &Path) -> anyhow::Result<Server> {
        let port = free_port()?;
        let data = self.data_dir("weir-data")?;
        let address = format!("127.0.0.1:{port}");
        // Defaults, but for the partitions of one topic: the partition scale
        // curve goes to 2,048 (the default allows 1,000).
        let config_path = self.work_dir.join("weir.toml");
        fs::write(&config_path, "[limits]\ntopic_partitions_max = 4096\n")?;
        let mut command = Command::new(weir_bin);
        command
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen")
            .arg(&address);
        command.env("RUST_LOG", "warn");
        let (child, log_path) = self.spawn("weir", &mut command)?;
        Ok(Server::single("weir", address, child, log_path, data))
    }

    /// A NATS server with JetStream on file storage; `sync_always` sets
    /// `sync_interval: always` (fsync before every PubAck).
    pub fn nats(&self, nats_bin: &Path, sync_always: bool) -> anyhow::Result<Server> {
        let name = if sync_always { "nats-fsync" } else { "nats" };
        let port = free_port()?;
        let store = self.data_dir(&format!("{name}-data"))?;
        let sync = if sync_always { "  sync_interval: always\n" } else { "" };
        let config = format!(
            "server_name: weir-bench-{name}\nlisten: 127.0.0.1:{port}\nmax_payload: 8MB\njetstream {{\n  store_dir: {store:?}\n  \
             max_memory_store: 1GB\n  max_file_store: 64GB\n{sync}}}\n"
        );
        let config_path = self.work_dir.join(format!("{name}.conf"));
        fs::write(&config_path, config)?;
        let mut command = Command::new(nats_bin);
        command.arg("-c").arg(&config_path);
        let (child, log_path) = self.spawn(name, &mut command)?;
        Ok(Server::single(name, format!("127.0.0.1:{port}"), child, log_path, store))
    }

    /// A Weir cluster of `size` brokers (`--node-id` 1..=size), every one a
    /// controller voter; the voters list names each broker's own client port.
    pub fn weir_cluster(&self, weir_bin: &Path, size: usize) -> anyhow::Result<Server> {
        let ports = free_ports(size)?;
        let voters = voters(&ports);
        let data = self.data_dir("weir-cluster-data")?;
        let mut members = Vec::with_capacity(size);
        for (index, port) in ports.iter().enumerate() {
            let id = index + 1;
            let address = format!("127.0.0.1:{port}");
            let mut command = Command::new(weir_bin);
            command
                .arg("serve")
                .args(["--node-id", &id.to_string()])
                .args(["--listen", &address])
                .arg("--data-dir")
                .arg(data.join(id.to_string()))
                .args(["--controller-voters", &voters])
                .env("RUST_LOG", "warn");
            let (child, log_path) = self.spawn(&format!("weir-cluster-{id}"), &mut command)?;
            members.push(Member { address, child, log_path });
        }
        Ok(Server::cluster("weir-cluster", members, data))
    }

    /// A single-node Kafka (combined broker + controller, KRaft) from the jars in
    /// `kafka_home/libs`, formatted fresh.
    pub fn kafka(&self, kafka_home: &Path, template: &Path) -> anyhow::Result<Server> {
        let (port, controller_port) = two_free_ports()?;
        let logs = self.data_dir("kafka-data")?;
        let properties = fill_template(
            &fs::read_to_string(template).with_context(|| format!("read {}", template.display()))?,
            &[
                ("PORT", port.to_string()),
                ("CONTROLLER_PORT", controller_port.to_string()),
                ("LOG_DIR", logs.display().to_string()),
            ],
        )?;
        let properties_path = self.work_dir.join("kafka-server.properties");
        fs::write(&properties_path, properties)?;
        // A single controller: a dynamic quorum of one (`--standalone`).
        kafka_format(kafka_home, template, &[(properties_path.clone(), true)])?;
        let mut command = kafka_java(kafka_home, template);
        command.arg("kafka.Kafka").arg(&properties_path);
        let (child, log_path) = self.spawn("kafka", &mut command)?;
        Ok(Server::single("kafka", format!("127.0.0.1:{port}"), child, log_path, logs))
    }

    /// A Kafka cluster of `size` KRaft combined-mode JVMs (broker + controller,
    /// `node.id` 1..=size) with a static controller quorum
    /// (`controller.quorum.voters`), every log directory formatted with the same
    /// cluster id. `template` is `cluster.properties`.
    pub fn kafka_cluster(&self, kafka_home: &Path, template: &Path, size: usize) -> anyhow::Result<Server> {
        let ports = free_ports(2 * size)?;
        let (client_ports, controller_ports) = ports.split_at(size);
        let voters = voters(controller_ports);
        let text = fs::read_to_string(template).with_context(|| format!("read {}", template.display()))?;
        let data = self.data_dir("kafka-cluster-data")?;
        let mut properties = Vec::with_capacity(size);
        for id in 1..=size {
            let logs = data.join(id.to_string());
            fs::create_dir_all(&logs)?;
            let filled = fill_template(
                &text,
                &[
                    ("NODE_ID", id.to_string()),
                    ("PORT", client_ports[id - 1].to_string()),
                    ("CONTROLLER_PORT", controller_ports[id - 1].to_string()),
                    ("VOTERS", voters.clone()),
                    ("LOG_DIR", logs.display().to_string()),
                ],
            )?;
            let path = self.work_dir.join(format!("kafka-cluster-{id}.properties"));
            fs::write(&path, filled)?;
            // Static voters: formatted without --standalone / --initial-controllers.
            properties.push((path, false));
        }
        kafka_format(kafka_home, template, &properties)?;
        let mut members = Vec::with_capacity(size);
        for (index, (path, _)) in properties.iter().enumerate() {
            let mut command = kafka_java(kafka_home, template);
            command.arg("kafka.Kafka").arg(path);
            let (child, log_path) = self.spawn(&format!("kafka-cluster-{}", index + 1), &mut command)?;
            members.push(Member { address: format!("127.0.0.1:{}", client_ports[index]), child, log_path });
        }
        Ok(Server::cluster("kafka-cluster", members, data))
    }
}

/// `java` with the broker's JVM flags (1 GiB heap, G1) and Kafka's classpath;
/// `template` sits beside `log4j2.properties`.
fn kafka_java(kafka_home: &Path, template: &Path) -> Command {
    let log4j = template.with_file_name("log4j2.properties");
    let mut command = Command::new("java");
    command
        .args(["-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"])
        .args(["-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"])
        .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
        .arg("-cp")
        .arg(format!("{}/libs/*", kafka_home.display()));
    command
}

/// Formats the log directory of each properties file with one fresh cluster id
/// (`standalone`: a single-controller dynamic quorum), the formats running side
/// by side.
fn kafka_format(kafka_home: &Path, template: &Path, properties: &[(PathBuf, bool)]) -> anyhow::Result<()> {
    // `--cluster-id=ID` in one argument: an id may start with `-` (one in 64
    // does), which the tool's parser would take for an option.
    let cluster_id = format!("--cluster-id={}", kafka_cluster_id()?);
    let outputs: Vec<std::io::Result<std::process::Output>> = std::thread::scope(|scope| {
        let formats: Vec<_> = properties
            .iter()
            .map(|(path, standalone)| {
                let mut format = kafka_java(kafka_home, template);
                format.args(["kafka.tools.StorageTool", "format"]);
                if *standalone {
                    format.arg("--standalone");
                }
                format.args([cluster_id.as_str(), "-c"]).arg(path);
                scope.spawn(move || format.output())
            })
            .collect();
        formats.into_iter().map(|format| format.join().expect("the format thread does not panic")).collect()
    });
    for ((path, _), output) in properties.iter().zip(outputs) {
        let output = output.context("run Kafka's StorageTool (is java installed?)")?;
        anyhow::ensure!(
            output.status.success(),
            "Kafka StorageTool format of {} failed: {}{}",
            path.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// `text` with every `@KEY@` replaced by its value; an `@…@` placeholder left
/// over (a template the harness does not know) is an error.
pub fn fill_template(text: &str, values: &[(&str, String)]) -> anyhow::Result<String> {
    let mut filled = text.to_owned();
    for (key, value) in values {
        filled = filled.replace(&format!("@{key}@"), value);
    }
    let leftover = filled.lines().filter(|line| !line.trim_start().starts_with('#')).find_map(|line| {
        // The pieces with an `@` on both sides.
        let pieces: Vec<&str> = line.split('@').collect();
        let inner = pieces.get(1..pieces.len().saturating_sub(1)).unwrap_or_default();
        inner
            .iter()
            .find(|key| !key.is_empty() && key.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
            .map(|key| (*key).to_owned())
    });
    anyhow::ensure!(leftover.is_none(), "template placeholder @{}@ has no value", leftover.unwrap_or_default());
    Ok(filled)
}

/// `1@127.0.0.1:P1,2@127.0.0.1:P2,...`: node ids from 1, one per port (the form
/// both `weir serve --controller-voters` and Kafka's `controller.quorum.voters`
/// take).
pub fn voters(ports: &[u16]) -> String {
    ports
        .iter()
        .enumerate()
        .map(|(index, port)| format!("{}@127.0.0.1:{port}", index + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// A Kafka cluster id: 16 random bytes, URL-safe base64 without padding.
fn kafka_cluster_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom").and_then(|mut file| std::io::Read::read_exact(&mut file, &mut bytes))?;
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |word, (i, byte)| word | ((*byte as u32) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            text.push(ALPHABET[((word >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    Ok(text)
}

/// Pins the calling thread (and the threads it starts later) to `cpus`; false if
/// the kernel refused.
pub fn pin_current_thread(cpus: &[usize]) -> bool {
    if cpus.is_empty() {
        return true;
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; the call reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in cpus {
            libc::CPU_SET(*cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Two distinct free ports (both held while the second is chosen).
fn two_free_ports() -> anyhow::Result<(u16, u16)> {
    let ports = free_ports(2)?;
    Ok((ports[0], ports[1]))
}

/// `count` distinct free ports (all held until the last is chosen).
fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let listeners =
        (0..count).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<std::io::Result<Vec<_>>>()?;
    listeners.iter().map(|listener| Ok(listener.local_addr()?.port())).collect()
}

impl Server {
    fn single(name: &str, address: String, child: Child, log_path: PathBuf, data_dir: PathBuf) -> Server {
        let members = vec![Member { address: address.clone(), child, log_path }];
        Server { name: name.into(), address, members, data_dir }
    }

    fn cluster(name: &str, members: Vec<Member>, data_dir: PathBuf) -> Server {
        let address = members.iter().map(|member| member.address.as_str()).collect::<Vec<_>>().join(",");
        Server { name: name.into(), address, members, data_dir }
    }

    /// Drops the server's data files from the page cache (`sync` first: only
    /// clean pages are dropped), so the next read of them comes from the
    /// disk, as after a restart or on a machine whose cache other work took.
    /// Per file with `posix_fadvise(DONTNEED)`, which needs no privileges
    /// (dropping every cache through `/proc/sys/vm/drop_caches` needs root).
    /// Returns the bytes of the files.
    pub fn evict_page_cache(&self) -> anyhow::Result<u64> {
        // SAFETY: sync(2) has no preconditions.
        unsafe { libc::sync() };
        let mut bytes = 0;
        let mut dirs = vec![self.data_dir.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))? {
                let entry = entry?;
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    dirs.push(entry.path());
                    continue;
                }
                if !kind.is_file() {
                    continue;
                }
                // A file deleted meanwhile (a segment rolled away) is skipped.
                let Ok(file) = fs::File::open(entry.path()) else { continue };
                bytes += file.metadata()?.len();
                use std::os::fd::AsRawFd;
                // SAFETY: a valid open descriptor; offset 0 and length 0 mean the whole file.
                let status = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                anyhow::ensure!(status == 0, "posix_fadvise {}: error {status}", entry.path().display());
            }
        }
        Ok(bytes)
    }

    /// The client address of each member (one for a single server).
    pub fn member_addresses(&self) -> Vec<String> {
        self.members.iter().map(|member| member.address.clone()).collect()
    }

    /// Where the logs are, for error messages.
    fn logs(&self) -> String {
        self.members.iter().map(|member| member.log_path.display().to_string()).collect::<Vec<_>>().join(", ")
    }

    /// Waits until every member's port accepts connections and `ready` succeeds
    /// (the system's own "I can serve" check), failing early if a process exits.
    pub async fn wait_ready<F, Fut>(&mut self, mut ready: F) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let started = Instant::now();
        let timeout = START_TIMEOUT * self.members.len().min(2) as u32;
        let mut last_error = anyhow::anyhow!("not listening yet");
        while started.elapsed() < timeout {
            self.check_alive().context("while starting")?;
            if self.members.iter().all(|member| TcpStream::connect(&member.address).is_ok()) {
                match ready().await {
                    Ok(()) => return Ok(()),
                    Err(error) => last_error = error,
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last_error.context(format!("{} not ready after {} s; see {}", self.name, timeout.as_secs(), self.logs())))
    }

    /// The members' process ids (their CPU: [`cpu_seconds_of`]).
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().map(|member| member.child.id()).collect()
    }

    /// Starts a new peak-memory window.
    pub fn reset_peak_rss(&self) {
        for member in &self.members {
            let _ = fs::write(format!("/proc/{}/clear_refs", member.child.id()), "5");
        }
    }

    /// Peak resident set since the last reset, bytes (a cluster's: the sum of
    /// its members' peaks).
    pub fn peak_rss_bytes(&self) -> anyhow::Result<u64> {
        let mut total = 0;
        for member in &self.members {
            let status = fs::read_to_string(format!("/proc/{}/status", member.child.id()))?;
            let line = status.lines().find(|line| line.starts_with("VmHWM:")).context("no VmHWM")?;
            let kib: u64 = line.split_whitespace().nth(1).context("malformed VmHWM")?.parse()?;
            total += kib * 1024;
        }
        Ok(total)
    }

    /// Fails if a member has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for member in &mut self.members {
            if let Some(status) = member.child.try_wait()? {
                anyhow::bail!(
                    "{} ({}) exited with {status}; see {}",
                    self.name,
                    member.address,
                    member.log_path.display()
                );
            }
        }
        Ok(())
    }

    /// SIGTERM to every member at once, then SIGKILL to those that have not
    /// exited within [`STOP_TIMEOUT`] (with a warning).
    pub fn stop(self) {
        self.terminate();
        self.wait_stopped();
    }

    /// SIGTERM to every member (a clean shutdown), without waiting.
    pub fn terminate(&self) {
        for member in &self.members {
            // SAFETY: kill with a pid we own and a valid signal.
            unsafe { libc::kill(member.child.id() as i32, libc::SIGTERM) };
        }
    }

    /// After [`Server::terminate`]: waits for every member to exit, SIGKILL to
    /// those still running after [`STOP_TIMEOUT`] (with a warning).
    pub fn wait_stopped(mut self) {
        let started = Instant::now();
        while started.elapsed() < STOP_TIMEOUT {
            if self.members.iter_mut().all(|member| matches!(member.child.try_wait(), Ok(Some(_)))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for member in &mut self.members {
            if !matches!(member.child.try_wait(), Ok(Some(_))) {
                eprintln!(
                    "warning: {} ({}) had not stopped {} s after SIGTERM; killed it",
                    self.name,
                    member.address,
                    STOP_TIMEOUT.as_secs()
                );
                let _ = member.child.kill();
                let _ = member.child.wait();
            }
        }
    }
}

/// User + system CPU seconds of every thread of the processes `pids` so far.
pub fn cpu_seconds_of(pids: &[u32]) -> anyhow::Result<f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    for pid in pids {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command name (which may hold spaces) start at field 3.
        let after_name = stat.rsplit_once(')').context("malformed /proc/pid/stat")?.1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        ticks += fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    }
    Ok(ticks as f64 / ticks_per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_filled_completely() {
        let template = "# @COMMENT@ stays\nnode.id=@NODE_ID@\nvoters=@VOTERS@\nhost=user@example\n";
        let filled = fill_template(template, &[("NODE_ID", "2".into()), ("VOTERS", voters(&[9001, 9002, 9003]))])
            .expect("every placeholder has a value");
        assert_eq!(
            filled,
            "# @COMMENT@ stays\nnode.id=2\nvoters=1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003\nhost=user@example\n"
        );
        let error = fill_template("port=@PORT@\n", &[]).expect_err("@PORT@ has no value");
        assert!(error.to_string().contains("@PORT@"), "{error}");
        let error = fill_template("voters=1@127.0.0.1:1,@LOG_DIR@\n", &[]).expect_err("@LOG_DIR@ has no value");
        assert!(error.to_string().contains("@LOG_DIR@"), "{error}");
    }

    #[test]
    fn the_cluster_template_has_values_for_every_placeholder() {
        let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/kafka/cluster.properties");
        let text = fs::read_to_string(&template).expect("bench/peers/kafka/cluster.properties");
        let filled = fill_template(
            &text,
            &[
                ("NODE_ID", "3".into()),
                ("PORT", "19092".into()),
                ("CONTROLLER_PORT", "19093".into()),
                ("VOTERS", voters(&[19093, 19095, 19097])),
                ("LOG_DIR", "/tmp/kafka-3".into()),
            ],
        )
        .expect("every placeholder has a value");
        let setting =
            |key: &str| filled.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix('=')).map(str::to_owned);
        assert_eq!(setting("node.id").as_deref(), Some("3"));
        assert_eq!(
            setting("controller.quorum.voters").as_deref(),
            Some("1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097")
        );
        // A static quorum: Kafka refuses both settings at once.
        assert_eq!(setting("controller.quorum.bootstrap.servers"), None);
        assert_eq!(setting("offsets.topic.replication.factor").as_deref(), Some("3"));
        assert_eq!(setting("log.dirs").as_deref(), Some("/tmp/kafka-3"));
    }

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = free_ports(6).expect("loopback ports");
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 6);
    }

    #[test]
    fn cluster_ids_are_22_url_safe_characters() {
        let id = kafka_cluster_id().expect("urandom");
        assert_eq!(id.len(), 22, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{id}");
    }
}
