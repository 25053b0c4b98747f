//! Plugins written in Python (componentize-py) and JavaScript
//! (componentize-js), built by `./scripts/build-plugins.sh` from
//! `plugins/python` and `plugins/js`, run under the host's defaults: the
//! interpreters they embed get the WASI 0.2 world they need, and nothing more.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Instant;

use plugin_host::{ConsumeOutcome, HostLimits, PackedBatch, Plugin, PluginEngine, PluginLog, PluginMetrics};
use support::wasm;

fn start(engine: &PluginEngine, name: &str, config: &[(&str, &str)]) -> (Plugin, Arc<PluginLog>) {
    let started = Instant::now();
    let compiled = Arc::new(engine.compile(&wasm(name)).unwrap());
    let compiled_in = started.elapsed();
    let config = config.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
    let log = Arc::new(PluginLog::new(64, 1024));
    let plugin = Plugin::start(compiled, config, log.clone(), Arc::new(PluginMetrics::default()))
        .unwrap_or_else(|error| panic!("{name}: {error}; log: {:?}", log.entries()));
    eprintln!("{name}: compiled in {compiled_in:?}, started in {:?}", started.elapsed() - compiled_in);
    (plugin, log)
}

#[test]
fn a_python_consume_interceptor_runs_under_the_default_limits() {
    let engine = PluginEngine::new(HostLimits::default()).unwrap();
    let (mut plugin, log) = start(&engine, "py_upper", &[]);
    let mut input = PackedBatch::new(7, 1_000);
    input.push(0, 1_000, Some(b"k0"), Some(b"hello"), [("h", Some(&b"v"[..]))]);
    input.push(1, 1_001, None, Some(b"drop-me"), []);
    input.push(2, 1_002, Some(b"k2"), Some(b"SHOUT"), []);
    input.push(3, 1_003, Some(b"k3"), None, []);
    let ConsumeOutcome::Rewrite(output) = plugin.on_consume("t", 0, None, &mut input).unwrap() else {
        panic!("rewritten")
    };
    let records = output.records().unwrap();
    let values: Vec<_> = records.iter().map(|record| record.value).collect();
    assert_eq!(values, vec![Some(&b"HELLO"[..]), Some(&b"SHOUT"[..]), None]);
    assert_eq!(records[0].key, Some(&b"k0"[..]));
    assert_eq!(records[0].headers, vec![("h", Some(&b"v"[..]))]);
    assert_eq!(records.iter().map(|record| record.offset_delta).collect::<Vec<_>>(), vec![0, 2, 3]);
    assert_eq!(records.iter().map(|record| record.timestamp_ms).collect::<Vec<_>>(), vec![1_000, 1_002, 1_003]);
    assert!(log.entries().iter().any(|entry| entry.message.contains("upper")), "{:?}", log.entries());
}

#[test]
fn a_javascript_transform_runs_under_the_default_limits() {
    let engine = PluginEngine::new(HostLimits::default()).unwrap();
    let (mut plugin, log) = start(&engine, "js_reverse", &[]);
    let mut input = PackedBatch::new(40, 5_000);
    input.push(0, 5_000, Some(b"k0"), Some(b"abc"), [("h", Some(&b"v"[..])), ("n", None)]);
    input.push(1, 4_990, None, None, []);
    input.push(2, 5_010, Some(b""), Some(b"xy"), []);
    let output = plugin.process("in", 0, &mut input, 1).unwrap();
    assert_eq!(output.topic_index, vec![0, 0, 0]);
    let records = output.records.records().unwrap();
    let values: Vec<_> = records.iter().map(|record| record.value).collect();
    assert_eq!(values, vec![Some(&b"cba"[..]), None, Some(&b"yx"[..])]);
    assert_eq!(
        records.iter().map(|record| record.key).collect::<Vec<_>>(),
        vec![Some(&b"k0"[..]), None, Some(&b""[..])]
    );
    assert_eq!(records[0].headers, vec![("h", Some(&b"v"[..])), ("n", None)]);
    assert_eq!(records.iter().map(|record| record.timestamp_ms).collect::<Vec<_>>(), vec![5_000, 4_990, 5_010]);
    assert!(log.entries().iter().any(|entry| entry.message.contains("reverse")), "{:?}", log.entries());
}

#[test]
fn limits_set_in_the_configuration_apply_to_that_plugin_alone() {
    let engine = PluginEngine::new(HostLimits::default()).unwrap();
    let compiled = Arc::new(engine.compile(&wasm("noop_interceptor")).unwrap());
    let config =
        |pairs: &[(&str, &str)]| pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect();
    let started = |pairs: &[(&str, &str)]| {
        Plugin::start(compiled.clone(), config(pairs), Arc::new(PluginLog::new(8, 256)), Arc::default())
    };
    let plugin = started(&[("weir.call_deadline_ms", "250"), ("weir.memory_bytes_max", "67108864")]).unwrap();
    assert_eq!(plugin.limits().call_deadline, std::time::Duration::from_millis(250));
    assert_eq!(plugin.limits().memory_bytes, 64 << 20);
    assert_eq!(plugin.config().len(), 2, "the plugin keeps what it was given");
    for (pairs, named) in [
        (&[("weir.call_deadline_ms", "0")][..], "weir.call_deadline_ms must be a whole number from 1 to 60000"),
        (&[("weir.memory_bytes_max", "lots")][..], "weir.memory_bytes_max must be"),
        (&[("weir.fuel", "1")][..], "weir.fuel is not a setting the host knows"),
    ] {
        match started(pairs) {
            Err(plugin_host::PluginError::Config(message)) => assert!(message.contains(named), "{message}"),
            other => panic!("{pairs:?}: {other:?}"),
        }
    }
}

/// componentize-js keeps some of every call's garbage for the life of an
/// instance: the host starts a fresh one before the memory cap is reached, so
/// no call fails.
#[test]
fn an_interpreter_that_keeps_garbage_is_given_fresh_instances_before_its_cap() {
    let engine = PluginEngine::new(HostLimits::default()).unwrap();
    // JavaScript needs ~20 ms for 1,000 records: more than the default budget.
    let (mut plugin, log) = start(&engine, "js_reverse", &[("weir.call_deadline_ms", "2000")]);
    let value = vec![b'x'; 1024];
    let mut input = PackedBatch::new(0, 0);
    for delta in 0..1_000 {
        input.push(delta, 0, None, Some(&value), []);
    }
    for call in 0..150 {
        let output = plugin.process("in", 0, &mut input, 1).unwrap_or_else(|error| panic!("call {call}: {error}"));
        assert_eq!(output.records.len(), 1_000);
    }
    let instantiations = plugin.metrics().instantiations.load(std::sync::atomic::Ordering::Relaxed);
    assert!(instantiations > 1, "150 MB of input through a 64 MiB instance needs fresh instances");
    assert_eq!(plugin.metrics().traps.load(std::sync::atomic::Ordering::Relaxed), 0, "{:?}", log.entries());
}
