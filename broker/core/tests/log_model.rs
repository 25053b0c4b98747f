//! Model-based test of the partition log: for many seeds, a random [`LogConfig`] and
//! a random sequence of operations run against a [`Log`] on a [`MemStorage`] and,
//! side by side, against a trivial model (`BTreeMap<offset, Stored>` plus the batch
//! boundaries and sizes). After every operation the log must agree with the model.
//!
//! Operations: append (one or two batches, 1..=8 records, timestamps from a simulated
//! clock with some disorder), read (random offset, `max_bytes` and `offset_end`),
//! roll, `truncate_to`, `apply_retention` + delete, `offset_for_timestamp`, flush, a
//! flush *racing* another operation (begin, op, execute, complete), clean reopen, and
//! crash (`ForgetUnsynced` or `TornTail`) followed by recovery.
//!
//! What is checked:
//! - after every op: log start/end equal the model's, offsets are dense and every
//!   record (offset, timestamp, value) equals the model, `size_bytes` equals the sum
//!   of the model's batch sizes, segment bases are batch boundaries, the durable
//!   offset never passes the log end and only moves back on truncation or recovery;
//! - reads return whole, valid batches starting with the one holding the offset,
//!   consecutive, below `offset_end`, as many as fit in `max_bytes` within the
//!   segment; reads outside `[start, end]` are `OffsetOutOfRange`;
//! - truncation cuts exactly at the base of the batch holding the offset;
//! - retention only moves the start forward, to a batch boundary, retires exactly
//!   the bytes the model drops, and never deletes a record time retention alone
//!   would keep or takes the log below `retention_bytes` by size alone;
//! - `offset_for_timestamp` is the first offset (in offset order) whose record
//!   timestamp is `>=` the target;
//! - a clean close + reopen changes nothing and reports a clean shutdown;
//! - a crash keeps every record below the durable offset observed before it; records
//!   above may be lost, but what survives equals the model's prefix.
//!
//! Each seed also draws its own op weights ("swarm testing": an op may be switched
//! off or made four times likelier), so some runs never flush and others crash or
//! truncate constantly.
//!
//! Reproducing a failure: the failure report names the seed and the op index, lists
//! every op of the run, and prints the command that reruns just that seed:
//! `WEIR_MODEL_SEED=<seed> cargo test -p broker-core --test log_model`.
//! Longer runs: `WEIR_MODEL_SEEDS=<count>` (default 300), `WEIR_MODEL_OPS=<ops per
//! seed>` (default 150), and `WEIR_MODEL_KEEP_GOING=1` to list every failing seed
//! instead of stopping at the first.
//!
//! The last two tests are minimal, deterministic reproductions of log bugs this model
//! test found (flush rounds racing a truncation or a roll).

mod support;

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::panic::{self, AssertUnwindSafe};

use abi::batch::BatchView;
use broker_core::log::{AppendInfo, Log, LogConfig, LogError};
use broker_core::storage::mem::{CrashMode, MemStorage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{batch, open, read_all, records_of, Stored};

const DEFAULT_SEED_COUNT: u64 = 300;
const DEFAULT_OPS_PER_SEED: usize = 150;
const CLOCK_START_MS: i64 = 1_000_000;
const WEEK_MS: i64 = 7 * 24 * 60 * 60 * 1000;
const LEADER_EPOCH: i32 = 3;

#[test]
fn log_matches_the_model_under_random_operations() {
    let settings = Settings::from_env();
    let mut failures = Vec::new();
    for seed in settings.seeds.clone() {
        let mut harness = Harness::new(seed);
        let Err(panic) = panic::catch_unwind(AssertUnwindSafe(|| harness.run(settings.ops_per_seed))) else { continue };
        if !settings.keep_going {
            eprintln!("{}", harness.failure_report(&settings));
            panic::resume_unwind(panic);
        }
        failures.push(harness.failure_line(&panic_message(panic.as_ref())));
    }
    assert!(failures.is_empty(), "{} seed(s) failed:\n{}", failures.len(), failures.join("\n"));
}

/// Run settings, from the environment:
/// - `WEIR_MODEL_SEED=n`: run only seed n (to reproduce a failure);
/// - `WEIR_MODEL_SEEDS=n`: run seeds `0..n` (default 300);
/// - `WEIR_MODEL_OPS=n`: ops per seed (default 150; longer runs reach deeper states);
/// - `WEIR_MODEL_KEEP_GOING=1`: do not stop at the first failing seed; list them all.
#[derive(Clone, Debug)]
struct Settings {
    seeds: std::ops::Range<u64>,
    ops_per_seed: usize,
    keep_going: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let number = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|value| value.parse::<u64>().unwrap_or_else(|_| panic!("{name}={value}: not a number")))
        };
        let seeds = match (number("WEIR_MODEL_SEED"), number("WEIR_MODEL_SEEDS")) {
            (Some(seed), _) => seed..seed + 1,
            (None, count) => 0..count.unwrap_or(DEFAULT_SEED_COUNT),
        };
        let ops_per_seed = number("WEIR_MODEL_OPS").map_or(DEFAULT_OPS_PER_SEED, |ops| ops as usize);
        Settings { seeds, ops_per_seed, keep_going: std::env::var_os("WEIR_MODEL_KEEP_GOING").is_some() }
    }

    /// The command that reruns `seed` alone with these settings.
    fn reproduce(&self, seed: u64) -> String {
        let ops = match self.ops_per_seed {
            DEFAULT_OPS_PER_SEED => String::new(),
            ops => format!("WEIR_MODEL_OPS={ops} "),
        };
        format!("{ops}WEIR_MODEL_SEED={seed} cargo test -p broker-core --test log_model")
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic.downcast_ref::<String>().map(String::as_str).or_else(|| panic.downcast_ref::<&str>().copied());
    message.unwrap_or("(no message)").lines().next().unwrap_or_default().to_owned()
}

