//! The servers under test, as child processes: Weir, NATS JetStream (one server
//! per durability: `sync_interval` is server-wide) and Kafka in KRaft mode.
//!
//! Each is started fresh for a run with its data in the run's work directory,
//! pinned to the CPU set the harness gives it, killed if the harness dies
//! (`PR_SET_PDEATHSIG`), and sampled through `/proc/<pid>`: CPU seconds
//! (user + system, all threads) and peak resident memory (`VmHWM`, reset through
//! `clear_refs` before each measurement).

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

#[derive(Debug)]
pub struct Server {
    pub name: String,
    /// `host:port` clients connect to.
    pub address: String,
    child: Child,
    pub log_path: PathBuf,
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
        let mut command = Command::new(weir_bin);
        command.arg("serve").arg("--data-dir").arg(&data).arg("--listen").arg(&address).env("RUST_LOG", "warn");
        let (child, log_path) = self.spawn("weir", &mut command)?;
        Ok(Server { name: "weir".into(), address, child, log_path })
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
        Ok(Server { name: name.into(), address: format!("127.0.0.1:{port}"), child, log_path })
    }

    /// A single-node Kafka (combined broker + controller, KRaft) from the jars in
    /// `kafka_home/libs`, formatted fresh.
    pub fn kafka(&self, kafka_home: &Path, template: &Path) -> anyhow::Result<Server> {
        let (port, controller_port) = two_free_ports()?;
        let logs = self.data_dir("kafka-data")?;
        let properties = fs::read_to_string(template)
            .with_context(|| format!("read {}", template.display()))?
            .replace("@PORT@", &port.to_string())
            .replace("@CONTROLLER_PORT@", &controller_port.to_string())
            .replace("@LOG_DIR@", &logs.display().to_string());
        let properties_path = self.work_dir.join("kafka-server.properties");
        fs::write(&properties_path, properties)?;
        let log4j = template.with_file_name("log4j2.properties");
        let classpath = format!("{}/libs/*", kafka_home.display());
        let java = |command: &mut Command| {
            command
                .args(["-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"])
                .args([
                    "-XX:InitiatingHeapOccupancyPercent=35",
                    "-XX:+ExplicitGCInvokesConcurrent",
                    "-Djava.awt.headless=true",
                ])
                .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
                .arg("-cp")
                .arg(&classpath);
        };
        let mut format = Command::new("java");
        java(&mut format);
        // `--cluster-id=ID` in one argument: an id may start with `-` (one in 64
        // does), which the tool's parser would take for an option.
        let cluster_id = format!("--cluster-id={}", kafka_cluster_id()?);
        format.args(["kafka.tools.StorageTool", "format", "--standalone", &cluster_id, "-c"]);
        let output = format.arg(&properties_path).output().context("run Kafka's StorageTool (is java installed?)")?;
        anyhow::ensure!(
            output.status.success(),
            "Kafka StorageTool format failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let mut command = Command::new("java");
        java(&mut command);
        command.arg("kafka.Kafka").arg(&properties_path);
        let (child, log_path) = self.spawn("kafka", &mut command)?;
        Ok(Server { name: "kafka".into(), address: format!("127.0.0.1:{port}"), child, log_path })
    }
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
    let first = std::net::TcpListener::bind("127.0.0.1:0")?;
    let second = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok((first.local_addr()?.port(), second.local_addr()?.port()))
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the port accepts connections and `ready` succeeds (the
    /// system's own "I can serve" check), failing early if the process exits.
    pub async fn wait_ready<F, Fut>(&mut self, mut ready: F) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let started = Instant::now();
        let mut last_error = anyhow::anyhow!("not listening yet");
        while started.elapsed() < START_TIMEOUT {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("{} exited with {status} while starting; see {}", self.name, self.log_path.display());
            }
            if TcpStream::connect(&self.address).is_ok() {
                match ready().await {
                    Ok(()) => return Ok(()),
                    Err(error) => last_error = error,
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last_error.context(format!(
            "{} not ready after {} s; see {}",
            self.name,
            START_TIMEOUT.as_secs(),
            self.log_path.display()
        )))
    }

    /// User + system CPU seconds of every thread so far.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid()))?;
        // Fields after the command name (which may hold spaces) start at field 3.
        let after_name = stat.rsplit_once(')').context("malformed /proc/pid/stat")?.1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
        // SAFETY: sysconf has no preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        Ok(ticks as f64 / ticks_per_second)
    }

    /// Starts a new peak-memory window.
    pub fn reset_peak_rss(&self) {
        let _ = fs::write(format!("/proc/{}/clear_refs", self.pid()), "5");
    }

    /// Peak resident set since the last reset, bytes.
    pub fn peak_rss_bytes(&self) -> anyhow::Result<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let line = status.lines().find(|line| line.starts_with("VmHWM:")).context("no VmHWM")?;
        let kib: u64 = line.split_whitespace().nth(1).context("malformed VmHWM")?.parse()?;
        Ok(kib * 1024)
    }

    /// Fails if the server has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => anyhow::bail!("{} exited with {status}; see {}", self.name, self.log_path.display()),
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within [`STOP_TIMEOUT`].
    pub fn stop(mut self) {
        // SAFETY: kill with a pid we own and a valid signal.
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        let started = Instant::now();
        while started.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_22_url_safe_characters() {
        let id = kafka_cluster_id().expect("urandom");
        assert_eq!(id.len(), 22, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{id}");
    }
}
