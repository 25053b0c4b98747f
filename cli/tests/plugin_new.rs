//! `weir plugin new` writes starters that build with their language's tools
//! and run: every hook in Python and JavaScript, and a Rust one, each built
//! here and called with a small batch through the plugin host, which they
//! pass through unchanged. The tools come from `./scripts/build-plugins.sh`
//! (the test suite runs it first): componentize-py in
//! target/plugins/python-venv, componentize-js in plugins/js/node_modules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use plugin_host::{ConsumeOutcome, HostLimits, PackedBatch, Plugin, PluginEngine, PluginLog, ProduceOutcome};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

const HOOKS: [&str; 4] = ["partitioner", "produce-interceptor", "consume-interceptor", "transform"];

fn new_starter(dir: &Path, lang: &str, hook: &str) -> PathBuf {
    let project = dir.join(format!("{lang}-{hook}"));
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["plugin", "new", &format!("my-{hook}"), "--lang", lang, "--hook", hook, "--dir"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("README.md"));
    project
}

fn run(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|error| panic!("{what}: {error}"));
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn tool(path: PathBuf) -> PathBuf {
    assert!(path.exists(), "{}: missing; run ./scripts/build-plugins.sh first", path.display());
    path
}

fn build(project: &Path, lang: &str, hook: &str) -> Vec<u8> {
    let wasm = project.join("out.wasm");
    match lang {
        "python" => run(
            Command::new(tool(repo().join("target/plugins/python-venv/bin/componentize-py")))
                .current_dir(project)
                .args(["-d", "wit", "-w", &format!("{hook}-plugin"), "componentize", "app", "-o", "out.wasm"]),
            "componentize-py",
        ),
        "js" => {
            let cli = tool(repo().join("plugins/js/node_modules/@bytecodealliance/componentize-js/src/cli.js"));
            let world = format!("{hook}-plugin");
            let args =
                ["--wit", "wit", "--world-name", &world, "-d", "http", "fetch-event", "-o", "out.wasm", "plugin.js"];
            run(Command::new("node").current_dir(project).arg(cli).args(args), "componentize-js");
        }
        _ => {
            run(
                Command::new("cargo")
                    .current_dir(project)
                    .env("CARGO_TARGET_DIR", repo().join("target/plugins"))
                    .args(["build", "--offline", "--quiet", "--target", "wasm32-wasip2", "--release"]),
                "cargo build",
            );
            let name = format!("my_{}.wasm", hook.replace('-', "_"));
            std::fs::copy(repo().join("target/plugins/wasm32-wasip2/release").join(name), &wasm).unwrap();
        }
    }
    std::fs::read(wasm).unwrap()
}

/// Builds the starter and calls it once: it must pass every record through.
fn check(engine: &PluginEngine, dir: &Path, lang: &str, hook: &str) {
    let project = new_starter(dir, lang, hook);
    let wasm = build(&project, lang, hook);
    let compiled = Arc::new(engine.compile(&wasm).unwrap_or_else(|error| panic!("{lang} {hook}: {error}")));
    assert_eq!(compiled.kind().name(), hook);
    let log = Arc::new(PluginLog::new(16, 512));
    let config = vec![("greeting".to_owned(), "hello".to_owned())];
    let mut plugin = Plugin::start(compiled, config, log.clone(), Arc::default())
        .unwrap_or_else(|error| panic!("{lang} {hook}: {error}; log {:?}", log.entries()));
    let mut batch = PackedBatch::new(0, 1_000);
    batch.push(0, 1_000, Some(b"k"), Some(b"one"), [("h", Some(&b"v"[..]))]);
    batch.push(1, 1_001, None, Some(b"two"), []);
    let fail = |error: plugin_host::PluginError| format!("{lang} {hook}: {error}; log {:?}", log.entries());
    match hook {
        "partitioner" => assert_eq!(plugin.partition("t", 4, &mut batch).map_err(fail).unwrap(), vec![None, None]),
        "produce-interceptor" => {
            assert_eq!(plugin.on_produce("t", 0, &mut batch).map_err(fail).unwrap(), ProduceOutcome::Accept)
        }
        "consume-interceptor" => {
            assert_eq!(plugin.on_consume("t", 0, None, &mut batch).map_err(fail).unwrap(), ConsumeOutcome::Accept)
        }
        _ => {
            let output = plugin.process("t", 0, &mut batch, 1).map_err(fail).unwrap();
            assert_eq!(output.records.records().unwrap(), batch.records().unwrap(), "{lang}: passed on unchanged");
            assert_eq!(output.topic_index, vec![0, 0]);
        }
    }
    if lang != "rust" {
        let started = log.entries().iter().any(|entry| entry.message.contains("started with"));
        assert!(started, "{lang} {hook}: init logged its config: {:?}", log.entries());
    }
}

/// Each build and compile takes seconds: by default two hooks per
/// interpreted language (between them, all four) and Rust's transform;
/// `WEIR_STARTERS=all` builds every hook in Python and JavaScript.
#[test]
fn starters_build_and_pass_records_through_in_every_language() {
    let temp = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(HostLimits::default()).unwrap();
    let all = std::env::var("WEIR_STARTERS").is_ok_and(|value| value == "all");
    let hooks = |subset: [&'static str; 2]| if all { HOOKS.to_vec() } else { subset.to_vec() };
    let plan = [
        ("python", hooks(["produce-interceptor", "transform"])),
        ("js", hooks(["partitioner", "consume-interceptor"])),
    ];
    std::thread::scope(|scope| {
        for (lang, hooks) in &plan {
            let (engine, dir) = (&engine, temp.path());
            scope.spawn(move || hooks.iter().for_each(|hook| check(engine, dir, lang, hook)));
        }
        check(&engine, temp.path(), "rust", "transform");
    });
}

#[test]
fn a_starter_never_overwrites_and_names_must_be_plain() {
    let temp = tempfile::tempdir().unwrap();
    let weir = || Command::new(env!("CARGO_BIN_EXE_weir"));
    let existing = temp.path().join("taken");
    std::fs::create_dir(&existing).unwrap();
    let output = weir().args(["plugin", "new", "p", "--dir"]).arg(&existing).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("already exists"));
    let output = weir().args(["plugin", "new", "../up", "--dir"]).arg(temp.path().join("x")).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("use letters, digits"));
    let output = weir().args(["plugin", "new", "p", "--lang", "cobol"]).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("possible values: rust, python, js"));
}