// ---------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------

/// One batch as appended: its last offset and its bytes as stamped by the append
/// (the log must store and return exactly these bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
struct BatchMeta {
    last: u64,
    bytes: Vec<u8>,
}

impl BatchMeta {
    fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// What the log should hold.
#[derive(Debug, Default)]
struct Model {
    records: BTreeMap<u64, Stored>,
    /// Base offset → batch.
    batches: BTreeMap<u64, BatchMeta>,
    start: u64,
    end: u64,
}

impl Model {
    fn append(&mut self, batches: &[Vec<(i64, Vec<u8>)>], stamped: &[&[u8]]) {
        for (records, bytes) in batches.iter().zip(stamped) {
            let base = self.end;
            for (timestamp, value) in records {
                let offset = self.end;
                self.records.insert(offset, Stored { offset, timestamp: *timestamp, value: value.clone() });
                self.end += 1;
            }
            self.batches.insert(base, BatchMeta { last: self.end - 1, bytes: bytes.to_vec() });
        }
    }

    /// The batch holding `offset`, as `(base, meta)`.
    fn batch_holding(&self, offset: u64) -> Option<(u64, &BatchMeta)> {
        let (&base, meta) = self.batches.range(..=offset).next_back()?;
        (meta.last >= offset).then_some((base, meta))
    }

    fn is_boundary(&self, offset: u64) -> bool {
        offset == self.start || offset == self.end || self.batches.contains_key(&offset)
    }

    /// Where `truncate_to(offset)` must leave the log end.
    fn truncation_end(&self, offset: u64) -> u64 {
        self.batch_holding(offset).map_or(self.end, |(base, _)| base)
    }

    fn truncate(&mut self, end: u64) {
        self.records.split_off(&end);
        self.batches.split_off(&end);
        self.end = end;
    }

    /// Drops everything below `start`; returns the dropped records and bytes.
    fn retain_from(&mut self, start: u64) -> (Vec<Stored>, u64) {
        let kept_records = self.records.split_off(&start);
        let dropped = std::mem::replace(&mut self.records, kept_records);
        let kept_batches = self.batches.split_off(&start);
        let dropped_batches = std::mem::replace(&mut self.batches, kept_batches);
        self.start = start;
        (dropped.into_values().collect(), dropped_batches.values().map(BatchMeta::size_bytes).sum())
    }

    fn size_bytes(&self) -> u64 {
        self.batches.values().map(BatchMeta::size_bytes).sum()
    }

    /// Every batch's bytes, back to back: what reading the whole log returns.
    fn all_bytes(&self) -> Vec<u8> {
        let mut all = Vec::with_capacity(self.size_bytes() as usize);
        for meta in self.batches.values() {
            all.extend_from_slice(&meta.bytes);
        }
        all
    }

    fn records_in(&self, offsets: std::ops::Range<u64>) -> Vec<Stored> {
        self.records.range(offsets).map(|(_, record)| record.clone()).collect()
    }

    fn first_at_or_after(&self, timestamp: i64) -> Option<u64> {
        self.records.values().find(|record| record.timestamp >= timestamp).map(|record| record.offset)
    }

