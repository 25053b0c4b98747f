"""weir.aio against a real broker: round trip, ordering, cancellation, groups."""

import asyncio

import pytest

import weir
import weir.aio


def test_async_round_trip_keeps_order_and_key_partitioning(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("aio", num_partitions=3)])

    async def main():
        async with weir.aio.AsyncProducer(broker, linger_ms=2) as producer:
            sends = [producer.send("aio", f"v{i}".encode(), key=f"k{i % 4}".encode(), headers=[("i", str(i).encode())])
                     for i in range(200)]
            landed = await asyncio.gather(*sends)
            with pytest.raises(weir.UnknownTopicOrPartitionError):
                await producer.send("missing", b"x")
            await producer.flush()
        for i, metadata in enumerate(landed):
            assert metadata.partition == weir.partition_for_key(f"k{i % 4}".encode(), 3)
        per_partition = {}
        for metadata in landed:
            per_partition.setdefault(metadata.partition, []).append(metadata.offset)
        assert all(offsets == sorted(offsets) for offsets in per_partition.values()), "call order kept"

        consumer = weir.aio.AsyncConsumer(broker)
        await consumer.assign([("aio", p) for p in range(3)])
        consumer.seek_to_beginning()
        received = []
        async with consumer:
            async for message in consumer:
                received.append(message)
                if len(received) == 200:
                    break
        assert sorted(m.value for m in received) == sorted(f"v{i}".encode() for i in range(200))
        seven = next(m for m in received if m.value == b"v7")
        assert (seven.key, seven.headers, seven.offset) == (b"k3", [("i", b"7")], landed[7].offset)

    asyncio.run(main())


def test_sends_past_buffer_memory_wait_for_room_in_call_order(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("bounded", num_partitions=1)])
    limit = 64 * 1024

    async def main():
        async with weir.aio.AsyncProducer(broker, buffer_memory=limit, linger_ms=5) as producer:
            value = b"x" * 1000
            sends = [asyncio.ensure_future(producer.send("bounded", value, key=str(i).encode())) for i in range(3000)]
            most_queued = 0
            while not all(send.done() for send in sends):
                most_queued = max(most_queued, producer._native.queued_bytes())
                await asyncio.sleep(0)
            landed = [send.result() for send in sends]
        assert most_queued <= limit, f"{most_queued} bytes queued past buffer_memory"
        assert [metadata.offset for metadata in landed] == list(range(3000)), "call order kept"

    asyncio.run(main())


def test_a_cancelled_poll_loses_no_records(broker):
    # The cancelled poll's records may land while the next poll_batch runs (its
    # done callback not yet run): 30 rounds catch the ordering where they were
    # missed (7 of 60 rounds before the fix).
    async def round_trip(topic):
        consumer = weir.aio.AsyncConsumer(broker)
        await consumer.assign([(topic, 0)])
        consumer.seek(topic, 0, "beginning")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(consumer.poll_batch(timeout=5.0), 0.2)  # the long poll stays in flight
        async with weir.aio.AsyncProducer(broker) as producer:
            await asyncio.gather(*(producer.send(topic, f"r{i}".encode()) for i in range(5)))
        received = []
        for _ in range(40):
            received += await consumer.poll_batch(timeout=0.5)
            if len(received) >= 5:
                break
        assert [m.value for m in received] == [f"r{i}".encode() for i in range(5)], topic
        assert consumer.position(topic, 0) == 5
        await consumer.close()

    for round_index in range(30):
        weir.Admin(broker).create_topics([weir.NewTopic(f"late{round_index}")])
        asyncio.run(round_trip(f"late{round_index}"))


def test_a_seek_after_a_cancelled_poll_reads_each_record_once(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("again")])

    async def main():
        consumer = weir.aio.AsyncConsumer(broker)
        await consumer.assign([("again", 0)])
        consumer.seek("again", 0, "beginning")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(consumer.poll_batch(timeout=30.0), 0.2)
        async with weir.aio.AsyncProducer(broker) as producer:
            await asyncio.gather(*(producer.send("again", f"r{i}".encode()) for i in range(5)))
        # The poll still in flight may already hold r0..r4: they belong to before the seek.
        consumer.seek("again", 0, "beginning")
        received = []
        for _ in range(40):
            received += await consumer.poll_batch(timeout=0.5)
            if len(received) >= 5:
                break
        received += await consumer.poll_batch(timeout=0.5)  # nothing more may come
        assert [m.value for m in received] == [f"r{i}".encode() for i in range(5)]
        await consumer.close()

    asyncio.run(main())


def test_a_poll_waits_its_own_timeout_not_that_of_a_cancelled_one(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("idle")])

    async def main():
        consumer = weir.aio.AsyncConsumer(broker)
        await consumer.assign([("idle", 0)])
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(consumer.poll_batch(timeout=600.0), 0.2)
        # A generous bound that still tells 0.1 s from the 600 s poll left in flight.
        assert await asyncio.wait_for(consumer.poll_batch(timeout=0.1), 300) == []
        await consumer.close()

    asyncio.run(main())


def test_async_group_commit_and_rebalance_callbacks(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("agroup", num_partitions=2)])
    events = []

    async def on_assign(consumer, partitions):
        events.append(("assigned", sorted(partitions)))

    async def main():
        async with weir.aio.AsyncProducer(broker) as producer:
            await asyncio.gather(*(producer.send("agroup", b"x", partition=i % 2) for i in range(10)))
        consumer = weir.aio.AsyncConsumer(broker, group_id="ag", auto_offset_reset="earliest",
                                          enable_auto_commit=False)
        await consumer.subscribe(["agroup"], on_assign=on_assign)
        got = []
        for _ in range(60):
            got += await consumer.poll_batch(0.25)
            if len(got) == 10:
                break
        assert len(got) == 10
        last = max((m for m in got if m.partition == 0), key=lambda m: m.offset)
        await consumer.commit(last)
        assert await consumer.committed("agroup", 0) == last.offset + 1
        assert await consumer.committed("agroup", 1) is None, "auto-commit is off"
        await consumer.close()
        assert events == [("assigned", [("agroup", 0), ("agroup", 1)])]

    asyncio.run(main())


def test_a_client_belongs_to_one_event_loop(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("loops")])
    producer = weir.aio.AsyncProducer(broker)

    async def send():
        return await producer.send("loops", b"x")

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(send()).offset == 0
        other = asyncio.new_event_loop()
        with pytest.raises(RuntimeError, match="event loop"):
            other.run_until_complete(send())
        other.close()
    finally:
        loop.close()
