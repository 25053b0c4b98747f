//! The storage seam: the only way the core reaches durable media.
//!
//! `broker-core` never touches the file system itself. The partition log talks to
//! a [`Storage`] (a directory tree of files) through three small traits:
//!
//! - [`Storage`]: namespace operations (create, list, remove, rename, sync a directory)
//!   and opening files or memory maps;
//! - [`File`]: positioned reads and writes, `set_len`, and `sync_data` (fdatasync);
//! - [`MapMut`]: a writable memory map, used for the sparse indexes.
//!
//! The server implements them with real files and `memmap2` (`broker::storage`);
//! [`mem::MemStorage`] implements them in memory with POSIX crash semantics (what was
//! not synced is forgotten at a simulated crash), for crash-consistency tests and,
//! later, the simulator.
//!
//! Durability contract every implementation keeps (the log relies on exactly this):
//! - file contents written with [`File::write_at`] or [`MapMut::write`] are durable
//!   only after [`File::sync_data`] on that file returns;
//! - a file size change is durable with the next `sync_data` of that file;
//! - creating, removing or renaming a directory entry is durable only after
//!   [`Storage::sync_dir`] of its parent directory returns.

pub mod mem;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A directory tree of files: the durable medium under one broker's data directory.
///
/// Implementations are shared between threads (`Send + Sync`); every call is
/// independent and may block on IO.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names (not paths) of the entries directly inside `dir`, in no particular order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens `path` for reading and writing; `create` makes it when it does not exist.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn File>>;
    /// Whether `path` names an existing file or directory.
    fn exists(&self, path: &Path) -> bool;
    /// Removes the file at `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Atomically replaces `to` with `from` (a file, or a directory with everything
    /// in it; a directory's `to` must not exist).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the directory `dir` and everything in it.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes every entry creation, removal and rename inside `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Maps `path` (creating it when missing) writable, after setting its length to
    /// `len_bytes` (> 0). The map sees and changes the file's contents.
    fn map_mut(&self, path: &Path, len_bytes: usize) -> io::Result<Box<dyn MapMut>>;
}

/// An open file. Positioned IO only: the log tracks its own write position.
#[allow(clippy::len_without_is_empty)] // mirrors std::fs::Metadata::len; emptiness is never asked
pub trait File: Send + Sync + fmt::Debug {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Reads up to `buf.len()` bytes at `position`; returns how many were read (fewer
    /// only at the end of the file).
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `position`, extending the file when needed.
    fn write_at(&self, buf: &[u8], position: u64) -> io::Result<()>;
    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// fdatasync: makes the contents and size durable.
    fn sync_data(&self) -> io::Result<()>;

    /// Reads exactly `buf.len()` bytes at `position`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        let read_count = self.read_at(buf, position)?;
        if read_count < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("wanted {} bytes at {position}, file had {read_count}", buf.len()),
            ));
        }
        Ok(())
    }
}

/// Reads the whole file at `path`; `Ok(None)` when there is no such file.
pub fn read_file(storage: &dyn Storage, path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = match storage.open(path, false) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let len = usize::try_from(file.len()?).map_err(io::Error::other)?;
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(Some(bytes))
}

/// Replaces the file at `path` with `bytes`, atomically and durably: written to
/// `<path>.tmp`, synced, renamed over `path`, and the directory synced. After a
/// crash the file holds either the old or the new bytes, never a mix.
pub fn replace_file(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = std::path::PathBuf::from(temporary);
    let file = storage.open(&temporary, true)?;
    file.set_len(0)?;
    file.write_at(bytes, 0)?;
    file.sync_data()?;
    storage.rename(&temporary, path)?;
    storage.sync_dir(path.parent().unwrap_or(Path::new("")))
}

/// A writable memory map of a whole file.
pub trait MapMut: Send + Sync + fmt::Debug {
    /// The mapped bytes.
    fn bytes(&self) -> &[u8];
    /// Copies `data` into the map at `position`. Panics when out of bounds (a bug).
    /// Durable after the next [`File::sync_data`] of the same file.
    fn write(&mut self, position: usize, data: &[u8]);
}