    /// The model's own consistency: dense offsets, batches tile the records.
    fn check_self(&self) {
        let expected_end = self.records.keys().next_back().map_or(self.start, |last| last + 1);
        assert_eq!(self.end, expected_end, "model: end is the last offset + 1 (or the start when empty)");
        assert!(self.records.keys().copied().eq(self.start..self.end), "model: offsets are dense");
        let mut next = self.start;
        for (&base, meta) in &self.batches {
            assert!(base == next && meta.last >= base, "model: batch at {base} does not follow {next}");
            next = meta.last + 1;
        }
        assert_eq!(next, self.end, "model: batches cover the records");
    }
}

// ---------------------------------------------------------------------------------
// The harness: one seed's log, model, clock and trace
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Append,
    Read,
    Roll,
    Truncate,
    Retention,
    OffsetForTimestamp,
    Flush,
    RacingFlush,
    Reopen,
    Crash,
}

const OP_WEIGHTS: [(Op, u32); 10] = [
    (Op::Append, 40),
    (Op::Read, 16),
    (Op::Roll, 4),
    (Op::Truncate, 5),
    (Op::Retention, 6),
    (Op::OffsetForTimestamp, 8),
    (Op::Flush, 6),
    (Op::RacingFlush, 5),
    (Op::Reopen, 3),
    (Op::Crash, 5),
];

/// The operations a racing flush interleaves between `begin_flush` and `execute`.
const RACING_OPS: [Op; 4] = [Op::Append, Op::Roll, Op::Truncate, Op::Retention];

struct Harness {
    seed: u64,
    rng: StdRng,
    storage: MemStorage,
    config: LogConfig,
    /// `None` only inside a reopen or crash.
    log: Option<Log>,
    model: Model,
    clock_ms: i64,
    /// The durable offset last observed; it may only drop where an op says so.
    durable: u64,
    /// This seed's op weights (see [`random_weights`]).
    weights: Vec<(Op, u32)>,
    /// One line per op, for the failure report.
    trace: Vec<String>,
}

impl Harness {
    fn new(seed: u64) -> Harness {
        let mut rng = StdRng::seed_from_u64(seed);
        let config = random_config(&mut rng);
        let weights = random_weights(&mut rng);
        let storage = MemStorage::new();
        let log = open(&storage, &config).expect("open a new log");
        let trace = Vec::new();
        let (model, durable) = (Model::default(), 0);
        let clock_ms = CLOCK_START_MS;
        Harness { seed, rng, storage, config, log: Some(log), model, clock_ms, durable, weights, trace }
    }

    fn run(&mut self, op_count: usize) {
        for _ in 0..op_count {
            self.clock_ms += self.rng.gen_range(0..50);
            let op = self.pick_op();
            self.apply(op);
            self.check_invariants();
        }
    }

    fn pick_op(&mut self) -> Op {
        let total: u32 = self.weights.iter().map(|(_, weight)| weight).sum();
        let mut roll = self.rng.gen_range(0..total);
        for &(op, weight) in &self.weights {
            if roll < weight {
                return op;
            }
            roll -= weight;
        }
        unreachable!("weights cover the range")
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Append => self.append(),
            Op::Read => self.read(),
            Op::Roll => self.roll(),
            Op::Truncate => {
                self.truncate();
            }
            Op::Retention => self.retention(),
            Op::OffsetForTimestamp => self.offset_for_timestamp(),
            Op::Flush => self.flush(),
            Op::RacingFlush => self.racing_flush(),
            Op::Reopen => self.reopen(),
            Op::Crash => self.crash(),
        }
    }

    fn note(&mut self, line: String) {
        self.trace.push(line);
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("the log is open")
    }

    fn log_mut(&mut self) -> &mut Log {
        self.log.as_mut().expect("the log is open")
    }

    fn failure_report(&self, settings: &Settings) -> String {
        let step = self.trace.len().saturating_sub(1);
        let failed_op = self.trace.last().map_or("(setup)", String::as_str);
        let mut report = format!(
            "\n=== log_model: seed {} FAILED at op #{step}: {failed_op}\nreproduce: {}\nconfig: {:?}\nop weights: {:?}\nops:\n",
            self.seed,
            settings.reproduce(self.seed),
            self.config,
            self.weights,
        );
        for (index, line) in self.trace.iter().enumerate() {
            report.push_str(&format!("  #{index:<3} {line}\n"));
        }
        report
    }

    /// One line for the keep-going summary.
    fn failure_line(&self, message: &str) -> String {
        let step = self.trace.len().saturating_sub(1);
        let failed_op = self.trace.last().map_or("(setup)", String::as_str);
        format!("seed {} op #{step} [{failed_op}]: {message}", self.seed)
    }

    fn random_offset(&mut self, range: RangeInclusive<u64>) -> u64 {
        self.rng.gen_range(range)
    }
}

