//! [`MemStorage`]: an in-memory [`Storage`] that forgets what was not synced.
//!
//! It models the POSIX durability contract the log relies on (see the parent
//! module): every file keeps its *live* contents (what reads see, the page cache)
//! and its *durable* contents (as of the last `sync_data`); the namespace
//! keeps a live and a durable view, the durable one updated per directory by
//! `sync_dir`. [`MemStorage::crash`] throws the live state away and keeps the durable
//! one, optionally with a random prefix of each file's unsynced appended bytes (a torn
//! write, as a disk that persisted some pages but not others in order would leave),
//! optionally followed by garbage up to the file's full length (a file that grew
//! without its data blocks: random bytes, zeros, or stale blocks of an older file).
//!
//! [`MemStorage::fail_after`] arms a power cut: after that many more mutating
//! operations, every call fails with an IO error, as if the machine had died there.
//! Crash-consistency tests sweep that number across a workload.
//!
//! Directories can be renamed (their whole subtree moves; the move is durable at
//! the next `sync_dir` of the new parent) and removed with everything in them (the
//! removal is durable at the next `sync_dir` of the parent).
//!
//! Simplifications (documented so tests do not over-trust them): directories are
//! durable as soon as they are created (so a missing `sync_dir` of a *parent* after
//! creating a directory would go unnoticed here); a torn write keeps a prefix of the
//! unsynced appended bytes, never a reordering of them (real page writeback has no
//! order within a file).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{File, MapMut, Storage};

/// An in-memory storage with crash semantics. Cheap to clone (shared state).
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    live: BTreeMap<PathBuf, Entry>,
    durable: BTreeMap<PathBuf, Entry>,
    /// Mutating operations left before the simulated power cut; `None` = never.
    ops_left: Option<u64>,
    dead: bool,
    /// Mutating operations performed so far (for sizing crash sweeps).
    op_count: u64,
    /// Directory renames (from, to) not yet made durable by a `sync_dir` of the
    /// new parent: the durable subtree moves then.
    pending_dir_renames: Vec<(PathBuf, PathBuf)>,
}

/// Whether `path` is `dir` or lies under it.
fn within(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

/// Moves every key of `entries` at or under `from` to the same place under `to`.
fn move_subtree(entries: &mut BTreeMap<PathBuf, Entry>, from: &Path, to: &Path) {
    let moved: Vec<PathBuf> = entries.keys().filter(|path| within(path, from)).cloned().collect();
    for path in moved {
        if let Some(entry) = entries.remove(&path) {
            let relative = path.strip_prefix(from).unwrap_or(Path::new(""));
            let target = if relative.as_os_str().is_empty() { to.to_path_buf() } else { to.join(relative) };
            entries.insert(target, entry);
        }
    }
}

#[derive(Clone, Debug)]
enum Entry {
    Dir,
    File(Arc<Node>),
}

#[derive(Debug, Default)]
struct Node {
    contents: Mutex<Contents>,
}

#[derive(Debug, Default, Clone)]
struct Contents {
    live: Vec<u8>,
    durable: Vec<u8>,
}

/// How much unsynced data survives a [`MemStorage::crash`].
#[derive(Clone, Copy, Debug)]
pub enum CrashMode {
    /// Only synced contents survive.
    ForgetUnsynced,
    /// Each file keeps a pseudo-random prefix of its unsynced appended bytes, chosen
    /// from this seed.
    TornTail { seed: u64 },
    /// Each file keeps its full length, but only a pseudo-random prefix of its
    /// unsynced appended bytes: the rest reads as garbage (the file grew, its data
    /// blocks did not), chosen from this seed among random bytes, zeros and stale
    /// bytes of a file named before it (an older segment).
    GarbageTail { seed: u64 },
}

fn power_cut() -> io::Error {
    io::Error::other("simulated power cut")
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// Counts one mutating operation; fails once the armed power cut is reached.
    fn mutate(&self) -> io::Result<MutexGuard<'_, State>> {
        let mut state = lock(&self.state);
        if state.dead {
            return Err(power_cut());
        }
        if let Some(ops_left) = state.ops_left.as_mut() {
            if *ops_left == 0 {
                state.dead = true;
                return Err(power_cut());
            }
            *ops_left -= 1;
        }
        state.op_count += 1;
        Ok(state)
    }

    fn read(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = lock(&self.state);
        if state.dead {
            return Err(power_cut());
        }
        Ok(state)
    }
}

