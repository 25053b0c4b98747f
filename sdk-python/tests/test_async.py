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


def test_a_cancelled_poll_loses_no_records(broker):
    weir.Admin(broker).create_topics([weir.NewTopic("late")])

    async def main():
        consumer = weir.aio.AsyncConsumer(broker)
        await consumer.assign([("late", 0)])
        consumer.seek("late", 0, "beginning")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(consumer.poll_batch(timeout=5.0), 0.2)  # the long poll stays in flight
        async with weir.aio.AsyncProducer(broker) as producer:
            await asyncio.gather(*(producer.send("late", f"r{i}".encode()) for i in range(5)))
        received = []
        for _ in range(20):
            received += await consumer.poll_batch(timeout=0.5)
            if len(received) >= 5:
                break
        assert [m.value for m in received] == [f"r{i}".encode() for i in range(5)]
        assert consumer.position("late", 0) == 5
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