/// `len` pseudo-random bytes from `seed` (xorshift64*: `StdRng` per byte is slow in
/// debug builds, and values need no quality).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Swarm testing: each seed scales every op's weight by 0, 1 or 4 (appends always
/// stay), so some runs never flush, others crash or truncate a lot, reaching states
/// a single fixed mix rarely does.
fn random_weights(rng: &mut StdRng) -> Vec<(Op, u32)> {
    let scale = |rng: &mut StdRng, op: Op| match (op, rng.gen_range(0..4)) {
        (Op::Append, _) | (_, 1 | 2) => 1,
        (_, 0) => 0,
        _ => 4,
    };
    OP_WEIGHTS.iter().map(|&(op, weight)| (op, weight * scale(rng, op))).collect()
}

fn random_config(rng: &mut StdRng) -> LogConfig {
    let segment_bytes_max = rng.gen_range(2048..=8192);
    LogConfig {
        segment_bytes_max,
        batch_bytes_max: segment_bytes_max as u32,
        index_interval_bytes: rng.gen_range(64..=512),
        index_bytes_max: rng.gen_range(1024..=4096),
        retention_ms: rng.gen_bool(0.5).then(|| rng.gen_range(500..=5000)),
        retention_bytes: rng.gen_bool(0.4).then(|| rng.gen_range(2048..=24_576)),
        segment_ms: if rng.gen_bool(0.5) { WEEK_MS } else { rng.gen_range(50..=2000) },
        ..LogConfig::default()
    }
}

// ---------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------

impl Harness {
    /// 1..=8 records split over one or two batches.
    fn random_batches(&mut self) -> Vec<Vec<(i64, Vec<u8>)>> {
        let record_count = self.rng.gen_range(1..=8usize);
        let mut records: Vec<(i64, Vec<u8>)> = (0..record_count).map(|_| self.random_record()).collect();
        if record_count >= 2 && self.rng.gen_bool(0.25) {
            let second = records.split_off(self.rng.gen_range(1..record_count));
            return vec![records, second];
        }
        vec![records]
    }

    fn random_record(&mut self) -> (i64, Vec<u8>) {
        let timestamp = self.clock_ms - self.rng.gen_range(0..20);
        let len = self.rng.gen_range(0..200);
        (timestamp, noise(self.rng.gen(), len))
    }

    fn append(&mut self) {
        let batches = self.random_batches();
        let encoded: Vec<Vec<u8>> = batches.iter().map(|records| batch(records)).collect();
        let sizes: Vec<usize> = encoded.iter().map(Vec::len).collect();
        let counts: Vec<usize> = batches.iter().map(Vec::len).collect();
        let timestamps: Vec<i64> = batches.iter().flatten().map(|(timestamp, _)| *timestamp).collect();
        self.note(format!("append batches of {counts:?} records ({sizes:?} bytes), timestamps {timestamps:?}"));
        let mut bytes = encoded.concat();
        let info = self.log_mut().append(&mut bytes, LEADER_EPOCH).expect("append");
        let record_count = counts.iter().sum::<usize>() as u64;
        let base_offset = self.model.end;
        let expected =
            AppendInfo { base_offset, last_offset: base_offset + record_count - 1, batch_count: batches.len() };
        assert_eq!(info, expected, "append result");
        let (first, second) = bytes.split_at(sizes[0]); // `second` is empty for one batch
        self.model.append(&batches, &[first, second]);
    }

    fn read(&mut self) {
        let (start, end) = (self.model.start, self.model.end);
        let offset = self.random_offset(start..=end);
        let max_bytes = self.rng.gen_range(1..=3000);
        let offset_end = self.rng.gen_bool(0.3).then(|| self.rng.gen_range(start..=end + 2));
        self.note(format!("read offset {offset} max_bytes {max_bytes} offset_end {offset_end:?}"));
        let segment_bases = self.log().segment_base_offsets();
        check_read(self.log(), &self.model, &segment_bases, ReadRequest { offset, max_bytes, offset_end });
        if start > 0 && self.rng.gen_bool(0.3) {
            let below = self.random_offset(0..=start - 1);
            check_out_of_range(self.log(), &self.model, below);
        }
        if self.rng.gen_bool(0.1) {
            check_out_of_range(self.log(), &self.model, end + 1);
        }
    }

    fn roll(&mut self) {
        self.note("roll".to_owned());
        let before = self.log().segment_base_offsets();
        self.log_mut().roll().expect("roll");
        let after = self.log().segment_base_offsets();
        let active_was_empty = before.last() == Some(&self.model.end);
        let mut expected = before;
        if !active_was_empty {
            expected.push(self.model.end);
        }
        assert_eq!(after, expected, "roll starts a segment at the log end unless the active one is empty");
    }