/// `len` bytes of garbage: random, zeros, or a window of one of the `older` files.
fn garbage(rng: &mut SplitMix64, len: usize, older: &[&Entry]) -> Vec<u8> {
    let stale: Vec<u8> = match older.get((rng.next() % (older.len() as u64 + 1)) as usize) {
        // What the older file holds now: stale blocks of data truncated away
        // earlier could carry batches that continue the log, which recovery
        // rightly fences (scan.rs); that is not what this mode models.
        Some(Entry::File(node)) => lock(&node.contents).live.clone(),
        _ => Vec::new(),
    };
    match rng.next() % 3 {
        0 => (0..len).map(|_| rng.next() as u8).collect(),
        1 if stale.len() >= len && len > 0 => {
            let start = (rng.next() % (stale.len() - len + 1) as u64) as usize;
            stale[start..start + len].to_vec()
        }
        _ => vec![0; len],
    }
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    /// After `op_count` more mutating operations, every call fails (power cut).
    pub fn fail_after(&self, op_count: u64) {
        lock(&self.shared.state).ops_left = Some(op_count);
    }

    /// Mutating operations performed since creation.
    pub fn op_count(&self) -> u64 {
        lock(&self.shared.state).op_count
    }

    /// Whether an armed power cut has happened.
    pub fn is_dead(&self) -> bool {
        lock(&self.shared.state).dead
    }

    /// Simulates a crash and reboot: only durable state survives (see [`CrashMode`]).
    /// Handles opened before the crash keep pointing at the old, dead files.
    pub fn crash(&self, mode: CrashMode) {
        let mut state = lock(&self.shared.state);
        let mut rng = SplitMix64(match mode {
            CrashMode::ForgetUnsynced => 0,
            CrashMode::TornTail { seed } | CrashMode::GarbageTail { seed } => seed,
        });
        let mut rebooted = BTreeMap::new();
        for (path, entry) in &state.durable {
            let entry = match entry {
                Entry::Dir => Entry::Dir,
                Entry::File(node) => {
                    let contents = lock(&node.contents);
                    let mut survived = contents.durable.clone();
                    let appended = contents.live.get(survived.len()..).unwrap_or(&[]);
                    let torn = !matches!(mode, CrashMode::ForgetUnsynced);
                    if torn && contents.live.starts_with(&survived) && !appended.is_empty() {
                        let keep = (rng.next() % (appended.len() as u64 + 1)) as usize;
                        survived.extend_from_slice(&appended[..keep]);
                        if let CrashMode::GarbageTail { .. } = mode {
                            let older: Vec<&Entry> =
                                state.durable.range(..path.clone()).map(|(_, entry)| entry).collect();
                            survived.extend(garbage(&mut rng, appended.len() - keep, &older));
                        }
                    }
                    let node = Node { contents: Mutex::new(Contents { durable: survived.clone(), live: survived }) };
                    Entry::File(Arc::new(node))
                }
            };
            rebooted.insert(path.clone(), entry);
        }
        state.live = rebooted.clone();
        state.durable = rebooted;
        state.dead = false;
        state.ops_left = None;
        state.pending_dir_renames.clear();
    }

    /// Paths of every live file, in order.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        let state = lock(&self.shared.state);
        state.live.iter().filter(|(_, entry)| matches!(entry, Entry::File(_))).map(|(path, _)| path.clone()).collect()
    }

    /// The live contents of a file, for tests that inspect or damage it.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        match lock(&self.shared.state).live.get(path) {
            Some(Entry::File(node)) => Some(lock(&node.contents).live.clone()),
            _ => None,
        }
    }

    /// Replaces a file's contents, live and durable (simulates media damage).
    pub fn overwrite(&self, path: &Path, bytes: Vec<u8>) {
        if let Some(Entry::File(node)) = lock(&self.shared.state).live.get(path) {
            let mut contents = lock(&node.contents);
            contents.durable = bytes.clone();
            contents.live = bytes;
        }
    }

    fn node(&self, path: &Path, create: bool) -> io::Result<Arc<Node>> {
        let mut state = if create { self.shared.mutate()? } else { self.shared.read()? };
        if let Some(Entry::File(node)) = state.live.get(path) {
            return Ok(node.clone());
        }
        if !create {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{} not found", path.display())));
        }
        let parent = path.parent().unwrap_or(Path::new(""));
        if !matches!(state.live.get(parent), Some(Entry::Dir)) && parent != Path::new("") {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("no directory {}", parent.display())));
        }
        let node = Arc::new(Node::default());
        state.live.insert(path.to_path_buf(), Entry::File(node.clone()));
        Ok(node)
    }
}

