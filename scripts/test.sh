#!/usr/bin/env bash
# Weir's whole test suite, as CI runs it: formatting, lints, then every crate's
# tests (unit, property, model-based, crash-consistency, real-file and CLI tests).
# Long randomized runs are gated behind env vars (WEIR_CRASH_SEEDS, WEIR_MODEL_SEEDS);
# the default is a short fixed slice. Benchmarks are separate: cargo bench -p broker.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

printf '\nAll tests passed.\n'
