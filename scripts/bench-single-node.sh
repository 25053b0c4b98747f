#!/usr/bin/env bash
# Single-node benchmark: `weir bench` against a fresh `weir serve`, each figure next
# to a machine limit measured in the same run (single-stream loopback TCP, printed
# by `weir bench`; buffered 1 MiB writes to the data directory's filesystem, which
# bounds page-cache produce). Prints one JSON object per measurement.
#
#   scripts/bench-single-node.sh [ROUNDS] [RECORDS]     (defaults: 3, 1000000)
#
# Not part of the test suite: a benchmark is a separate command.
set -euo pipefail
rounds=${1:-3}
records=${2:-1000000}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -p cli --manifest-path "$root/Cargo.toml" >&2
weir="$root/target/release/weir"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
export WEIR_BROKERS="127.0.0.1:$port"
"$weir" serve --data-dir "$work/data" --listen "$WEIR_BROKERS" >"$work/serve.log" 2>&1 &
broker=$!
trap 'kill -TERM $broker 2>/dev/null; wait $broker 2>/dev/null; rm -rf "$work"' EXIT
until "$weir" topic list >/dev/null 2>&1; do sleep 0.1; done

disk_write() { # buffered sequential write of 1 GiB into the data directory, MB/s
  local started ended
  started=$(date +%s.%N)
  dd if=/dev/zero of="$work/data/disk-probe" bs=1M count=1024 status=none
  ended=$(date +%s.%N)
  rm -f "$work/data/disk-probe"
  python3 -c "print(round(1073.741824 / ($ended - $started), 1))"
}

# Each workload starts with `sync`, so the previous one's writeback does not land in
# its figures (fdatasync latency especially).
for round in $(seq "$rounds"); do
  sync
  echo "{\"workload\": \"disk-buffered-write\", \"round\": $round, \"mb_per_second\": $(disk_write)}"
  sync
  "$weir" bench produce --records 200000 --rate 50000 --linger-ms 0 --acks 1 --topic "latency-page-cache-$round" \
    --loopback-bytes 0 --format json 2>/dev/null
  sync
  "$weir" bench produce --records 200000 --rate 50000 --linger-ms 0 --acks all --topic "latency-fsync-$round" \
    --loopback-bytes 0 --format json 2>/dev/null
  sync
  "$weir" bench produce --records "$records" --acks 1 --topic "page-cache-$round" --format json 2>/dev/null
  sync
  "$weir" bench produce --records "$records" --acks all --topic "fsync-$round" --loopback-bytes 0 --format json 2>/dev/null
  sync
  "$weir" bench consume --topic "page-cache-$round" --format json 2>/dev/null
  for topic in "page-cache-$round" "fsync-$round" "latency-page-cache-$round" "latency-fsync-$round"; do
    "$weir" topic delete "$topic" >/dev/null
  done
done
