//! The host against real plugins compiled from `plugins/` (built by
//! `./scripts/build-plugins.sh`, which the test suite runs first): the four
//! examples do their jobs, and hostile plugins are stopped, capped, logged and
//! refused while the host keeps working.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use plugin_host::{
    CompiledPlugin, ConsumeOutcome, DeadlineClock, HookKind, HostLimits, PackedBatch, Plugin, PluginEngine,
    PluginError, PluginLog, PluginMetrics, ProduceOutcome,
};
use support::wasm;

fn engine(limits: HostLimits) -> PluginEngine {
    PluginEngine::new(limits).unwrap()
}

/// Limits for tests that are not about deadlines: a loaded test machine must
/// not turn a slow call into a failure.
fn relaxed() -> HostLimits {
    HostLimits {
        call_deadline: Duration::from_secs(2),
        call_wall_deadline: Duration::from_secs(60),
        ..HostLimits::default()
    }
}

fn compile(engine: &PluginEngine, name: &str) -> Arc<CompiledPlugin> {
    Arc::new(engine.compile(&wasm(name)).unwrap())
}

fn start(compiled: &Arc<CompiledPlugin>, config: &[(&str, &str)]) -> Result<Plugin, PluginError> {
    let config = config.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
    Plugin::start(compiled.clone(), config, Arc::new(PluginLog::new(64, 1024)), Arc::new(PluginMetrics::default()))
}

fn batch(values: &[&[u8]]) -> PackedBatch {
    let mut batch = PackedBatch::new(-1, 1_000);
    for (delta, value) in values.iter().enumerate() {
        batch.push(
            delta as u32,
            1_000 + delta as i64,
            Some(format!("key-{delta}").as_bytes()),
            Some(value),
            [("h", Some(&b"v"[..]))],
        );
    }
    batch
}

fn keyed(keys: &[&str]) -> PackedBatch {
    let mut batch = PackedBatch::new(-1, 0);
    for (delta, key) in keys.iter().enumerate() {
        batch.push(delta as u32, 0, Some(key.as_bytes()), Some(b"v"), []);
    }
    batch
}

