//! Group commit under races, on an in-memory storage whose fdatasync can be held
//! open and whose writes can be made to fail: a shutdown while a round is inside
//! its sync, and a log fenced by a failed append while others wait for durability.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use broker::flusher::Flusher;
use broker::{Durability, Environment, Partition, SystemClock};
use broker_core::log::{FlushPolicy, Log, LogConfig};
use broker_core::storage::mem::{CrashMode, MemStorage};
use broker_core::storage::{File, MapMut, Storage};

fn batch(records: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let mut builder = abi::batch::BatchBuilder::new(records[0].0);
    for (timestamp, value) in records {
        builder.push(*timestamp, None, Some(value), &[]);
    }
    builder.encode()
}

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 4096,
        batch_bytes_max: 4096,
        index_interval_bytes: 256,
        index_bytes_max: 1024,
        retention_ms: None,
        ..LogConfig::default()
    }
}

#[derive(Debug, Default)]
struct Gate {
    /// The first sync of a file whose name ends with this blocks until released.
    armed_suffix: Mutex<Option<String>>,
    blocked: Mutex<bool>,
    released: Mutex<bool>,
    cv: Condvar,
    fail_writes: AtomicBool,
}

#[derive(Debug, Clone)]
struct GatedStorage {
    inner: MemStorage,
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct GatedFile {
    inner: Arc<dyn File>,
    path: PathBuf,
    gate: Arc<Gate>,
}

impl Storage for GatedStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn File>> {
        let inner = self.inner.open(path, create)?;
        Ok(Arc::new(GatedFile { inner, path: path.to_path_buf(), gate: self.gate.clone() }))
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.remove_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn map_mut(&self, path: &Path, len: usize) -> io::Result<Box<dyn MapMut>> {
        self.inner.map_mut(path, len)
    }
}

impl File for GatedFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        self.inner.read_at(buf, position)
    }
    fn write_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        if self.gate.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("ENOSPC (injected)"));
        }
        self.inner.write_at(buf, position)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        // One-shot: the first sync of the armed file blocks; later ones pass.
        let armed = {
            let mut armed = self.gate.armed_suffix.lock().unwrap();
            let hit = armed.as_ref().is_some_and(|suffix| self.path.to_string_lossy().ends_with(suffix.as_str()));
            if hit {
                *armed = None;
            }
            hit
        };
        if armed {
            *self.gate.blocked.lock().unwrap() = true;
            self.gate.cv.notify_all();
            let mut released = self.gate.released.lock().unwrap();
            while !*released {
                released = self.gate.cv.wait(released).unwrap();
            }
            // A sync that finishes after the simulated power cut reaches nothing.
            return Ok(());
        }
        self.inner.sync_data()
    }
}

impl Gate {
    fn arm(&self, suffix: &str) {
        *self.armed_suffix.lock().unwrap() = Some(suffix.to_owned());
    }
    fn wait_blocked(&self) {
        let mut blocked = self.blocked.lock().unwrap();
        while !*blocked {
            blocked = self.cv.wait_timeout(blocked, Duration::from_secs(5)).unwrap().0;
        }
    }
    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

fn setup(config: LogConfig) -> (MemStorage, Arc<Gate>, Partition) {
    let inner = MemStorage::new();
    let gate = Arc::new(Gate::default());
    let storage = Arc::new(GatedStorage { inner: inner.clone(), gate: gate.clone() });
    let partition = Partition::open(
        Environment::simulated(storage, Arc::new(SystemClock)),
        "t-0".into(),
        PathBuf::from("/data/topic-0"),
        config,
        Flusher::start(1),
        Duration::ZERO,
    )
    .unwrap();
    (inner, gate, partition)
}

#[test]
fn shutdown_while_a_round_is_inside_its_sync_still_leaves_a_clean_durable_log() {
    let config = LogConfig { flush_policy: FlushPolicy::Interval, ..small_config() };
    let (inner, gate, partition) = setup(config.clone());
    for index in 0..30i64 {
        partition.append(&mut batch(&[(index, vec![b'x'; 150])]), 0).unwrap();
    }
    gate.arm("00000000000000000000.log");
    partition.schedule_round();
    gate.wait_blocked();
    partition.close().unwrap();
    let Durability::Durable(durable) = partition.durability() else { panic!("{:?}", partition.durability()) };
    inner.crash(CrashMode::ForgetUnsynced);
    gate.release();
    let log = Log::open(Arc::new(inner.clone()), PathBuf::from("/data/topic-0"), config).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(log.log_end_offset(), durable);
}

#[test]
fn waiters_get_an_error_when_an_append_fences_the_log() {
    let (_inner, gate, partition) = setup(small_config());
    gate.arm("00000000000000000000.log");
    partition.append(&mut batch(&[(1, b"a".to_vec())]), 0).unwrap();
    gate.wait_blocked();
    let info = partition.append(&mut batch(&[(2, b"b".to_vec())]), 0).unwrap();
    gate.fail_writes.store(true, Ordering::SeqCst);
    assert!(partition.append(&mut batch(&[(3, b"c".to_vec())]), 0).is_err());
    gate.release();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let waited = runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(10), partition.wait_durable(info.last_offset + 1)).await
        })
        .expect("the waiter is answered, not left hanging");
    assert!(matches!(waited, Err(broker_core::log::LogError::Fenced { .. })), "{waited:?}");
}
