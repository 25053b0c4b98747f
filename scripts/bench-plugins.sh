#!/usr/bin/env bash
# Produce throughput through a no-op produce interceptor next to none, on one
# fresh release broker, interleaved rounds (default 3): 1 KiB records, acks=1,
# page cache. Then the per-record plugin overhead micro benchmark (Criterion).
#
#   scripts/bench-plugins.sh [ROUNDS] [RECORDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
records=${2:-500000}

./scripts/build-plugins.sh >/dev/null
cargo build --release -q -p cli
weir=target/release/weir
data=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
export WEIR_BROKERS=127.0.0.1:$port
"$weir" serve --data-dir "$data" --listen "$WEIR_BROKERS" >"$data.log" 2>&1 &
broker=$!
trap 'kill $broker 2>/dev/null; wait $broker 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 50); do "$weir" topic list >/dev/null 2>&1 && break; sleep 0.1; done

"$weir" plugin upload target/plugins/wasm32-wasip2/release/noop_interceptor.wasm --name noop >/dev/null
mb() { "$weir" bench produce --topic "$1" --records "$records" --acks 1 --loopback-bytes 0 --format json \
  | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["mb_per_second"], 1))'; }
ratios=()
for round in $(seq "$rounds"); do
  for topic in "plain-$round" "intercepted-$round"; do
    "$weir" topic create "$topic" --config flush.policy=interval >/dev/null
  done
  "$weir" topic add-interceptor "intercepted-$round" --plugin noop >/dev/null
  if (( round % 2 )); then plain=$(mb "plain-$round"); intercepted=$(mb "intercepted-$round")
  else intercepted=$(mb "intercepted-$round"); plain=$(mb "plain-$round"); fi
  ratio=$(python3 -c "print(round($intercepted / $plain, 3))")
  ratios+=("$ratio")
  echo "round $round: without $plain MB/s, with a no-op interceptor $intercepted MB/s, ratio $ratio"
  "$weir" topic remove-interceptor "intercepted-$round" --plugin noop >/dev/null
  "$weir" topic delete "plain-$round" >/dev/null; "$weir" topic delete "intercepted-$round" >/dev/null
done
python3 -c "import statistics,sys; print('median ratio', statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
"$weir" plugin describe noop

if [[ "${WEIR_BENCH_MICRO:-1}" == 1 ]]; then
  cargo bench -p plugin-host --bench overhead 2>&1 | grep -E '^256|time:' | grep -v change
fi