    /// Returns whether anything was cut (only then does a truncation bump the
    /// generation that makes in-flight flushes stale).
    fn truncate(&mut self) -> bool {
        let offset = self.random_offset(self.model.start..=self.model.end + 2);
        self.note(format!("truncate_to {offset}"));
        let (expected_end, end_before) = (self.model.truncation_end(offset), self.model.end);
        let durable_before = self.log().durable_offset();
        let new_end = self.log_mut().truncate_to(offset).expect("truncate_to");
        assert!(new_end <= offset, "truncation end {new_end} above the request {offset}");
        assert_eq!(new_end, expected_end, "truncate_to({offset}) cuts at the base of the batch holding it");
        assert_eq!(self.log().durable_offset(), durable_before.min(new_end), "truncation caps the durable offset");
        self.durable = self.log().durable_offset();
        self.model.truncate(new_end);
        offset < end_before
    }

    fn retention(&mut self) {
        let now_ms = self.clock_ms;
        self.note(format!("apply_retention now {now_ms}"));
        let (start_before, size_before) = (self.log().log_start_offset(), self.log().size_bytes());
        let bases_before = self.log().segment_base_offsets();
        let retired = self.log_mut().apply_retention(now_ms).expect("apply_retention");
        let start = self.log().log_start_offset();
        let Some(retired) = retired else {
            assert_eq!(start, start_before, "no retention, no start move");
            return;
        };
        assert!(
            start > start_before || self.model.records.is_empty(),
            "retention moved the start {start_before} -> {start}"
        );
        assert!(self.model.is_boundary(start) && start <= self.model.end, "new start {start} is a batch boundary");
        let retired_segments = bases_before.iter().filter(|base| **base < start).count();
        assert_eq!(retired.segment_count, retired_segments, "retired segment count");
        let (dropped, dropped_bytes) = self.model.retain_from(start);
        assert_eq!(retired.size_bytes, dropped_bytes, "retired bytes = the dropped batches' bytes");
        self.check_retention_rules(now_ms, &dropped, size_before);
        retired.delete().expect("delete retired segments");
        if start > 0 {
            check_out_of_range(self.log(), &self.model, start - 1);
        }
    }

    /// With a single retention rule configured, what it deleted must be deletable.
    fn check_retention_rules(&self, now_ms: i64, dropped: &[Stored], size_before: u64) {
        match (self.config.retention_ms, self.config.retention_bytes) {
            (Some(retention_ms), None) => {
                let young = dropped.iter().find(|record| now_ms - record.timestamp <= retention_ms);
                assert!(young.is_none(), "time retention deleted a young record {young:?} at {now_ms}");
            }
            (None, Some(retention_bytes)) => {
                let size = self.log().size_bytes();
                assert!(size >= retention_bytes.min(size_before), "size retention went below the limit: {size}");
            }
            (None, None) => panic!("retention deleted segments with no retention configured"),
            (Some(_), Some(_)) => {}
        }
    }

    fn offset_for_timestamp(&mut self) {
        let timestamp = self.random_timestamp();
        self.note(format!("offset_for_timestamp {timestamp}"));
        let found = self.log().offset_for_timestamp(timestamp).expect("offset_for_timestamp");
        assert_eq!(found, self.model.first_at_or_after(timestamp), "offset_for_timestamp({timestamp})");
    }

    /// Mostly near existing record timestamps (to hit boundaries), sometimes anywhere.
    fn random_timestamp(&mut self) -> i64 {
        let count = self.model.records.len();
        if count > 0 && self.rng.gen_bool(0.7) {
            let index = self.rng.gen_range(0..count);
            let record = self.model.records.values().nth(index).expect("index below the count");
            return record.timestamp + self.rng.gen_range(-2..=2);
        }
        self.rng.gen_range(CLOCK_START_MS - 50..=self.clock_ms + 50)
    }

    fn flush(&mut self) {
        self.note("flush".to_owned());
        let durable = self.log_mut().flush().expect("flush");
        assert_eq!(durable, self.model.end, "flush makes everything durable");
        assert!(!self.log().has_unflushed(), "nothing left to flush");
    }