impl Storage for MemStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.shared.mutate()?;
        for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            state.live.insert(ancestor.to_path_buf(), Entry::Dir);
            state.durable.insert(ancestor.to_path_buf(), Entry::Dir);
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.shared.read()?;
        let names = state
            .live
            .keys()
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name()?.to_str().map(str::to_owned))
            .collect();
        Ok(names)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn File>> {
        let node = self.node(path, create)?;
        Ok(Arc::new(MemFile { node, shared: self.shared.clone() }))
    }

    fn exists(&self, path: &Path) -> bool {
        lock(&self.shared.state).live.contains_key(path)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.shared.mutate()?;
        match state.live.remove(path) {
            Some(_) => Ok(()),
            None => Err(io::Error::new(io::ErrorKind::NotFound, format!("{} not found", path.display()))),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.shared.mutate()?;
        let entry = state
            .live
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{} not found", from.display())))?;
        if let Entry::Dir = entry {
            state.live.insert(from.to_path_buf(), Entry::Dir);
            move_subtree(&mut state.live, from, to);
            state.pending_dir_renames.push((from.to_path_buf(), to.to_path_buf()));
        } else {
            state.live.insert(to.to_path_buf(), entry);
        }
        Ok(())
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.shared.mutate()?;
        if !matches!(state.live.get(dir), Some(Entry::Dir)) {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("no directory {}", dir.display())));
        }
        state.live.retain(|path, _| !within(path, dir));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.shared.mutate()?;
        let in_dir = |path: &Path| path.parent() == Some(dir);
        // Renamed directories bring their durable contents along.
        let (landed, pending): (Vec<_>, Vec<_>) =
            std::mem::take(&mut state.pending_dir_renames).into_iter().partition(|(_, to)| in_dir(to));
        state.pending_dir_renames = pending;
        for (from, to) in landed {
            move_subtree(&mut state.durable, &from, &to);
        }
        // Entries of `dir` that are gone take their durable subtrees with them.
        let gone: Vec<PathBuf> =
            state.durable.keys().filter(|path| in_dir(path) && !state.live.contains_key(*path)).cloned().collect();
        for path in gone {
            state.durable.retain(|durable, _| !within(durable, &path));
        }
        let synced: Vec<(PathBuf, Entry)> =
            state.live.iter().filter(|(path, _)| in_dir(path)).map(|(p, e)| (p.clone(), e.clone())).collect();
        state.durable.extend(synced);
        Ok(())
    }

    fn map_mut(&self, path: &Path, len_bytes: usize) -> io::Result<Box<dyn MapMut>> {
        let node = self.node(path, true)?;
        drop(self.shared.mutate()?);
        let local = {
            let mut contents = lock(&node.contents);
            contents.live.resize(len_bytes, 0);
            contents.live.clone()
        };
        Ok(Box::new(MemMap { node, local, shared: self.shared.clone() }))
    }
}

