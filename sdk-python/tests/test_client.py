"""The Python client against a real `weir serve` process: round trip, keyed
partitioning equal to the Rust client's, a consumer group, typed errors."""

import concurrent.futures
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import weir

from conftest import ROOT, free_address


def test_round_trip_with_keys_landing_where_the_rust_client_puts_them(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("orders", num_partitions=3)])
    with weir.Producer(broker, linger_ms=1) as producer:
        deliveries = [producer.produce("orders", f"value-{i}".encode(), key=f"key-{i % 5}".encode(),
                                       headers=[("index", str(i).encode())]) for i in range(50)]
        metadata = [delivery.result(timeout=10) for delivery in deliveries]
    for i, landed in enumerate(metadata):
        assert landed.partition == weir.partition_for_key(f"key-{i % 5}".encode(), 3)
    consumer = weir.Consumer(broker)
    consumer.assign([("orders", p) for p in range(3)])
    for p in range(3):
        consumer.seek("orders", p, "beginning")
    received = []
    deadline = time.monotonic() + 10
    while len(received) < 50 and time.monotonic() < deadline:
        received.extend(consumer.poll_batch(0.5))
    assert sorted(m.value for m in received) == sorted(f"value-{i}".encode() for i in range(50))
    first = next(m for m in received if m.value == b"value-7")
    assert (first.key, first.headers) == (b"key-2", [("index", b"7")])
    assert (first.partition, first.offset) == (metadata[7].partition, metadata[7].offset)
    consumer.close()


def test_a_group_member_commits_and_a_new_member_resumes(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("events", num_partitions=2)])
    with weir.Producer(broker) as producer:
        for i in range(10):
            producer.produce("events", f"e{i}".encode())
    first = weir.Consumer(broker, group_id="g", auto_offset_reset="earliest", config={"session.timeout.ms": 6000})
    first.subscribe(["events"])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 10 and time.monotonic() < deadline:
        got.extend(first.poll_batch(0.5))
    assert len(got) == 10
    first.commit()
    first.close()
    with weir.Producer(broker) as producer:
        producer.produce("events", b"late")
    second = weir.Consumer(broker, group_id="g", auto_offset_reset="earliest")
    second.subscribe(["events"])
    more = []
    deadline = time.monotonic() + 15
    while not more and time.monotonic() < deadline:
        more.extend(second.poll_batch(0.5))
    assert [m.value for m in more] == [b"late"], "resumed from the committed offsets"
    second.close()


def test_errors_are_typed(broker):
    with weir.Producer(broker) as producer:
        with pytest.raises(weir.UnknownTopicOrPartitionError) as raised:
            producer.produce("missing", b"x")
        assert raised.value.code == 3
        assert isinstance(raised.value, weir.WeirError)
    with pytest.raises(weir.InvalidConfigError):
        weir.Producer(broker, config={"no.such.setting": 1})
    with pytest.raises(weir.TopicAlreadyExistsError):
        admin = weir.Admin(broker)
        admin.create_topics([weir.NewTopic("twice")])
        admin.create_topics([weir.NewTopic("twice")])


def test_broker_down_is_a_typed_error():
    with pytest.raises(weir.WeirError) as raised:
        weir.Admin(free_address()).list_topics()
    assert type(raised.value) is not weir.WeirError, "a specific ErrorCode class"
    producer = weir.Producer(free_address(), delivery_timeout_ms=1500, request_timeout_ms=500)
    with pytest.raises(weir.WeirError):
        producer.produce("anything", b"x").result(timeout=10)


def test_oversize_records_are_typed_errors_and_lose_nothing(broker):
    admin = weir.Admin(broker)
    admin.create_topics([weir.NewTopic("small", config={"max.message.bytes": 2000})])
    with weir.Producer(broker, buffer_memory=1 << 20) as producer:
        with pytest.raises(weir.MessageTooLargeError):
            producer.produce("small", b"x" * (2 << 20))  # bigger than the whole buffer: refused at once
        with pytest.raises(weir.MessageTooLargeError):
            producer.produce("small", b"y" * 4000).result(timeout=10)  # refused by the broker
        assert producer.produce("small", b"ok").result(timeout=10).offset == 0
    assert admin.watermarks("small", 0) == (0, 1)


SYNC_RUN = """
import sys, weir
broker = sys.argv[1]
weir.Admin(broker).list_topics()
producer = weir.Producer(broker)
future = producer.produce("exits", b"sync")
consumer = weir.Consumer(broker, group_id="exits")
consumer.subscribe(["exits"])
consumer.poll_batch(0.05)
print("ok")  # exits with both clients open and a send possibly in flight
"""

ASYNC_RUN = """
import asyncio, sys, weir.aio
broker = sys.argv[1]
async def main():
    producer = weir.aio.AsyncProducer(broker)
    await producer.send("exits", b"async")
    consumer = weir.aio.AsyncConsumer(broker)
    await consumer.assign([("exits", 0)])
    await consumer.poll_batch(0.05)
    # exit with a long poll and a send still in flight (asyncio.run cancels them)
    asyncio.ensure_future(consumer.poll_batch(5.0))
    asyncio.ensure_future(producer.send("exits", b"in flight"))
    await asyncio.sleep(0)
asyncio.run(main())
print("ok")
"""


