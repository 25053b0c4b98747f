//! [`FileStorage`]: the core's storage seam implemented with real files.
//!
//! Positioned IO through `std::os::unix::fs::FileExt` (pread/pwrite), `fdatasync`
//! for [`File::sync_data`], `fsync` of the directory for [`Storage::sync_dir`], and
//! `memmap2` shared writable maps for the sparse indexes.
//!
//! Safety of the maps: a map is only created over a file this broker owns (a
//! segment index inside its data directory, which no other process writes), after
//! setting the file to the mapped length; the log drops a map before it changes that
//! file's length (`Index::seal`), so no access ever lands past the end of the file.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use broker_core::storage::{File, MapMut, Storage};
use memmap2::MmapMut;

/// The real file system. Stateless; share one instance.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileStorage;

impl Storage for FileStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn File>> {
        let file = OpenOptions::new().read(true).write(true).create(create).truncate(false).open(path)?;
        Ok(Arc::new(RealFile { file, path: path.to_path_buf() }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        fs::File::open(dir)?.sync_all()
    }

    fn map_mut(&self, path: &Path, len_bytes: usize) -> io::Result<Box<dyn MapMut>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        if file.metadata()?.len() != len_bytes as u64 {
            file.set_len(len_bytes as u64)?;
        }
        // SAFETY: see the module docs — the file is ours, sized to the map, and never
        // shrunk while mapped.
        let map = unsafe { MmapMut::map_mut(&file)? };
        // Index lookups are binary searches and appends touch one page at a time:
        // readahead on a fault would read (and zero-fill) megabytes of a mostly
        // sparse preallocated file for an 8-byte write.
        map.advise(memmap2::Advice::Random)?;
        Ok(Box::new(FileMap { map }))
    }
}

/// An open file of the data directory.
#[derive(Debug)]
struct RealFile {
    file: fs::File,
    path: PathBuf,
}

impl File for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        let mut read_count = 0;
        while read_count < buf.len() {
            match self.file.read_at(&mut buf[read_count..], position + read_count as u64) {
                Ok(0) => break,
                Ok(count) => read_count += count,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(read_count)
    }

    fn write_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        self.file.write_all_at(buf, position).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("write of {} bytes at {position} to {}: {error}", buf.len(), self.path.display()),
            )
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

#[derive(Debug)]
struct FileMap {
    map: MmapMut,
}

impl MapMut for FileMap {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn write(&mut self, position: usize, data: &[u8]) {
        self.map[position..position + data.len()].copy_from_slice(data);
    }
}
