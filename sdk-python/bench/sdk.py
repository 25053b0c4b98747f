"""The Python SDK's throughput as a ratio to the Rust client's, on the same
broker in the same run. A benchmark, not a test.

    python sdk-python/bench/sdk.py --brokers 127.0.0.1:9292 [--records 200000] [--rounds 3]

Each round, on fresh page-cache topics (flush.policy=interval, one partition):
  produce  1 KiB records, acks=1: Python `Producer.produce_many` in chunks, every
           acknowledgement checked with `Deliveries.wait`, next to `weir bench produce`;
  consume  the same topic read from offset 0: Python `Consumer.poll_batch`
           (a `weir.Message` per record, value as `bytes`), next to `weir bench consume`.
Prints each round and the medians: throughput ratios (python / rust MB/s, which
on a small machine also carry the broker's and the page cache's swings) and
client CPU ratios (rust CPU-seconds / python CPU-seconds for the same bytes, the
steadier measure of what the Python layer costs; above 1 = Python spends less). Build the extension with
`maturin develop --release` first: a debug build measures the wrong thing.
"""

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import time

import weir

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cpu_seconds(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def rust_bench(args, workload, topic, *extra):
    """(MB/s, CPU seconds of the `weir bench` process)."""
    before = cpu_seconds(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [args.weir, "bench", workload, "--topic", topic, "--loopback-bytes", "0", "--format", "json",
         "--brokers", args.brokers, *extra],
        capture_output=True, check=True, text=True)
    return json.loads(done.stdout)["mb_per_second"], cpu_seconds(resource.RUSAGE_CHILDREN) - before


def measured(workload):
    """(MB/s, CPU seconds of this process) of a Python workload."""
    def run(*args):
        before = cpu_seconds(resource.RUSAGE_SELF)
        mb_per_second = workload(*args)
        return mb_per_second, cpu_seconds(resource.RUSAGE_SELF) - before
    return run


@measured
def python_produce(args, topic):
    value = b"a" * 1024
    with weir.Producer(args.brokers, acks="1") as producer:
        started = time.perf_counter()
        pending = [producer.produce_many(topic, [value] * args.chunk) for _ in range(args.records // args.chunk)]
        for deliveries in pending:
            deliveries.wait()
        seconds = time.perf_counter() - started
    return args.records * 1024 / seconds / 1e6


@measured
def python_consume(args, topic, expected):
    consumer = weir.Consumer(args.brokers)
    consumer.assign([(topic, 0)])
    consumer.seek(topic, 0, "beginning")
    count = size = 0
    started = time.perf_counter()
    while count < expected:
        batch = consumer.poll_batch(10.0)
        assert batch, "no records for 10 s"
        count += len(batch)
        size += sum(len(message.value) for message in batch)
    seconds = time.perf_counter() - started
    consumer.close()
    return size / seconds / 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", default="127.0.0.1:9292")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--weir", default=str(ROOT / "target" / "release" / "weir"))
    args = parser.parse_args()
    admin = weir.Admin(args.brokers)
    ratios = {"produce": [], "consume": [], "produce cpu": [], "consume cpu": []}
    for round_ in range(args.rounds):
        python_topic, rust_topic = f"py-bench-{os.getpid()}-{round_}", f"rust-bench-{os.getpid()}-{round_}"
        for topic in (python_topic, rust_topic):
            admin.create_topics([weir.NewTopic(topic, config={"flush.policy": "interval"})])
        produce_rust = ["--records", str(args.records), "--acks", "1"]
        # Alternate who goes first, so neither always meets a warmer page cache.
        if round_ % 2 == 0:
            py_produce = python_produce(args, python_topic)
            rs_produce = rust_bench(args, "produce", rust_topic, *produce_rust)
            py_consume = python_consume(args, rust_topic, args.records)
            rs_consume = rust_bench(args, "consume", rust_topic)
        else:
            rs_produce = rust_bench(args, "produce", rust_topic, *produce_rust)
            py_produce = python_produce(args, python_topic)
            rs_consume = rust_bench(args, "consume", rust_topic)
            py_consume = python_consume(args, rust_topic, args.records)
        line = [f"round {round_ + 1}:"]
        for name, python, rust in (("produce", py_produce, rs_produce), ("consume", py_consume, rs_consume)):
            ratios[name].append(python[0] / rust[0])
            ratios[f"{name} cpu"].append(rust[1] / python[1])
            line.append(f"{name} python {python[0]:.0f} MB/s {python[1]:.2f} cpu-s, "
                        f"rust {rust[0]:.0f} MB/s {rust[1]:.2f} cpu-s;")
        print(" ".join(line), flush=True)
        admin.delete_topics([python_topic, rust_topic])
    for name, values in ratios.items():
        kind = "rust cpu-s / python cpu-s" if name.endswith("cpu") else "python / rust MB/s"
        print(f"{name}: {kind} median {statistics.median(values):.2f} "
              f"(rounds {' / '.join(f'{value:.2f}' for value in values)})")


if __name__ == "__main__":
    main()
