#!/usr/bin/env bash
# Weir vs NATS JetStream vs Apache Kafka, one machine, one run (bench/README.md).
# Builds weir and weir-bench (release) and the WebAssembly plugins, fetches the
# peers into target/bench-peers, then runs `weir-bench run` with the given flags:
#
#   scripts/bench-compare.sh            full run: report in bench/results/<date>.md
#   scripts/bench-compare.sh --smoke    seconds; report in target/bench-smoke/
#   scripts/bench-compare.sh --systems weir,kafka --workloads max-ingest --rounds 5
#
# Not part of the test suite (which runs its own smoke slice): a benchmark is a
# separate command.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-plugins.sh >/dev/null
cargo build --release --locked -p cli -p weir-bench
bench/peers/install.sh
exec target/release/weir-bench run "$@"