def test_200_interpreters_create_clients_and_exit_cleanly(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("exits")])

    def run(script):
        done = subprocess.run([sys.executable, "-c", script, broker], capture_output=True, timeout=120)
        return done.returncode, done.stdout.strip(), done.stderr.decode()[-2000:]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(run, [SYNC_RUN, ASYNC_RUN] * 100))
    failures = [outcome for outcome in outcomes if outcome[:2] != (0, b"ok")]
    assert not failures, f"{len(failures)} of 200 runs failed; first: {failures[0]}"


def test_use_after_fork_is_a_clear_error(broker):
    admin = weir.Admin(broker)
    admin.list_topics()
    child = os.fork()
    if child == 0:
        try:
            admin.list_topics()
            os._exit(1)
        except RuntimeError as error:
            os._exit(0 if "fork" in str(error) else 2)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "use after fork raises a clear RuntimeError"


def test_produce_many_keeps_order_and_key_partitioning(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("bulk", num_partitions=4)])
    keys = [f"k{i % 7}".encode() for i in range(300)]
    with weir.Producer(broker) as producer:
        deliveries = producer.produce_many("bulk", [f"v{i}".encode() for i in range(300)], keys=keys)
        assert len(deliveries) == 300
        landed = deliveries.results()
        checked = producer.produce_many("bulk", [b"x", b"y"])
        checked.wait()
        assert [outcome.topic for outcome in checked.outcomes()] == ["bulk", "bulk"]
        together = [producer.produce_many("bulk", [b"z"]), producer.produce("bulk", b"w")]
        assert [metadata.topic for metadata in weir.wait_all(together)] == ["bulk", "bulk"]
        with pytest.raises(weir.UnknownTopicOrPartitionError):
            producer.produce_many("bulk", [b"v"], partition=9)
    for key, metadata in zip(keys, landed):
        assert metadata.partition == weir.partition_for_key(key, 4)
    by_partition = {}
    for metadata in landed:
        by_partition.setdefault(metadata.partition, []).append(metadata.offset)
    assert all(offsets == sorted(offsets) for offsets in by_partition.values()), "send order kept per partition"
    with pytest.raises(ValueError):
        weir.Producer(broker).produce_many("bulk", [b"a", b"b"], keys=[b"only-one"])


# Kafka's murmur2 of these keys (the Java client's values, also checked by the
# Rust client's unit tests): every SDK must put them on the same partitions.
KAFKA_MURMUR2 = {b"1": -1993445489, b"12": 126087238, b"123": -267702483, b"1234": -1614185708, b"12345": -1188365604}


def test_keys_land_where_kafka_puts_them(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("vectors", num_partitions=7)])
    with weir.Producer(broker) as producer:
        futures = {key: producer.produce("vectors", b"v", key=key) for key in KAFKA_MURMUR2}
        for key, murmur in KAFKA_MURMUR2.items():
            expected = (murmur & 0x7FFFFFFF) % 7
            assert futures[key].result(timeout=10).partition == expected == weir.partition_for_key(key, 7)