    /// `begin_flush`, another op, then `execute` and `complete_flush`: the group
    /// commit protocol with an op running while the syncs happen.
    fn racing_flush(&mut self) {
        let ticket = self.log_mut().begin_flush();
        let target = ticket.as_ref().map(|ticket| ticket.target_offset());
        let op = RACING_OPS[self.rng.gen_range(0..RACING_OPS.len())];
        self.note(format!("racing flush: begin_flush (target {target:?}), then:"));
        let truncated = match op {
            Op::Truncate => self.truncate(),
            _ => {
                self.apply(op);
                false
            }
        };
        self.note("racing flush: execute + complete_flush".to_owned());
        let Some(ticket) = ticket else { return };
        let durable_before = self.log().durable_offset();
        let result = ticket.execute();
        let durable = self.log_mut().complete_flush(ticket, result).expect("complete_flush");
        let target = target.expect("a ticket has a target");
        if truncated {
            assert_eq!(durable, durable_before, "a flush begun before a truncation moves nothing");
        } else {
            assert_eq!(durable, durable_before.max(target.min(self.model.end)), "complete_flush reaches the target");
        }
    }

    /// Clean close, sometimes a crash (nothing may be lost after a clean close), reopen.
    fn reopen(&mut self) {
        let crash_after_close = self.rng.gen_bool(0.5);
        self.note(format!("close + reopen (crash after close: {crash_after_close})"));
        let bases = self.log().segment_base_offsets();
        self.log.take().expect("the log is open").close().expect("close");
        if crash_after_close {
            self.storage.crash(CrashMode::ForgetUnsynced);
        }
        let log = open(&self.storage, &self.config).expect("reopen after a clean close");
        let report = log.recovery_report();
        assert!(report.clean_shutdown && report.segments_scanned == 0, "clean reopen: {report:?}");
        assert_eq!(log.segment_base_offsets(), bases, "segments survive a clean reopen");
        assert_eq!(log.durable_offset(), self.model.end, "everything is durable after a reopen");
        self.durable = log.durable_offset();
        self.log = Some(log);
        self.check_records();
    }

    fn crash(&mut self) {
        let flush_first = self.rng.gen_bool(0.3);
        let mode = match self.rng.gen_bool(0.5) {
            true => CrashMode::ForgetUnsynced,
            false => CrashMode::TornTail { seed: self.rng.gen() },
        };
        self.note(format!("crash {mode:?} (flush first: {flush_first})"));
        if flush_first {
            self.log_mut().flush().expect("flush before the crash");
        }
        let durable = self.log().durable_offset();
        drop(self.log.take());
        self.storage.crash(mode);
        let log = open(&self.storage, &self.config).expect("recovery after a crash");
        self.check_recovered(&log, durable);
        self.durable = log.durable_offset();
        self.log = Some(log);
        self.check_records();
    }

    fn check_recovered(&mut self, log: &Log, durable_before_crash: u64) {
        let report = log.recovery_report();
        assert!(!report.clean_shutdown, "a crash is not a clean shutdown: {report:?}");
        let end = log.log_end_offset();
        assert!(
            end >= durable_before_crash,
            "recovery lost durable records: end {end} < durable {durable_before_crash}"
        );
        assert!(end <= self.model.end, "recovery invented records: end {end} > {}", self.model.end);
        assert!(self.model.is_boundary(end), "recovered end {end} is not a batch boundary");
        assert_eq!(log.log_start_offset(), self.model.start, "recovery keeps the log start");
        assert_eq!(log.durable_offset(), end, "everything recovered is durable");
        self.model.truncate(end);
    }
}

// ---------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------

impl Harness {
    fn check_invariants(&mut self) {
        self.model.check_self();
        let log = self.log();
        assert_eq!(log.fenced_reason(), None, "the log is not fenced");
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (self.model.start, self.model.end), "start, end");
        let durable = log.durable_offset();
        assert!(durable <= self.model.end, "durable offset {durable} past the log end {}", self.model.end);
        assert!(durable >= self.durable, "durable offset went back {} -> {durable}", self.durable);
        assert_eq!(log.size_bytes(), self.model.size_bytes(), "size_bytes = sum of the batches' sizes");
        self.check_segment_bases();
        let chunk = self.rng.gen_range(1..=4000);
        let bytes = read_all_bytes(self.log(), chunk);
        assert!(bytes == self.model.all_bytes(), "reading the whole log (chunks of {chunk}) differs from the model");
        self.durable = durable;
    }

    /// The decoded records, through the shared helper (the byte comparison after
    /// every op already implies it; this also runs `support::read_all`).
    fn check_records(&mut self) {
        let chunk = self.rng.gen_range(1..=4000);
        let records = read_all(self.log(), chunk);
        assert!(records.iter().eq(self.model.records.values()), "read_all({chunk}) differs from the model");
    }

    fn check_segment_bases(&self) {
        let bases = self.log().segment_base_offsets();
        assert_eq!(bases.first(), Some(&self.model.start), "the first segment starts the log: {bases:?}");
        assert!(bases.windows(2).all(|pair| pair[0] < pair[1]), "segment bases increase: {bases:?}");
        let misplaced = bases.iter().find(|base| !self.model.is_boundary(**base) || **base > self.model.end);
        assert!(misplaced.is_none(), "segment base {misplaced:?} is not a batch boundary: {bases:?}");
    }
}

