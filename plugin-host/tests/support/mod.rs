//! What the host's integration tests share: the plugins `scripts/build-plugins.sh` built.

use std::path::PathBuf;

/// Where the built plugins are (`WEIR_PLUGIN_DIR`, else the build's output).
pub fn plugin_dir() -> PathBuf {
    match std::env::var_os("WEIR_PLUGIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/wasm32-wasip2/release"),
    }
}

/// The bytes of built plugin `name`.
pub fn wasm(name: &str) -> Vec<u8> {
    let path = plugin_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|error| {
        panic!("{}: {error}; build the plugins first: ./scripts/build-plugins.sh", path.display())
    })
}
