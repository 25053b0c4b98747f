//! Fuzzing the broker's append-time validation ([`ValidatedBatches::new`]) with
//! seeded mutations of valid produce requests: bit flips, byte overwrites, cuts,
//! splices, varint edits and codec swaps — each with the CRC fixed up afterwards
//! in half of the cases, so the mutations reach the record checks behind it.
//!
//! Properties, for every input: no panic; no allocation beyond the decompression
//! bound (a counting allocator watches the peak); and whatever validation accepts,
//! every client can decode — each accepted batch decodes fully, with record `i` at
//! offset delta `i`.
//!
//! Runs `WEIR_FUZZ_EXECS` executions (default 10,000 — the slice the test command
//! runs; pass 10000000 for a long run) from `WEIR_FUZZ_SEED` (default 0). A failure
//! prints the seed of its execution; `WEIR_FUZZ_SEED=s WEIR_FUZZ_EXECS=1` replays it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use abi::batch::{field, BatchBuilder, BatchView, Compression, RecordBatch, DECOMPRESSED_BYTES_MAX};
use broker_core::log::{LogConfig, ValidatedBatches};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Counts live heap bytes and their peak, so an input that makes validation
/// allocate without bound fails the run.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().map_or(default, |value| value.parse().expect("a number"))
}

/// A valid produce request: one to three batches of random records.
fn valid_request(rng: &mut StdRng) -> Vec<u8> {
    let mut request = Vec::new();
    for _ in 0..rng.gen_range(1..=3) {
        let compression = [Compression::None, Compression::Lz4, Compression::Zstd][rng.gen_range(0..3)];
        let mut builder = BatchBuilder::new(1_700_000_000_000).compression(compression).unwrap();
        for _ in 0..rng.gen_range(1..=8) {
            let key: Vec<u8> = (0..rng.gen_range(0..12)).map(|_| rng.gen()).collect();
            let value: Vec<u8> = (0..rng.gen_range(0..200)).map(|_| rng.gen_range(b'a'..=b'e')).collect();
            let header_value = [rng.gen::<u8>()];
            let headers: &[(&str, Option<&[u8]>)] = if rng.gen_bool(0.3) { &[("h", Some(&header_value))] } else { &[] };
            let key = if rng.gen_bool(0.2) { None } else { Some(key.as_slice()) };
            builder.push(1_700_000_000_000 + rng.gen_range(0..1_000), key, Some(&value), headers);
        }
        request.extend(builder.encode());
    }
    request
}

/// Rewrites the CRC of every batch whose framing is intact, so that mutations of
/// covered bytes reach the checks after the CRC.
fn fix_crcs(request: &mut [u8]) {
    let mut position = 0;
    while position < request.len() {
        let Ok((view, _)) = BatchView::split_first(&request[position..]) else { return };
        let size = view.size_bytes();
        abi::batch::reseal(&mut request[position..position + size]);
        position += size;
    }
}

fn mutate(rng: &mut StdRng, request: &mut Vec<u8>) {
    for _ in 0..rng.gen_range(1..=4) {
        if request.is_empty() {
            return;
        }
        let at = rng.gen_range(0..request.len());
        match rng.gen_range(0..8) {
            0 => request[at] ^= 1 << rng.gen_range(0..8),
            1 => request[at] = rng.gen(),
            2 => request.truncate(at),
            3 => {
                let end = (at + rng.gen_range(1..16)).min(request.len());
                request.drain(at..end);
            }
            4 => {
                let extra: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.gen()).collect();
                request.splice(at..at, extra);
            }
            // A record-section varint set to an extreme (lengths, deltas, counts).
            5 => {
                let extreme = [0x7f, 0x80, 0xff, 0x01, 0x00][rng.gen_range(0..5)];
                request[at] = extreme;
            }
            // The codec bits of a batch header.
            6 if request.len() > field::ATTRIBUTES + 1 => {
                request[field::ATTRIBUTES + 1] = (request[field::ATTRIBUTES + 1] & !7) | rng.gen_range(0..8);
            }
            // The records count or last offset delta.
            _ if request.len() > field::RECORDS_COUNT + 4 => {
                let target = if rng.gen_bool(0.5) { field::RECORDS_COUNT } else { field::LAST_OFFSET_DELTA };
                let value: i32 = [0, -1, 1, 2, i32::MAX, i32::MIN][rng.gen_range(0..6)];
                request[target..target + 4].copy_from_slice(&value.to_be_bytes());
            }
            _ => {}
        }
    }
    if rng.gen_bool(0.5) {
        fix_crcs(request);
    }
}

/// What every client does with a stored batch: decode it fully.
fn assert_decodes(request: &[u8], seed: u64) {
    let mut rest = request;
    while !rest.is_empty() {
        let (view, tail) = BatchView::split_first(rest).unwrap();
        let batch = RecordBatch::decode(view.as_bytes())
            .unwrap_or_else(|error| panic!("seed {seed}: validation accepted a batch clients cannot decode: {error}"));
        for (index, record) in batch.records.iter().enumerate() {
            assert_eq!(record.offset_delta as usize, index, "seed {seed}: record offset deltas");
        }
        assert_eq!(batch.records.len(), view.records_count() as usize, "seed {seed}: records count");
        rest = tail;
    }
}

#[test]
fn validation_never_panics_never_overallocates_and_accepts_only_decodable_batches() {
    let first_seed = env_number("WEIR_FUZZ_SEED", 0);
    let execs = env_number("WEIR_FUZZ_EXECS", 10_000);
    let config = LogConfig::default();
    let (mut accepted, mut refused) = (0u64, 0u64);
    for seed in first_seed..first_seed + execs {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut request = valid_request(&mut rng);
        if rng.gen_range(0..10) > 0 {
            mutate(&mut rng, &mut request);
        }
        let input_bytes = request.len();
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let outcome = {
            let mut owned = request.clone();
            ValidatedBatches::new(&mut owned, &config).map(|validated| validated.batch_count())
        };
        let allocated = PEAK.load(Ordering::Relaxed) - before;
        // Validation may decompress up to the bound (plus the codec's own window).
        let allowed = input_bytes * 2 + DECOMPRESSED_BYTES_MAX + (8 << 20);
        assert!(allocated <= allowed, "seed {seed}: validation allocated {allocated} bytes for {input_bytes}");
        match outcome {
            Ok(_) => {
                assert_decodes(&request, seed);
                accepted += 1;
            }
            Err(_) => refused += 1,
        }
    }
    eprintln!("{execs} executions from seed {first_seed}: {accepted} accepted, {refused} refused");
    assert!(accepted > 0 && refused > 0, "the mutations must reach both outcomes");
}