/// Every stored byte from the log start to the log end, read in chunks of `max_bytes`.
fn read_all_bytes(log: &Log, max_bytes: usize) -> Vec<u8> {
    let (mut all, mut buffer) = (Vec::new(), Vec::new());
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let info = log.read(offset, max_bytes, None).expect("plan").read_into(&mut buffer).expect("read");
        assert!(info.batch_count > 0 && info.first_offset == offset, "read at {offset} gave {info:?}");
        all.extend_from_slice(&buffer);
        offset = info.next_offset;
    }
    all
}

#[derive(Clone, Copy, Debug)]
struct ReadRequest {
    offset: u64,
    max_bytes: usize,
    offset_end: Option<u64>,
}

/// One batch of a read result.
#[derive(Debug)]
struct ReadBatch<'a> {
    base: u64,
    last: u64,
    bytes: &'a [u8],
}

/// Splits a read result into batches, checking each is whole and valid.
fn split_batches(mut bytes: &[u8]) -> Vec<ReadBatch<'_>> {
    let mut batches = Vec::new();
    while !bytes.is_empty() {
        let (view, rest) = BatchView::split_first(bytes).expect("reads return whole batches");
        view.validate().expect("reads return valid batches");
        let base = u64::try_from(view.base_offset()).expect("stamped base offset");
        let last = base + u64::try_from(view.last_offset_delta()).expect("valid last offset delta");
        assert_eq!(view.partition_leader_epoch(), LEADER_EPOCH, "append stamps the leader epoch");
        batches.push(ReadBatch { base, last, bytes: view.as_bytes() });
        bytes = rest;
    }
    batches
}

fn check_read(log: &Log, model: &Model, segment_bases: &[u64], request: ReadRequest) {
    let ReadRequest { offset, max_bytes, offset_end } = request;
    let plan = log.read(offset, max_bytes, offset_end).expect("a read inside the log plans");
    assert_eq!((plan.log_start_offset, plan.log_end_offset), (model.start, model.end), "plan's start and end");
    let mut buffer = vec![0xAA; 7];
    let info = plan.read_into(&mut buffer).expect("read_into");
    let batches = split_batches(&buffer);
    let limit = offset_end.unwrap_or(model.end).min(model.end);
    let Some((first_base, first)) = model.batch_holding(offset).filter(|(_, meta)| meta.last < limit) else {
        assert!(batches.is_empty(), "{request:?}: nothing readable below offset_end, got {batches:?}");
        assert_eq!((info.first_offset, info.next_offset, info.batch_count), (offset, offset, 0), "{request:?}");
        return;
    };
    assert_eq!(batches.first().map(|batch| batch.base), Some(first_base), "{request:?}: starts with the holding batch");
    for batch in &batches {
        let meta = model.batches.get(&batch.base).expect("a returned batch is in the model");
        assert!(meta.last == batch.last && meta.bytes == batch.bytes, "{request:?}: batch at {} differs", batch.base);
        assert!(batch.last < limit, "{request:?}: batch {batch:?} reaches offset_end {limit}");
    }
    assert!(batches.windows(2).all(|pair| pair[1].base == pair[0].last + 1), "{request:?}: consecutive batches");
    let next_offset = batches.last().map_or(offset, |batch| batch.last + 1);
    assert_eq!((info.first_offset, info.next_offset, info.batch_count), (first_base, next_offset, batches.len()));
    assert_eq!(records_of(&buffer), model.records_in(first_base..next_offset), "{request:?}: records");
    let total = buffer.len() as u64;
    let budget = (max_bytes as u64).max(first.size_bytes());
    assert!(total <= budget, "{request:?}: {total} bytes read, budget {budget}");
    check_read_is_maximal(model, segment_bases, request, next_offset, budget - total);
}

/// The batch after the last one returned was left out for a reason: it does not fit
/// the budget, reaches `offset_end`, lies in the next segment, or does not exist.
fn check_read_is_maximal(model: &Model, segment_bases: &[u64], request: ReadRequest, next: u64, budget_left: u64) {
    let limit = request.offset_end.unwrap_or(model.end).min(model.end);
    let Some(meta) = model.batches.get(&next) else { return };
    let fits = meta.size_bytes() <= budget_left;
    let excluded = meta.last >= limit || segment_bases.contains(&next);
    assert!(!fits || excluded, "{request:?}: the batch at {next} fits but was not returned");
}

