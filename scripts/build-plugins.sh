#!/usr/bin/env bash
# Builds the plugin SDK and the first-party plugins (plugins/) as WebAssembly
# components into target/plugins/wasm32-wasip2/release/*.wasm — what the
# plugin tests load — after checking their formatting and lints and running the
# SDK's own unit tests on the host.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v rustup >/dev/null && ! rustup target list --installed | grep -q '^wasm32-wasip2$'; then
  rustup target add wasm32-wasip2
fi
export CARGO_TARGET_DIR="$PWD/target/plugins"
manifest=plugins/Cargo.toml
cargo fmt --manifest-path "$manifest" --all -- --check
cargo clippy --manifest-path "$manifest" --locked --target wasm32-wasip2 --release -- -D warnings
cargo test --manifest-path "$manifest" --locked -p weir-plugin --lib
cargo build --manifest-path "$manifest" --locked --target wasm32-wasip2 --release
ls -1 target/plugins/wasm32-wasip2/release/*.wasm
