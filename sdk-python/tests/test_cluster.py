"""Three real `weir serve` processes as one cluster: a topic spread over the
brokers round-trips through the Python SDK, bootstrapped from one broker."""

import os
import subprocess
import time

import pytest

import weir

from conftest import WEIR, free_address

DEADLINE_S = 120


@pytest.fixture
def cluster(tmp_path):
    addresses = [free_address() for _ in range(3)]
    voters = ",".join(f"{index + 1}@{address}" for index, address in enumerate(addresses))
    processes = [
        subprocess.Popen([WEIR, "serve", "--node-id", str(index + 1), "--data-dir", str(tmp_path / f"data-{index + 1}"),
                          "--listen", address, "--controller-voters", voters],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "RUST_LOG": "warn"})
        for index, address in enumerate(addresses)
    ]
    deadline = time.monotonic() + DEADLINE_S
    for address in addresses:
        while True:
            try:
                weir.Admin(address).list_topics()
                break
            except weir.WeirError:
                assert all(process.poll() is None for process in processes), "a broker exited"
                assert time.monotonic() < deadline, "the cluster did not start"
                time.sleep(0.1)
    yield addresses
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=DEADLINE_S)


def test_a_topic_spread_over_three_brokers_round_trips_through_the_sdk(cluster):
    bootstrap = cluster[0]
    admin = weir.Admin(bootstrap)
    admin.create_topics([weir.NewTopic("spread", num_partitions=12)])
    with weir.Producer(bootstrap, acks="all", linger_ms=5) as producer:
        futures = [producer.produce("spread", f"value-{index}".encode(), key=f"key-{index}".encode())
                   for index in range(600)]
        partitions = {future.result(timeout=DEADLINE_S).partition for future in futures}
    assert partitions == set(range(12))
    with weir.Consumer(cluster[1], group_id="spread-readers", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["spread"])
        values = set()
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < 600 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None:
                values.add(message.value)
    assert values == {f"value-{index}".encode() for index in range(600)}
