//! The machine's own limits, measured at the start of every run on the same disk
//! and loopback the servers use, so results can be read as "Weir ÷ what the
//! hardware allows" as well as "Weir ÷ a peer". Nothing here is pinned: the probes
//! run before the harness pins itself and starts servers.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

const MB: f64 = 1_000_000.0;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Limits {
    /// Sequential buffered 1 MiB writes, then one fsync, MB/s.
    pub buffered_write_then_fsync_mb_per_second: f64,
    /// Sequential O_DIRECT 1 MiB writes, MB/s (0 when the filesystem refuses O_DIRECT).
    pub direct_write_mb_per_second: f64,
    /// 4 KiB appends each followed by fdatasync: operations per second.
    pub fdatasync_4k_per_second: f64,
    /// ... and the median latency of one append + fdatasync, µs.
    pub fdatasync_4k_p50_us: f64,
    /// 256 KiB appends each followed by fdatasync, MB/s.
    pub fdatasync_256k_mb_per_second: f64,
    /// One loopback TCP stream, 1 MiB writes, MB/s.
    pub loopback_mb_per_second: f64,
    /// Loopback TCP ping-pong of one byte, median round trip, µs.
    pub loopback_round_trip_p50_us: f64,
    /// memcpy of 64 MiB buffers, MB/s.
    pub memcpy_mb_per_second: f64,
}

/// How much each probe does.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSizes {
    pub write_bytes: u64,
    pub sync_duration: Duration,
    pub loopback_bytes: u64,
    pub round_trips: u32,
}

impl ProbeSizes {
    pub const FULL: ProbeSizes = ProbeSizes {
        write_bytes: 1 << 30,
        sync_duration: Duration::from_secs(3),
        loopback_bytes: 2 << 30,
        round_trips: 20_000,
    };
    pub const SMOKE: ProbeSizes = ProbeSizes {
        write_bytes: 16 << 20,
        sync_duration: Duration::from_millis(200),
        loopback_bytes: 64 << 20,
        round_trips: 500,
    };
}

pub fn measure(dir: &Path, sizes: ProbeSizes) -> anyhow::Result<Limits> {
    fs::create_dir_all(dir)?;
    let (fdatasync_4k_per_second, fdatasync_4k_p50_us) = fdatasync_appends(dir, 4096, sizes.sync_duration)?;
    let (fdatasync_256k_per_second, _) = fdatasync_appends(dir, 256 * 1024, sizes.sync_duration)?;
    Ok(Limits {
        buffered_write_then_fsync_mb_per_second: buffered_write(dir, sizes.write_bytes)?,
        direct_write_mb_per_second: direct_write(dir, sizes.write_bytes).unwrap_or(0.0),
        fdatasync_4k_per_second,
        fdatasync_4k_p50_us,
        fdatasync_256k_mb_per_second: fdatasync_256k_per_second * 256.0 * 1024.0 / MB,
        loopback_mb_per_second: loopback_stream(sizes.loopback_bytes)?,
        loopback_round_trip_p50_us: loopback_round_trip(sizes.round_trips)?,
        memcpy_mb_per_second: memcpy(),
    })
}

fn buffered_write(dir: &Path, total_bytes: u64) -> anyhow::Result<f64> {
    let path = dir.join("probe-buffered");
    let chunk = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    let mut file = File::create(&path)?;
    let mut written = 0;
    while written < total_bytes {
        file.write_all(&chunk)?;
        written += chunk.len() as u64;
    }
    file.sync_all()?;
    let seconds = started.elapsed().as_secs_f64();
    fs::remove_file(&path)?;
    Ok(written as f64 / MB / seconds)
}

fn direct_write(dir: &Path, total_bytes: u64) -> anyhow::Result<f64> {
    let path = dir.join("probe-direct");
    let layout = std::alloc::Layout::from_size_align(1 << 20, 4096)?;
    // SAFETY: the layout has a non-zero size; the buffer is freed below.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    anyhow::ensure!(!buffer.is_null(), "out of memory");
    // SAFETY: `buffer` points to `layout.size()` initialized bytes.
    let chunk = unsafe { std::slice::from_raw_parts(buffer, layout.size()) };
    let result = (|| {
        let mut file =
            OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(&path)?;
        let started = Instant::now();
        let mut written = 0;
        while written < total_bytes {
            file.write_all(chunk)?;
            written += chunk.len() as u64;
        }
        file.sync_all()?;
        Ok::<_, anyhow::Error>(written as f64 / MB / started.elapsed().as_secs_f64())
    })();
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buffer, layout) };
    let _ = fs::remove_file(&path);
    result
}

/// Appends `write_bytes` then fdatasync, repeatedly for `duration`: (ops/s, p50 µs).
fn fdatasync_appends(dir: &Path, write_bytes: usize, duration: Duration) -> anyhow::Result<(f64, f64)> {
    let path = dir.join("probe-fdatasync");
    let mut file = File::create(&path)?;
    let chunk = vec![0xa5u8; write_bytes];
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let started = Instant::now();
    let mut operations = 0u64;
    while started.elapsed() < duration {
        let one = Instant::now();
        file.write_all(&chunk)?;
        file.sync_data()?;
        latencies.saturating_record(one.elapsed().as_micros() as u64);
        operations += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    fs::remove_file(&path)?;
    Ok((operations as f64 / seconds, latencies.value_at_quantile(0.5) as f64))
}

fn loopback_stream(total_bytes: u64) -> anyhow::Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("loopback listener")?;
    let address = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut stream, _) = listener.accept()?;
        let mut buffer = vec![0u8; 1 << 20];
        let mut received = 0u64;
        loop {
            match stream.read(&mut buffer)? {
                0 => return Ok(received),
                read => received += read as u64,
            }
        }
    });
    let chunk = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(address)?;
    let mut sent = 0u64;
    while sent < total_bytes {
        stream.write_all(&chunk)?;
        sent += chunk.len() as u64;
    }
    drop(stream);
    let received = reader.join().map_err(|_| anyhow::anyhow!("loopback reader panicked"))??;
    Ok(received as f64 / MB / started.elapsed().as_secs_f64())
}

fn loopback_round_trip(round_trips: u32) -> anyhow::Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut byte = [0u8; 1];
        while stream.read(&mut byte)? == 1 {
            stream.write_all(&byte)?;
        }
        Ok(())
    });
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_nodelay(true)?;
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut byte = [7u8; 1];
    for _ in 0..round_trips {
        let started = Instant::now();
        stream.write_all(&byte)?;
        stream.read_exact(&mut byte)?;
        latencies.saturating_record(started.elapsed().as_nanos().div_ceil(1000) as u64);
    }
    drop(stream);
    echo.join().map_err(|_| anyhow::anyhow!("echo thread panicked"))??;
    Ok(latencies.value_at_quantile(0.5) as f64)
}

fn memcpy() -> f64 {
    let source = vec![0x3cu8; 64 << 20];
    let mut target = vec![0u8; 64 << 20];
    target.copy_from_slice(&source); // fault the pages in first
    let started = Instant::now();
    let rounds = 16;
    for round in 0..rounds {
        target.copy_from_slice(&source);
        std::hint::black_box(&mut target[round]);
    }
    (rounds * source.len()) as f64 / MB / started.elapsed().as_secs_f64()
}
