//! Repository hygiene that `cargo test` enforces: every Rust source file opens with
//! a `//!` doc comment saying what it is (STYLE.md) — or, if generated, with
//! `// @generated` — and no file carries leftover debugging markers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

use std::fs;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("cli/ sits in the workspace root").to_path_buf()
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            rust_files(&path, files);
        } else if name.ends_with(".rs") {
            files.push(path);
        }
    }
}

fn is_generated(text: &str) -> bool {
    text.starts_with("// @generated")
}

fn all_rust_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    for crate_dir in ["abi", "broker", "client", "cli"] {
        rust_files(&root.join(crate_dir), &mut files);
    }
    assert!(files.len() > 20, "found only {} files: is the walk broken?", files.len());
    files
}

#[test]
fn every_rust_file_opens_with_a_module_doc() {
    let missing: Vec<String> = all_rust_files()
        .into_iter()
        .filter(|path| {
            let text = fs::read_to_string(path).unwrap();
            // Generated files say so on line 1 instead (and are checked for freshness).
            !text.starts_with("//!") && !is_generated(&text)
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a leading //! doc:\n{}", missing.join("\n"));
}

#[test]
fn no_leftover_debugging_markers() {
    let markers = [concat!("dbg", "!("), concat!("to", "do!("), concat!("unimpl", "emented!(")];
    let mut found = Vec::new();
    for path in all_rust_files() {
        let text = fs::read_to_string(&path).unwrap();
        if is_generated(&text) {
            continue;
        }
        for marker in markers.iter().filter(|marker| text.contains(*marker)) {
            found.push(format!("{}: {marker}", path.display()));
        }
    }
    assert!(found.is_empty(), "leftover markers:\n{}", found.join("\n"));
}