#[derive(Debug)]
struct MemFile {
    node: Arc<Node>,
    shared: Arc<Shared>,
}

impl File for MemFile {
    fn len(&self) -> io::Result<u64> {
        drop(self.shared.read()?);
        Ok(lock(&self.node.contents).live.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        drop(self.shared.read()?);
        let contents = lock(&self.node.contents);
        let start = usize::try_from(position).unwrap_or(usize::MAX).min(contents.live.len());
        let available = &contents.live[start..];
        let read_count = available.len().min(buf.len());
        buf[..read_count].copy_from_slice(&available[..read_count]);
        Ok(read_count)
    }

    fn write_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        drop(self.shared.mutate()?);
        let mut contents = lock(&self.node.contents);
        let start = position as usize;
        let end = start + buf.len();
        if contents.live.len() < end {
            contents.live.resize(end, 0);
        }
        contents.live[start..end].copy_from_slice(buf);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        drop(self.shared.mutate()?);
        lock(&self.node.contents).live.resize(len as usize, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        drop(self.shared.mutate()?);
        let mut contents = lock(&self.node.contents);
        contents.durable = contents.live.clone();
        Ok(())
    }
}

#[derive(Debug)]
struct MemMap {
    node: Arc<Node>,
    /// What the mapping shows; mirrors the node's live bytes it covers.
    local: Vec<u8>,
    shared: Arc<Shared>,
}

impl MapMut for MemMap {
    fn bytes(&self) -> &[u8] {
        &self.local
    }

    fn write(&mut self, position: usize, data: &[u8]) {
        let end = position + data.len();
        self.local[position..end].copy_from_slice(data);
        // After a power cut the page cache is gone: the write reaches nothing durable.
        if lock(&self.shared.state).dead {
            return;
        }
        let mut contents = lock(&self.node.contents);
        if contents.live.len() < end {
            contents.live.resize(end, 0);
        }
        contents.live[position..end].copy_from_slice(data);
    }
}

/// A tiny deterministic generator (SplitMix64) so crash choices are reproducible
/// without a dependency.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_writes_and_entries_vanish_at_a_crash() {
        let storage = MemStorage::new();
        let dir = Path::new("/d");
        storage.create_dir_all(dir).unwrap();
        let kept = storage.open(&dir.join("kept"), true).unwrap();
        kept.write_at(b"synced", 0).unwrap();
        kept.sync_data().unwrap();
        storage.sync_dir(dir).unwrap();
        kept.write_at(b"-lost", 6).unwrap();
        let lost = storage.open(&dir.join("lost"), true).unwrap();
        lost.write_at(b"x", 0).unwrap();
        lost.sync_data().unwrap();

        storage.crash(CrashMode::ForgetUnsynced);

