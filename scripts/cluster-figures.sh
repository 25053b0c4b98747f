#!/usr/bin/env bash
# Cluster figures, measured on this machine (a separate command, never a test):
#   1. controller failover: a 3-broker cluster; `kill -9` of the active controller,
#      time until an admin request (topic create) succeeds on another broker;
#      the killed broker is restarted between rounds. p50/p99 over ROUNDS kills.
#      Then partition failover: a topic with replication factor 3; the leader of
#      its partition 0 is killed (kill -9, then SIGTERM), time until an acks=all
#      produce to it succeeds; ROUNDS rounds each.
#   2. creating TOPICS one-partition topics one after another on a single broker.
#   3. start-up of a single broker holding PARTITIONS partitions (clean stop).
# Usage: scripts/cluster-figures.sh [ROUNDS=20] [TOPICS=1000] [PARTITIONS=10000]
# WEIR_BIN picks the binary (default target/release/weir).
set -euo pipefail
ROUNDS=${1:-20}
TOPICS=${2:-1000}
PARTITIONS=${3:-10000}
WEIR=${WEIR_BIN:-target/release/weir}
WORK=$(mktemp -d)
trap 'pkill -P $$ -f "weir serve" 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

now() { date +%s.%N; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
# Prints p50/p99/max of the times given after a label.
summary() {
  python3 - "$@" <<'EOF2'
import sys
what = sys.argv[1]
t = sorted(float(x) for x in sys.argv[2:])
q = lambda p: t[min(len(t) - 1, int(round(p * (len(t) - 1))))]
print(f"{what} over {len(t)} rounds: p50 {q(0.5):.2f} s, p99 {q(0.99):.2f} s, max {t[-1]:.2f} s")
EOF2
}

# ---- 1. controller failover ----
P=($(port) $(port) $(port))
VOTERS="1@127.0.0.1:${P[0]},2@127.0.0.1:${P[1]},3@127.0.0.1:${P[2]}"
declare -A PID
start() {
  local id=$1
  RUST_LOG=warn "$WEIR" serve --node-id "$id" --data-dir "$WORK/c$id" --listen "127.0.0.1:${P[$((id-1))]}" \
    --controller-voters "$VOTERS" >"$WORK/c$id.log" 2>&1 &
  PID[$id]=$!
}
address() { echo "127.0.0.1:${P[$(($1-1))]}"; }
for id in 1 2 3; do start "$id"; done
wait_active() { # until every broker is active, a controller is known, and every broker serves
  for id in 1 2 3; do
    until "$WEIR" topic list --brokers "$(address "$id")" >/dev/null 2>&1; do sleep 0.1; done
  done
  until out=$("$WEIR" cluster status --format json --brokers "$(address "$1")" 2>/dev/null) &&
    [ "$(echo "$out" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(int(s["active_controller"]>0 and all(b["state"]=="active" for b in s["brokers"]) and len(s["brokers"])==3))')" = 1 ]; do
    sleep 0.1
  done
}
wait_active 1
times=()
for round in $(seq 1 "$ROUNDS"); do
  active=""
  until [ -n "$active" ] && [ "$active" -gt 0 ]; do
    for id in 1 2 3; do
      active=$("$WEIR" cluster status --format json --brokers "$(address "$id")" 2>/dev/null |
        json_field '["active_controller"]' 2>/dev/null) && break
    done
  done
  other=$(( active % 3 + 1 ))
  start_time=$(now)
  kill -9 "${PID[$active]}"; wait "${PID[$active]}" 2>/dev/null || true
  until "$WEIR" topic create "failover-$round" --brokers "$(address "$other")" >/dev/null 2>&1; do sleep 0.02; done
  end_time=$(now)
  times+=("$(python3 -c "print($end_time - $start_time)")")
  printf 'round %d: killed controller %d, admin on broker %d after %.2f s\n' "$round" "$active" "$other" "${times[-1]}"
  start "$active"
  wait_active "$other"
done
summary "controller failover (to admin working again)" "${times[@]}"

# ---- 1b. partition failover: RF=3, min.insync.replicas=2, acks=all ----
# The leader of pf-0 is stopped (kill -9, then SIGTERM: a controlled shutdown);
# time until an acks=all produce to pf-0 succeeds through the other brokers.
# It is restarted and back in the ISR before the next round.
"$WEIR" topic create pf --replication-factor 3 --config min.insync.replicas=2 --brokers "$(address 1)" >/dev/null
isr_of_pf0() { "$WEIR" topic describe pf --format json --brokers "$(address "$1")" 2>/dev/null |
  python3 -c 'import json,sys; p=json.load(sys.stdin)["partitions"][0]; print(p["leader"], len(p["isr"]))'; }
partition_failover() { # $1: the signal (KILL or TERM); appends one time per round to FAILOVERS
  local signal=$1 round leader isr other third start_time end_time
  FAILOVERS=()
  for round in $(seq 1 "$ROUNDS"); do
    until read -r leader isr < <(isr_of_pf0 1 || isr_of_pf0 2 || isr_of_pf0 3) && [ "$leader" -gt 0 ] && [ "$isr" = 3 ]; do
      sleep 0.1
    done
    other=$(( leader % 3 + 1 )); third=$(( other % 3 + 1 ))
    start_time=$(now)
    kill -"$signal" "${PID[$leader]}"; wait "${PID[$leader]}" 2>/dev/null || true
    until echo "r$round" | "$WEIR" produce pf --partition 0 --acks all --delivery-timeout-ms 2000 \
      --brokers "$(address "$other"),$(address "$third")" 2>/dev/null | grep -q "1 record(s) acknowledged"; do
      sleep 0.02
    done
    end_time=$(now)
    FAILOVERS+=("$(python3 -c "print($end_time - $start_time)")")
    printf 'round %d: SIG%s to broker %d, leader of pf-0: produced after %.2f s\n' "$round" "$signal" "$leader" "${FAILOVERS[-1]}"
    start "$leader"
    wait_active "$other"
  done
}
partition_failover KILL
summary "partition failover after kill -9 of its leader (to the next acks=all produce)" "${FAILOVERS[@]}"
partition_failover TERM
summary "partition failover after a controlled shutdown of its leader" "${FAILOVERS[@]}"

for id in 1 2 3; do kill "${PID[$id]}" 2>/dev/null || true; done
wait 2>/dev/null || true

# ---- 2 and 3: one broker ----
SP=$(port)
RUST_LOG=warn "$WEIR" serve --data-dir "$WORK/single" --listen "127.0.0.1:$SP" >"$WORK/single.log" 2>&1 &
SINGLE=$!
until "$WEIR" cluster status --brokers "127.0.0.1:$SP" >/dev/null 2>&1; do sleep 0.1; done
start_time=$(now)
for i in $(seq 1 "$TOPICS"); do
  "$WEIR" topic create "t-$i" --brokers "127.0.0.1:$SP" >/dev/null
done
end_time=$(now)
python3 -c "print(f'creating $TOPICS topics one after another (one CLI process each): {($end_time - $start_time):.1f} s, {($end_time - $start_time) / $TOPICS * 1000:.1f} ms per topic')"
per_topic=1000
topics=$(( (PARTITIONS + per_topic - 1) / per_topic ))
for i in $(seq 1 "$topics"); do
  "$WEIR" topic create "wide-$i" --partitions "$per_topic" --brokers "127.0.0.1:$SP" >/dev/null
done
kill "$SINGLE"; wait "$SINGLE" 2>/dev/null || true
start_time=$(now)
RUST_LOG=info "$WEIR" serve --data-dir "$WORK/single" --listen "127.0.0.1:$SP" >"$WORK/single2.log" 2>&1 &
SINGLE=$!
until grep -q "listening" "$WORK/single2.log"; do sleep 0.05; done
end_time=$(now)
python3 -c "print(f'start-up with $((topics * per_topic + TOPICS + 8)) partitions (clean stop before): {($end_time - $start_time):.2f} s')"
kill "$SINGLE"; wait "$SINGLE" 2>/dev/null || true
