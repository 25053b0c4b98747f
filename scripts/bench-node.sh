#!/usr/bin/env bash
# The Node SDK next to the Rust client (same Weir broker) and next to kafkajs
# (against the Kafka peer), in one run: sdk-node/bench/sdk.js says what it
# measures. Builds weir and weir-bench (release) and the release addon, fetches
# the peers into target/bench-peers and kafkajs into sdk-node/bench, then runs
#
#   scripts/bench-node.sh [--records 200000] [--rounds 3] [--chunk 500] [--no-kafka]
#
# Not part of the test suite: a benchmark is a separate command.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p cli -p weir-bench
bench/peers/install.sh
(
    cd sdk-node
    npm ci --ignore-scripts --no-audit --no-fund
    npx napi build --platform --release --target-dir ../target/sdk --js native.js --dts native.d.ts
    cd bench && npm ci --no-audit --no-fund
)
exec node --expose-gc sdk-node/bench/sdk.js "$@"