#[test]
fn the_json_validator_accepts_json_and_rejects_the_rest_with_reasons() {
    let engine = engine(relaxed());
    let compiled = compile(&engine, "json_validator");
    assert_eq!(compiled.kind(), HookKind::ProduceInterceptor);
    let mut plugin = start(&compiled, &[]).unwrap();
    assert_eq!(plugin.info().name, "json-validator");
    let mut good = batch(&[b"{\"a\":1}", b"[1,2]", b"\"text\""]);
    assert_eq!(plugin.on_produce("orders", 0, &mut good).unwrap(), ProduceOutcome::Accept);
    let mut bad = batch(&[b"{\"a\":1}", b"{oops", b"42", b"nope"]);
    let ProduceOutcome::Reject(reasons) = plugin.on_produce("orders", 0, &mut bad).unwrap() else { panic!("rejected") };
    assert_eq!(reasons.iter().map(|(index, _)| *index).collect::<Vec<_>>(), vec![1, 3]);
    assert!(reasons[0].1.contains("invalid JSON"), "{reasons:?}");

    let mut strict = start(&compiled, &[("require-object", "true")]).unwrap();
    let ProduceOutcome::Reject(reasons) = strict.on_produce("orders", 0, &mut good).unwrap() else {
        panic!("rejected")
    };
    assert_eq!(reasons, vec![(1, "not a JSON object".to_owned()), (2, "not a JSON object".to_owned())]);
    match start(&compiled, &[("require-object", "maybe")]) {
        Err(PluginError::Config(message)) => assert!(message.contains("require-object"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_region_partitioner_routes_by_key_prefix() {
    let engine = engine(relaxed());
    let compiled = compile(&engine, "region_partitioner");
    assert_eq!(compiled.kind(), HookKind::Partitioner);
    let mut plugin = start(&compiled, &[("region.eu", "0"), ("region.us", "1"), ("region.ap", "5")]).unwrap();
    let partitions = plugin.partition("orders", 4, &mut keyed(&["eu:1", "us:2", "ap:3", "xx", "sa:4"])).unwrap();
    assert_eq!(partitions, vec![Some(0), Some(1), Some(1), None, None], "ap wraps 5 % 4; unknown regions delegate");
    assert!(matches!(start(&compiled, &[]), Err(PluginError::Config(_))));
}

#[test]
fn the_redactor_hides_a_field_except_from_exempt_groups() {
    let engine = engine(relaxed());
    let compiled = compile(&engine, "redact_field");
    let mut plugin = start(&compiled, &[("field", "card"), ("exempt-groups", "audit")]).unwrap();
    let mut input = batch(&[b"{\"card\":\"4111\",\"total\":3}", b"not json", b"{\"total\":4}"]);
    input.base_offset = 40;
    let ConsumeOutcome::Rewrite(output) = plugin.on_consume("payments", 2, Some("billing"), &mut input).unwrap() else {
        panic!("rewritten")
    };
    let records = output.records().unwrap();
    assert_eq!(records.len(), 3);
    let redacted: serde_json::Value = serde_json::from_slice(records[0].value.unwrap()).unwrap();
    assert_eq!(redacted, serde_json::json!({"card": "***", "total": 3}));
    assert_eq!(records[0].key, Some(&b"key-0"[..]), "key and headers stay");
    assert_eq!(records[0].headers, vec![("h", Some(&b"v"[..]))]);
    assert_eq!((records[1].value, records[2].value), (Some(&b"not json"[..]), Some(&b"{\"total\":4}"[..])));
    assert_eq!(plugin.on_consume("payments", 2, Some("audit"), &mut input).unwrap(), ConsumeOutcome::Accept);
}

#[test]
fn the_transform_filters_and_routes_with_new_keys() {
    let engine = engine(relaxed());
    let compiled = compile(&engine, "route_transform");
    let mut plugin = start(&compiled, &[("field", "region"), ("match", "eu")]).unwrap();
    let mut input = batch(&[b"{\"region\":\"eu\",\"n\":1}", b"{\"n\":2}", b"{\"region\":\"us\"}", b"junk"]);
    let output = plugin.process("events", 0, &mut input, 2).unwrap();
    assert_eq!(output.topic_index, vec![0, 1]);
    let records = output.records.records().unwrap();
    assert_eq!((records[0].key, records[1].key), (Some(&b"eu"[..]), Some(&b"us"[..])));
    assert_eq!(records[1].timestamp_ms, 1_002, "the input's timestamp");
    match plugin.process("events", 0, &mut input, 1) {
        Err(PluginError::BadOutput(message)) => assert!(message.contains("output topic 1"), "{message}"),
        other => panic!("{other:?}"),
    }
}

fn engine_with_backstop(wall: Duration) -> PluginEngine {
    engine(HostLimits { call_deadline: Duration::from_secs(60), call_wall_deadline: wall, ..relaxed() })
}

/// CPU time the plugin's calls have used so far.
fn cpu_used(plugin: &Plugin) -> Duration {
    Duration::from_nanos(plugin.metrics().cpu_nanos.load(std::sync::atomic::Ordering::Relaxed))
}

#[test]
fn a_healthy_plugin_near_its_budget_does_not_fail_beside_a_cpu_hog() {
    let budget = Duration::from_millis(40);
    let limits = HostLimits { call_deadline: budget, call_wall_deadline: Duration::from_secs(30), ..relaxed() };
    let engine = engine(limits);
    let compiled = compile(&engine, "hostile");
    // Calibrate: how many iterations make a call use about half its budget.
    let probe_iterations: u64 = 2_000_000;
    let mut probe = start(&compiled, &[("mode", "work"), ("iterations", &probe_iterations.to_string())]).unwrap();
    let before = cpu_used(&probe);
    for _ in 0..3 {
        probe.on_produce("t", 0, &mut batch(&[b"x"])).unwrap();
    }
    let per_call = (cpu_used(&probe) - before) / 3;
    let iterations = (probe_iterations as f64 * (budget / 2).as_secs_f64() / per_call.as_secs_f64()) as u64;
    let mut plugin = start(&compiled, &[("mode", "work"), ("iterations", &iterations.to_string())]).unwrap();

    // Two spinning threads per core: the call's thread gets a fraction of a core.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |cores| cores.get());
    let hogs: Vec<_> = (0..cores * 2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::black_box(0u64);
                }
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    let outcomes: Vec<_> = (0..20)
        .map(|_| {
            let started = Instant::now();
            let outcome = plugin.on_produce("t", 0, &mut batch(&[b"x"]));
            slowest = slowest.max(started.elapsed());
            outcome
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    hogs.into_iter().for_each(|hog| hog.join().unwrap());
    let per_call = cpu_used(&plugin) / 20;
    eprintln!("{iterations} iterations: {per_call:?} of CPU per call; slowest call {slowest:?} elapsed");
    for outcome in outcomes {
        assert_eq!(outcome, Ok(ProduceOutcome::Accept), "{per_call:?} of CPU per call, budget {budget:?}");
    }
}

#[test]
fn an_infinite_loop_stops_within_twice_its_deadline() {
    let deadline = Duration::from_millis(50);
    let engine = engine(HostLimits { call_deadline: deadline, init_deadline: deadline, ..relaxed() });
    let compiled = compile(&engine, "hostile");
    let mut plugin = start(&compiled, &[("mode", "spin")]).unwrap();
    // The budget is CPU time: what the call used, not how long the (possibly
    // busy) machine took to give it that.
    let mut fastest = Duration::MAX;
    for _ in 0..3 {
        let before = cpu_used(&plugin);
        let outcome = plugin.on_produce("t", 0, &mut batch(&[b"x"]));
        fastest = fastest.min(cpu_used(&plugin) - before);
        assert_eq!(outcome, Err(PluginError::Deadline { deadline_ms: 50, clock: DeadlineClock::CpuTime }));
    }
    assert!(fastest < deadline * 2, "stopped after {fastest:?} of CPU time");
    assert!(matches!(start(&compiled, &[("mode", "init-spin")]), Err(PluginError::Deadline { .. })));
    // The wall-clock backstop stops what the CPU budget would let run on.
    let backstop = engine_with_backstop(Duration::from_millis(50));
    let mut spinning = start(&compile(&backstop, "hostile"), &[("mode", "spin")]).unwrap();
    let outcome = spinning.on_produce("t", 0, &mut batch(&[b"x"]));
    assert_eq!(outcome, Err(PluginError::Deadline { deadline_ms: 50, clock: DeadlineClock::WallClock }));
    // The host goes on serving other plugins.
    let mut json = start(&compile(&engine, "json_validator"), &[]).unwrap();
    assert_eq!(json.on_produce("t", 0, &mut batch(&[b"1"])).unwrap(), ProduceOutcome::Accept);
}

#[test]
fn a_memory_bomb_traps_at_its_cap_and_a_panic_reaches_the_log() {
    let engine = engine(HostLimits { memory_bytes: 8 << 20, ..relaxed() });
    let compiled = compile(&engine, "hostile");
    let mut bomb = start(&compiled, &[("mode", "bomb")]).unwrap();
    match bomb.on_produce("t", 0, &mut batch(&[b"x"])) {
        Err(PluginError::Trap(message)) => assert!(message.contains("memory"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(bomb.metrics().instantiations.load(std::sync::atomic::Ordering::Relaxed), 2, "start, then the retry");

    let mut panics = start(&compiled, &[("mode", "panic")]).unwrap();
    match panics.on_produce("t", 0, &mut batch(&[b"x", b"y"])) {
        // One line: what happened and where, not the whole wasm backtrace.
        Err(PluginError::Trap(message)) => {
            assert!(message.contains("unreachable") && message.contains(" (in "), "{message}");
            assert!(!message.contains('\n') && message.len() < 400, "{message}");
        }
        other => panic!("{other:?}"),
    }
    let log = panics.log().entries();
    assert!(
        log.iter()
            .any(|entry| entry.level == "error" && entry.message.contains("hostile plugin panics on a batch of 2")),
        "{log:?}"
    );
    assert!(panics.metrics().traps.load(std::sync::atomic::Ordering::Relaxed) >= 2);

    let mut fine = start(&compiled, &[("mode", "accept")]).unwrap();
    assert_eq!(fine.on_produce("t", 0, &mut batch(&[b"x"])).unwrap(), ProduceOutcome::Accept);
}

#[test]
fn contract_breaking_output_is_refused() {
    let limits = HostLimits { output_bytes_max: 4 << 20, memory_bytes: 64 << 20, ..relaxed() };
    let engine = engine(limits);
    let compiled = compile(&engine, "hostile");
    for (mode, expected) in [("garbage", "outside"), ("miscount", "verdicts for"), ("flood", "bytes of records")] {
        let mut plugin = start(&compiled, &[("mode", mode)]).unwrap();
        match plugin.on_produce("t", 0, &mut batch(&[b"a", b"b", b"c", b"d", b"e", b"f"])) {
            Err(PluginError::BadOutput(message)) => assert!(message.contains(expected), "{mode}: {message}"),
            other => panic!("{mode}: {other:?}"),
        }
    }
    assert!(matches!(start(&compiled, &[("mode", "refuse")]), Err(PluginError::Config(_))));
}

#[test]
fn uploads_that_are_not_plugins_get_clear_errors() {
    let engine = engine(relaxed());
    for (bytes, expected) in [
        (b"not wasm at all".to_vec(), "not a WebAssembly binary"),
        (b"\0asm\x01\0\0\0".to_vec(), "not a component"), // an empty core module
        (b"\0asm\x0d\0\x01\0garbage".to_vec(), "component the host can compile"),
    ] {
        match engine.compile(&bytes) {
            Err(PluginError::Invalid(message)) => assert!(message.contains(expected), "{message}"),
            other => panic!("{other:?}"),
        }
    }
    let mut truncated = wasm("json_validator");
    truncated.truncate(truncated.len() / 2);
    assert!(matches!(engine.compile(&truncated), Err(PluginError::Invalid(_))));
    // A partitioner cannot be run as an interceptor.
    let mut partitioner = start(&compile(&engine, "region_partitioner"), &[("region.eu", "0")]).unwrap();
    assert!(matches!(partitioner.on_produce("t", 0, &mut batch(&[b"x"])), Err(PluginError::Unavailable(_))));
}

/// A component importing `name` (an empty instance) and exporting nothing.
fn component_importing(name: &str) -> Vec<u8> {
    let mut component = wasm_encoder::Component::new();
    let mut types = wasm_encoder::ComponentTypeSection::new();
    types.instance(&wasm_encoder::InstanceType::new());
    component.section(&types);
    let mut imports = wasm_encoder::ComponentImportSection::new();
    imports.import(name, wasm_encoder::ComponentTypeRef::Instance(0));
    component.section(&imports);
    component.finish()
}

#[test]
fn inspection_reads_an_upload_as_compiling_would_without_compiling() {
    let engine = engine(relaxed());
    for name in ["json_validator", "region_partitioner", "redact_field", "identity_transform", "py_noop", "js_noop"] {
        let bytes = wasm(name);
        let inspected = plugin_host::inspect(&bytes).unwrap();
        assert_eq!(inspected.digest, plugin_host::hex_sha256(&bytes), "{name}");
        if !name.contains("_noop") {
            assert_eq!(inspected.kind, engine.compile(&bytes).unwrap().kind(), "{name}");
        }
    }
    assert_eq!(plugin_host::inspect(&wasm("py_noop")).unwrap().kind, HookKind::ProduceInterceptor);
    for (bytes, expected) in [
        (b"not wasm at all".to_vec(), "not a WebAssembly binary".to_owned()),
        (b"\0asm\x01\0\0\0".to_vec(), "not a component".to_owned()),
        (b"\0asm\x0d\0\x01\0garbage".to_vec(), "component the host can read".to_owned()),
        (component_importing("acme:net/sockets@1.0.0"), "imports [\"acme:net/sockets@1.0.0\"]".to_owned()),
        (component_importing("wasi:cli/environment@0.3.0"), "wasi:cli/environment@0.3.0".to_owned()),
        (component_importing("wasi:cli/environment@0.2.3"), "exports none of the".to_owned()),
    ] {
        match plugin_host::inspect(&bytes) {
            Err(PluginError::Invalid(message)) => assert!(message.contains(&expected), "{expected}: {message}"),
            other => panic!("{expected}: {other:?}"),
        }
    }
    // What inspection passes, compiling still checks: an import WASI 0.2
    // names but with a type this host does not give it.
    let odd = component_importing("wasi:cli/environment@0.2.3");
    assert!(matches!(engine.compile(&odd), Err(PluginError::Invalid(_))));
}

#[test]
fn compiled_artifacts_round_trip_through_the_cache_form() {
    let engine = engine(relaxed());
    let compiled = compile(&engine, "json_validator");
    let bytes = compiled.serialize().unwrap();
    // SAFETY: the bytes were just serialized by this engine.
    let loaded = Arc::new(unsafe { engine.deserialize(&bytes, compiled.digest().to_owned()) }.unwrap());
    assert_eq!((loaded.kind(), loaded.digest()), (compiled.kind(), compiled.digest()));
    let mut plugin = start(&loaded, &[]).unwrap();
    assert!(matches!(plugin.on_produce("t", 0, &mut batch(&[b"{"])).unwrap(), ProduceOutcome::Reject(_)));
}

/// A plugin that prints and sleeps, called from a Tokio worker thread (as a
/// producer calls its partitioner): the output reaches the log, the sleep
/// returns at once (nothing a plugin does waits), and nothing panics.
#[test]
fn printing_and_sleeping_neither_blocks_nor_panics_on_a_tokio_worker() {
    let engine = Arc::new(engine(relaxed()));
    let compiled = compile(&engine, "identity_transform");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
    let (done, finished) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        // An hour per record: only a sleep that does not wait lets this end.
        let log = Arc::new(PluginLog::new(64, 1024));
        let config = vec![("print".to_owned(), "true".to_owned()), ("sleep_ms".to_owned(), "3600000".to_owned())];
        let outcome = Plugin::start(compiled, config, log.clone(), Arc::default()).and_then(|mut plugin| {
            plugin.process("in", 0, &mut batch(&[b"one", b"two"]), 1).map(|output| output.records.len())
        });
        let _ = done.send((outcome, log.entries()));
    });
    let (outcome, entries) = finished.recv_timeout(Duration::from_secs(120)).expect("the call returns");
    assert_eq!(outcome, Ok(2), "{entries:?}");
    let lines: Vec<(&str, &str)> = entries.iter().map(|entry| (entry.level, entry.message.as_str())).collect();
    assert!(lines.contains(&("info", "value Some(\"one\")")), "{lines:?}");
    assert!(lines.contains(&("warn", "to stderr too")), "{lines:?}");
}