def test_ctrl_c_interrupts_a_blocking_poll(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("quiet")])
    script = (
        "import sys, time, weir\n"
        "consumer = weir.Consumer(sys.argv[1])\n"
        "consumer.assign([('quiet', 0)])\n"
        "started = time.monotonic()\n"
        "try:\n"
        "    print('polling', flush=True)\n"
        "    consumer.poll_batch(600.0)\n"
        "except KeyboardInterrupt:\n"
        "    print(f'interrupted after {time.monotonic() - started:.1f}s', flush=True)\n"
    )
    # A shell that runs the suite in the background leaves SIGINT ignored for its
    # children; a terminal's Ctrl-C reaches a process with the default handler.
    process = subprocess.Popen([sys.executable, "-c", script, broker], stdout=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdout.readline().strip() == "polling"
    time.sleep(0.5)  # most likely inside the poll by now; either way SIGINT must end it
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0 and out.startswith("interrupted after"), out
    assert float(out.split()[2].rstrip("s")) < 300, "stopped within a wait slice, not after the 600 s poll"


PLUGINS = pathlib.Path(os.environ.get("WEIR_PLUGIN_DIR", ROOT / "target" / "plugins" / "wasm32-wasip2" / "release"))


def test_plugins_from_python_partition_like_every_other_client(broker):
    admin = weir.Admin(broker)
    admin.create_topics([weir.NewTopic("regional", num_partitions=4)])
    uploaded = admin.upload_plugin("regions", str(PLUGINS / "region_partitioner.wasm"), hook="partitioner")
    assert (uploaded.hook, len(uploaded.digest)) == ("partitioner", 64)
    with pytest.raises(weir.InvalidPluginError):
        admin.upload_plugin("wrong", str(PLUGINS / "region_partitioner.wasm"), hook="transform")
    admin.set_partitioner("regional", "regions", {"region.eu": 3, "region.us": 1})
    with weir.Producer(broker) as producer:
        placed = [producer.produce("regional", b"v", key=key).result(timeout=10).partition
                  for key in (b"eu:1", b"us:2", b"sa:3")]
        bulk = producer.produce_many("regional", [b"v", b"v"], keys=[b"us:9", b"eu:9"]).results()
    assert placed == [3, 1, weir.partition_for_key(b"sa:3", 4)], "the same places as the Rust client test"
    assert [metadata.partition for metadata in bulk] == [1, 3]
    listed = admin.list_plugins()[0]
    assert (listed.attached_to, listed.state, listed.state_reason) == (["regional"], "ready", ""), "compiled"
    with pytest.raises(weir.PluginInUseError):
        admin.delete_plugins(["regions"])


def test_errors_have_their_code_names_and_an_admin_closes_like_the_others():
    assert weir.StorageError.__name__ == "StorageError" and issubclass(weir.StorageError, weir.WeirError)
    assert weir.UnknownServerError.__name__ == "UnknownServerError"
    address = free_address()  # nothing listens there
    with pytest.raises(weir.NetworkError) as refused:
        weir.Admin(address).list_topics()
    assert refused.value.args[0].startswith("cannot connect to"), refused.value.args
    with weir.Admin(address) as admin:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        admin.list_topics()


def _read(broker, topic, count, timeout=20.0):
    """The first ``count`` records of partition 0 of ``topic`` (fewer if they do not come in time)."""
    with weir.Consumer(broker) as consumer:
        consumer.assign([(topic, 0)])
        consumer.seek(topic, 0, "beginning")
        received = []
        deadline = time.monotonic() + timeout
        while len(received) < count and time.monotonic() < deadline:
            received.extend(consumer.poll_batch(0.5))
        return received[:count]


def _transform_when(admin, name, ready, what, timeout=20.0):
    """Lists transforms until ``name``'s description satisfies ``ready``."""
    deadline = time.monotonic() + timeout
    while True:
        status = next((transform for transform in admin.list_transforms() if transform.name == name), None)
        if status is not None and ready(status):
            return status
        assert time.monotonic() < deadline, f"{what}: last seen {status}"
        time.sleep(0.1)


def test_transforms_from_python_copy_dead_letter_and_are_controlled(broker):
    admin = weir.Admin(broker)
    admin.create_topics([weir.NewTopic(topic) for topic in ("dl-raw", "dl-clean", "dl-letters")])
    uploaded = admin.upload_plugin("picky", str(PLUGINS / "identity_transform.wasm"), hook="transform")
    assert uploaded.state in ("compiling", "ready"), uploaded.state
    with weir.Producer(broker) as producer:
        producer.produce_many("dl-raw", [b"ok-1", b"bad", b"ok-2"]).wait()

    for start, error in (("beginning", ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="'earliest', 'latest' or an offset"):
            admin.deploy_transform("picky", "picky", "dl-raw", ["dl-clean"], start=start)
    assert admin.list_transforms() == [], "a bad start deploys nothing"

    admin.deploy_transform("picky", "picky", "dl-raw", ["dl-clean"], start="earliest", config={"fail_on": "bad"},
                           dead_letter_topic="dl-letters")
    assert [message.value for message in _read(broker, "dl-clean", 2)] == [b"ok-1", b"ok-2"]
    [letter] = _read(broker, "dl-letters", 1)
    assert letter.value == b"bad" and dict(letter.headers)["weir.dlq.offset"] == b"1"
    status = _transform_when(admin, "picky", lambda t: t.partitions[0].dead_lettered == 1, "the dead letter counted")
    assert (status.plugin, status.input_topic, status.output_topics, status.dead_letter_topic) == (
        "picky", "dl-raw", ["dl-clean"], "dl-letters")
    assert status.partitions == [weir.TransformPartition(partition=0, next_offset=3, lag=0, processed=3, emitted=2,
                                                         dead_lettered=1)]

    admin.pause_transform("picky")
    _transform_when(admin, "picky", lambda t: t.state == "paused", "paused")
    with weir.Producer(broker) as producer:
        producer.produce("dl-raw", b"ok-3").result(timeout=10)
    admin.resume_transform("picky")
    assert [message.value for message in _read(broker, "dl-clean", 3)] == [b"ok-1", b"ok-2", b"ok-3"], "caught up"
    _transform_when(admin, "picky", lambda t: t.state == "running" and t.partitions[0].processed == 4, "resumed")

    with pytest.raises(ValueError, match="not 'first'"):
        admin.replay_transform("picky", "first")
    admin.replay_transform("picky", 3)  # a new run over ok-3 only: it is produced again
    assert [message.value for message in _read(broker, "dl-clean", 4)][3:] == [b"ok-3"]

    admin.delete_transform("picky")
    assert admin.list_transforms() == []
    assert admin.watermarks("dl-clean", 0) == (0, 4), "the outputs stay"
    with pytest.raises(weir.WeirError):
        admin.pause_transform("picky")
