#!/usr/bin/env bash
# The Go SDK next to the Rust client (same Weir broker) and next to franz-go
# (against the Kafka peer), in one run: sdk-go/bench/bench_test.go says what
# it measures. Builds weir, weir-bench and the Go SDK's library (release),
# fetches the peers into target/bench-peers, then runs the Go benchmarks and
# prints the medians and ratios:
#
#   scripts/bench-go.sh [-benchtime 200000x] [-count 3]
#
# Not part of the test suite: a benchmark is a separate command.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p cli -p weir-bench
make -s -C sdk-go lib
bench/peers/install.sh
cd sdk-go/bench
exec go test -run '^$' -bench . -benchtime 200000x -count 3 "$@"