fn check_out_of_range(log: &Log, model: &Model, offset: u64) {
    match log.read(offset, 100, None) {
        Err(LogError::OffsetOutOfRange { offset: o, log_start_offset, log_end_offset }) => {
            assert_eq!((o, log_start_offset, log_end_offset), (offset, model.start, model.end), "out of range error");
        }
        other => panic!("read at {offset} outside [{}, {}] gave {other:?}", model.start, model.end),
    }
}

// ---------------------------------------------------------------------------------
// Minimal reproductions of log bugs the model test found
// ---------------------------------------------------------------------------------

fn append_one(log: &mut Log, timestamp: i64, value: u8) {
    log.append(&mut batch(&[(timestamp, vec![value; 100])]), 0).expect("append");
}

/// A flush round begun before a truncation still writes its (stale) recovery point
/// in `execute`. The log grows back below that point over new, unsynced segments;
/// after a crash recovery trusts them unscanned: the log has a hole (its end claims
/// offsets no read returns), or a torn, never-durable tail is reported as corruption
/// of synced data and the partition stays fenced.
#[test]
fn a_flush_racing_a_truncation_leaves_no_stale_recovery_point() {
    let modes = std::iter::once(CrashMode::ForgetUnsynced).chain((0..8).map(|seed| CrashMode::TornTail { seed }));
    for mode in modes {
        let storage = MemStorage::new();
        let config = support::small_config();
        let mut log = open(&storage, &config).expect("open");
        (0..10).for_each(|i| append_one(&mut log, 1000 + i, 0));
        log.roll().expect("roll");
        (10..20).for_each(|i| append_one(&mut log, 1000 + i, 0));
        let ticket = log.begin_flush().expect("unflushed data");
        assert_eq!(log.truncate_to(0).expect("truncate"), 0);
        let result = ticket.execute();
        log.complete_flush(ticket, result).expect("complete_flush");
        for _ in 0..2 {
            (0..5).for_each(|i| append_one(&mut log, 2000 + i, 1));
            log.roll().expect("roll");
        }
        append_one(&mut log, 3000, 2);
        assert_eq!(log.truncate_to(10).expect("truncate"), 10);
        drop(log);
        storage.crash(mode);
        let log = open(&storage, &config).unwrap_or_else(|error| panic!("{mode:?}: recovery failed: {error}"));
        let bases = log.segment_base_offsets();
        let end = log.log_end_offset();
        assert_eq!(readable_end(&log), end, "{mode:?}: every offset below the log end reads (segments {bases:?})");
    }
}

/// Where reading from the log start stops making progress (the log end if it never does).
fn readable_end(log: &Log) -> u64 {
    let (mut offset, mut buffer) = (log.log_start_offset(), Vec::new());
    while offset < log.log_end_offset() {
        let info = log.read(offset, 10_000, None).expect("plan").read_into(&mut buffer).expect("read");
        if info.batch_count == 0 {
            break;
        }
        offset = info.next_offset;
    }
    offset
}

/// A roll between `begin_flush` and `execute` seals the ticket's active segment; the
/// round syncs its `.log` but not its trimmed indexes, yet checkpoints the recovery
/// point past it. After a crash that segment is trusted with a torn index: its max
/// timestamp comes out too low and `offset_for_timestamp` skips it.
#[test]
fn a_roll_racing_a_flush_keeps_the_sealed_segment_timestamps() {
    let config = support::small_config();
    for torn_seed in 0..200 {
        let storage = MemStorage::new();
        let mut log = open(&storage, &config).expect("open");
        append_one(&mut log, 900, 0);
        log.roll().expect("roll");
        (0..12).for_each(|i| append_one(&mut log, if i == 2 { 5000 } else { 1000 + i }, 1));
        let ticket = log.begin_flush().expect("unflushed data");
        log.roll().expect("roll");
        let result = ticket.execute();
        log.complete_flush(ticket, result).expect("complete_flush");
        drop(log);
        storage.crash(CrashMode::TornTail { seed: torn_seed });
        let log = open(&storage, &config).expect("recovery");
        assert_eq!(log.log_end_offset(), 13, "torn seed {torn_seed}: everything was flushed");
        let found = log.offset_for_timestamp(4000).expect("offset_for_timestamp");
        assert_eq!(found, Some(3), "torn seed {torn_seed}: the record stamped 5000 is at offset 3");
    }
}