        assert_eq!(storage.contents(&dir.join("kept")).unwrap(), b"synced");
        assert!(!storage.exists(&dir.join("lost")), "entry was never made durable by sync_dir");
    }

    #[test]
    fn removal_is_undone_by_a_crash_before_sync_dir() {
        let storage = MemStorage::new();
        let dir = Path::new("/d");
        storage.create_dir_all(dir).unwrap();
        storage.open(&dir.join("f"), true).unwrap().sync_data().unwrap();
        storage.sync_dir(dir).unwrap();
        storage.remove_file(&dir.join("f")).unwrap();
        storage.crash(CrashMode::ForgetUnsynced);
        assert!(storage.exists(&dir.join("f")));
    }

    #[test]
    fn a_directory_rename_moves_its_files_and_is_durable_after_sync_dir() {
        let storage = MemStorage::new();
        let root = Path::new("/data");
        storage.create_dir_all(&root.join("a")).unwrap();
        let file = storage.open(&root.join("a/f"), true).unwrap();
        file.write_at(b"kept", 0).unwrap();
        file.sync_data().unwrap();
        storage.sync_dir(&root.join("a")).unwrap();
        storage.rename(&root.join("a"), &root.join("b")).unwrap();
        assert_eq!(storage.contents(&root.join("b/f")).unwrap(), b"kept");
        assert!(!storage.exists(&root.join("a/f")));
        storage.crash(CrashMode::ForgetUnsynced);
        assert!(storage.exists(&root.join("a/f")), "the rename was not synced");
        storage.rename(&root.join("a"), &root.join("b")).unwrap();
        storage.sync_dir(root).unwrap();
        storage.crash(CrashMode::ForgetUnsynced);
        assert_eq!(storage.contents(&root.join("b/f")).unwrap(), b"kept");
        assert!(!storage.exists(&root.join("a")));
        assert_eq!(storage.list_dir(root).unwrap(), vec!["b".to_owned()]);
    }

    #[test]
    fn a_removed_directory_stays_removed_once_its_parent_is_synced() {
        let storage = MemStorage::new();
        let root = Path::new("/data");
        storage.create_dir_all(&root.join("a")).unwrap();
        storage.open(&root.join("a/f"), true).unwrap().sync_data().unwrap();
        storage.sync_dir(&root.join("a")).unwrap();
        storage.remove_dir_all(&root.join("a")).unwrap();
        assert!(!storage.exists(&root.join("a/f")));
        storage.crash(CrashMode::ForgetUnsynced);
        assert!(storage.exists(&root.join("a/f")), "the removal was not synced");
        storage.remove_dir_all(&root.join("a")).unwrap();
        storage.sync_dir(root).unwrap();
        storage.crash(CrashMode::ForgetUnsynced);
        assert!(!storage.exists(&root.join("a")) && !storage.exists(&root.join("a/f")));
        // The same name made again starts empty.
        storage.create_dir_all(&root.join("a")).unwrap();
        assert!(storage.list_dir(&root.join("a")).unwrap().is_empty());
    }

    #[test]
    fn replace_file_is_all_or_nothing_and_read_file_tells_missing_from_empty() {
        let storage = MemStorage::new();
        let root = Path::new("/data");
        storage.create_dir_all(root).unwrap();
        let path = root.join("meta.json");
        assert_eq!(crate::storage::read_file(&storage, &path).unwrap(), None);
        crate::storage::replace_file(&storage, &path, b"one").unwrap();
        storage.fail_after(3); // dies before the rename lands
        assert!(crate::storage::replace_file(&storage, &path, b"two, longer").is_err());
        storage.crash(CrashMode::TornTail { seed: 7 });
        assert_eq!(crate::storage::read_file(&storage, &path).unwrap().unwrap(), b"one");
        crate::storage::replace_file(&storage, &path, b"").unwrap();
        assert_eq!(crate::storage::read_file(&storage, &path).unwrap(), Some(Vec::new()));
    }

    #[test]
    fn power_cut_fails_every_later_call() {
        let storage = MemStorage::new();
        storage.create_dir_all(Path::new("/d")).unwrap();
        let file = storage.open(Path::new("/d/f"), true).unwrap();
        storage.fail_after(1);
        file.write_at(b"a", 0).unwrap();
        assert!(file.write_at(b"b", 1).is_err());
        assert!(file.sync_data().is_err());
        assert!(storage.is_dead());
    }

    #[test]
    fn torn_tail_keeps_a_prefix_of_unsynced_bytes() {
        let storage = MemStorage::new();
        let dir = Path::new("/d");
        storage.create_dir_all(dir).unwrap();
        let file = storage.open(&dir.join("f"), true).unwrap();
        storage.sync_dir(dir).unwrap();
        file.write_at(b"abc", 0).unwrap();
        file.sync_data().unwrap();
        file.write_at(b"defghij", 3).unwrap();
        storage.crash(CrashMode::TornTail { seed: 7 });
        let contents = storage.contents(&dir.join("f")).unwrap();
        assert!(b"abcdefghij".starts_with(&contents) && contents.len() >= 3, "{contents:?}");
    }
}
