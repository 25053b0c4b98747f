"""Python produce throughput next to the Rust client's, same broker, same run.

    python sdk-python/bench/produce.py --brokers 127.0.0.1:9292 [--records 200000]

Both write 1 KiB records with acks=1 to fresh page-cache topics
(flush.policy=interval): Python through `Producer.produce_many` in chunks (every
acknowledgement checked with `weir.wait_all`), Rust through `weir bench produce`. Prints both and the
ratio. A benchmark, not a test.
"""

import argparse
import json
import os
import pathlib
import subprocess
import time

import weir

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", default="127.0.0.1:9292")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--weir", default=str(ROOT / "target" / "release" / "weir"))
    args = parser.parse_args()
    suffix = os.getpid()
    admin = weir.Admin(args.brokers)
    python_topic, rust_topic = f"py-bench-{suffix}", f"rust-bench-{suffix}"
    for topic in (python_topic, rust_topic):
        admin.create_topics([weir.NewTopic(topic, num_partitions=1, config={"flush.policy": "interval"})])

    value = b"a" * 1024
    with weir.Producer(args.brokers, acks="1") as producer:
        started = time.perf_counter()
        pending = []
        for _ in range(args.records // args.chunk):
            pending.append(producer.produce_many(python_topic, [value] * args.chunk))
        weir.wait_all(pending)
        python_seconds = time.perf_counter() - started
    python_mb = args.records * 1024 / python_seconds / 1e6

    rust = subprocess.run(
        [args.weir, "bench", "produce", "--records", str(args.records), "--topic", rust_topic,
         "--loopback-bytes", "0", "--format", "json", "--brokers", args.brokers],
        capture_output=True, check=True, text=True)
    rust_mb = json.loads(rust.stdout)["mb_per_second"]
    print(f"python produce_many: {python_mb:.1f} MB/s ({args.records / python_seconds:.0f} records/s)")
    print(f"rust client:         {rust_mb:.1f} MB/s")
    print(f"python / rust = {python_mb / rust_mb:.2f}")
    admin.delete_topics([python_topic, rust_topic])


if __name__ == "__main__":
    main()
