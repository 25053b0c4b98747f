//! [`DataDirLock`]: a data directory is owned by one process at a time.
//!
//! Two brokers on one directory would both "recover" the same partitions, append
//! to the same segments and write each other's clean-shutdown markers: acknowledged
//! records lost, partitions fenced. So the owner takes an exclusive advisory lock
//! (`flock`) on `<data_dir>/.lock` before it reads or writes anything else there,
//! and holds it until it drops the [`DataDirLock`]. The file also records the
//! holder's pid, so a refused process can say who holds it. The kernel releases the
//! lock when the holder dies (even by `kill -9`); a stale file is harmless.
//!
//! Taken by the broker ([`crate::Node::open`]) and by offline tools that write
//! (`weir repair --truncate`).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside the data directory.
pub const LOCK_FILE: &str = ".lock";

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataDirLockError {
    /// Another live process holds the lock.
    #[error(
        "data directory {} is in use by another process ({}): stop it first, or use another data directory",
        dir.display(),
        holder.map_or_else(|| "pid unknown".to_owned(), |pid| format!("pid {pid}"))
    )]
    InUse { dir: PathBuf, holder: Option<u32> },
    #[error("cannot lock data directory {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases the directory.
#[derive(Debug)]
pub struct DataDirLock {
    dir: PathBuf,
    _file: File,
}

impl DataDirLock {
    /// Locks `dir` (creating it when missing) for this process, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, DataDirLockError> {
        let io = |source| DataDirLockError::Io { dir: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut contents = String::new();
                let holder = file.read_to_string(&mut contents).ok().and_then(|_| contents.trim().parse().ok());
                return Err(DataDirLockError::InUse { dir: dir.to_path_buf(), holder });
            }
            Err(TryLockError::Error(source)) => return Err(io(source)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataDirLock { dir: dir.to_path_buf(), _file: file })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_until_the_first_is_dropped() {
        let temp = tempfile::tempdir().expect("temp dir");
        let first = DataDirLock::acquire(temp.path()).expect("first lock");
        match DataDirLock::acquire(temp.path()) {
            Err(DataDirLockError::InUse { holder, .. }) => assert_eq!(holder, Some(std::process::id())),
            other => panic!("expected InUse, got {other:?}"),
        }
        drop(first);
        DataDirLock::acquire(temp.path()).expect("free again");
    }
}
