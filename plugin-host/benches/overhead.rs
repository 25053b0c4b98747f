//! Per-record cost of running plugins, next to a memcpy baseline from the same
//! run: batches of 256 records with 1 KiB values (16-byte keys), through a
//! no-op produce interceptor and an identity transform (both written with the
//! guest SDK, from `plugins/fixtures`), no-op produce interceptors written in
//! Python and JavaScript (`plugins/python/fixtures/noop`,
//! `plugins/js/fixtures/noop`), and a plain append of the same records into a
//! packed batch (what building the batch costs anyway).
//!
//! `cargo bench -p plugin-host --bench overhead` (after ./scripts/build-plugins.sh).
//! Criterion prints time per batch and records per second; per record = time / 256.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use plugin_host::{HostLimits, PackedBatch, Plugin, PluginEngine, PluginLog, PluginMetrics, ProduceOutcome};

const RECORDS: usize = 256;

fn wasm(name: &str) -> Vec<u8> {
    let dir = match std::env::var_os("WEIR_PLUGIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/wasm32-wasip2/release"),
    };
    std::fs::read(dir.join(format!("{name}.wasm"))).expect("build the plugins first: ./scripts/build-plugins.sh")
}

fn records() -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..RECORDS).map(|index| (format!("key-{index:012}").into_bytes(), vec![b'v'; 1024])).collect()
}

fn fill(batch: &mut PackedBatch, records: &[(Vec<u8>, Vec<u8>)]) {
    batch.clear(-1, 1_000);
    for (delta, (key, value)) in records.iter().enumerate() {
        batch.push(delta as u32, 1_000, Some(key), Some(value), []);
    }
}

fn overhead(c: &mut Criterion) {
    let engine = PluginEngine::new(HostLimits::default()).unwrap();
    let start = |name: &str| {
        let compiled = Arc::new(engine.compile(&wasm(name)).unwrap());
        Plugin::start(compiled, Vec::new(), Arc::new(PluginLog::new(16, 256)), Arc::new(PluginMetrics::default()))
            .unwrap()
    };
    let records = records();
    let mut batch = PackedBatch::default();
    fill(&mut batch, &records);

    let mut group = c.benchmark_group("256 x 1 KiB records");
    group.throughput(Throughput::Elements(RECORDS as u64));
    let mut scratch = PackedBatch::default();
    group.bench_function("memcpy append baseline", |b| {
        b.iter(|| {
            fill(&mut scratch, black_box(&records));
            black_box(scratch.arena.len())
        })
    });
    let mut interceptor = start("noop_interceptor");
    group.bench_function("no-op produce interceptor", |b| {
        b.iter(|| {
            let outcome = interceptor.on_produce("bench", 0, black_box(&mut batch)).unwrap();
            assert_eq!(outcome, ProduceOutcome::Accept);
        })
    });
    for (name, label) in
        [("py_noop", "no-op produce interceptor (Python)"), ("js_noop", "no-op produce interceptor (JavaScript)")]
    {
        let mut interpreted = start(name);
        group.bench_function(label, |b| {
            b.iter(|| {
                let outcome = interpreted.on_produce("bench", 0, black_box(&mut batch)).unwrap();
                assert_eq!(outcome, ProduceOutcome::Accept);
            })
        });
    }
    let mut transform = start("identity_transform");
    group.bench_function("identity transform", |b| {
        b.iter(|| {
            let output = transform.process("bench", 0, black_box(&mut batch), 1).unwrap();
            assert_eq!(output.topic_index.len(), RECORDS);
        })
    });
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
