"""asyncio clients: :class:`AsyncProducer` and :class:`AsyncConsumer`.

    import asyncio, weir.aio

    async def main():
        async with weir.aio.AsyncProducer("127.0.0.1:9292") as producer:
            metadata = await producer.send("orders", b"hello", key=b"user-42")
        async with weir.aio.AsyncConsumer("127.0.0.1:9292", group_id="billing",
                                          topics=["orders"]) as consumer:
            async for message in consumer:
                print(message.offset, message.value)

    asyncio.run(main())

How it works: the Rust client core runs each operation on its own threads and,
when it finishes, puts the result in a completion queue and writes one byte to
a socketpair; the event loop watches that socket (``loop.add_reader``) and
resolves its own futures. No Rust thread ever touches the interpreter, so
interpreter exit is safe. A client belongs to the event loop that first uses it.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
from typing import AsyncIterator, Awaitable, Callable, Mapping, Optional, Sequence, Union

from . import (
    Message,
    Partition,
    RecordMetadata,
    WeirError,
    _give_back,
    _native,
    _offsets_list,
    _settings,
    _subscription,
)

__all__ = ["AsyncConsumer", "AsyncProducer"]


class _LoopCompletions:
    """Futures of the running event loop, resolved from a native completion queue."""

    def __init__(self):
        self._queue = _native.CompletionQueue()
        self._futures: dict[int, asyncio.Future] = {}
        self._tokens = itertools.count()
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def new(self) -> tuple[object, int, asyncio.Future]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                raise RuntimeError("a weir.aio client belongs to the event loop that first used it")
            self._loop = loop
            loop.add_reader(self._queue.fileno(), self._drain)
        token = next(self._tokens)
        future = loop.create_future()
        self._futures[token] = future
        return self._queue, token, future

    def forget(self, token: int) -> None:
        self._futures.pop(token, None)

    def _drain(self) -> None:
        for token, ok, value in self._queue.drain():
            future = self._futures.pop(token, None)
            if future is None or future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._queue.fileno())


def _start(completions: _LoopCompletions, operation: Callable[[object, int], object]) -> asyncio.Future:
    queue, token, future = completions.new()
    try:
        operation(queue, token)
    except BaseException:
        completions.forget(token)
        raise
    return future


class AsyncProducer:
    """The asyncio :class:`weir.Producer`: ``await send(...)`` returns the
    record's :class:`weir.RecordMetadata` once acknowledged. Sends keep their
    call order per partition and never block the event loop; run many at once
    with ``asyncio.gather`` (batching happens in the client core)."""

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9292", *, acks: Optional[str] = None,
                 linger_ms: Optional[int] = None, batch_size: Optional[int] = None,
                 compression_type: Optional[str] = None, enable_idempotence: Optional[bool] = None,
                 delivery_timeout_ms: Optional[int] = None, request_timeout_ms: Optional[int] = None,
                 buffer_memory: Optional[int] = None, client_id: Optional[str] = None,
                 config: Optional[Mapping[str, object]] = None):
        settings = _settings(config, acks=acks, linger_ms=linger_ms, batch_size=batch_size,
                             compression_type=compression_type, enable_idempotence=enable_idempotence,
                             delivery_timeout_ms=delivery_timeout_ms, request_timeout_ms=request_timeout_ms,
                             buffer_memory=buffer_memory, client_id=client_id)
        self._native = _native.Producer(bootstrap_servers, settings)
        self._completions = _LoopCompletions()
        # Sends waiting for buffer room take turns in call order (asyncio.Lock is
        # FIFO), so a later send never overtakes an earlier one.
        self._room = asyncio.Lock()

    async def send(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None,
                   headers: Optional[Sequence[tuple[str, Optional[bytes]]]] = None,
                   partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> RecordMetadata:
        """Sends a record and waits for its acknowledgement. While
        ``buffer_memory`` bytes of records wait to be sent, the send first waits
        for room (cancelled then, the record is not sent); once queued,
        cancelling the wait does not unsend it. Raises the record's typed error."""
        header_list = list(headers) if headers else None
        async with self._room:
            while True:
                queue, token, future = self._completions.new()
                try:
                    queued = self._native.send_nowait(queue, token, topic, value, key, header_list, partition,
                                                      timestamp_ms)
                except BaseException:
                    self._completions.forget(token)
                    raise
                if queued:
                    break
                self._completions.forget(token)
                await _start(self._completions, self._native.room_nowait)
        return RecordMetadata(*await future)

    async def flush(self) -> None:
        """Waits until every record sent so far is acknowledged or failed."""
        await _start(self._completions, self._native.flush_nowait)

    async def close(self) -> None:
        """Flushes, then refuses further sends."""
        try:
            await _start(self._completions, self._native.close_nowait)
        finally:
            self._completions.close()

    async def __aenter__(self) -> "AsyncProducer":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()


AsyncRebalanceCallback = Callable[["AsyncConsumer", list[Partition]], Union[None, Awaitable[None]]]


class AsyncConsumer:
    """The asyncio :class:`weir.Consumer`. ``topics`` subscribes on ``async with``
    entry (or call :meth:`subscribe`/:meth:`assign`); ``async for`` yields every
    record. A poll that is cancelled (e.g. by ``asyncio.wait_for``) loses
    nothing: its records come with the next one, which waits no longer than its
    own timeout. A seek also applies to a poll left in flight: nothing from
    before the seek is returned after it."""

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9292", *, topics: Optional[Sequence[str]] = None,
                 group_id: Optional[str] = None, auto_offset_reset: Optional[str] = None,
                 enable_auto_commit: Optional[bool] = None, auto_commit_interval_ms: Optional[int] = None,
                 session_timeout_ms: Optional[int] = None, max_poll_records: Optional[int] = None,
                 group_instance_id: Optional[str] = None, fetch_max_bytes: Optional[int] = None,
                 client_id: Optional[str] = None, config: Optional[Mapping[str, object]] = None):
        settings = _settings(config, group_id=group_id, auto_offset_reset=auto_offset_reset,
                             enable_auto_commit=enable_auto_commit, auto_commit_interval_ms=auto_commit_interval_ms,
                             session_timeout_ms=session_timeout_ms, max_poll_records=max_poll_records,
                             group_instance_id=group_instance_id, fetch_max_bytes=fetch_max_bytes,
                             client_id=client_id)
        self._native = _native.Consumer(bootstrap_servers, settings)
        self._completions = _LoopCompletions()
        self._topics = list(topics) if topics else None
        self._buffer: collections.deque[Message] = collections.deque()
        # The one native poll in flight, and the seeks made since it started, in
        # order (see _landed).
        self._in_flight: Optional[asyncio.Future] = None
        self._sought: list[tuple[str, int, "int | str"]] = []
        self._error: Optional[BaseException] = None
        self._on_assign: Optional[AsyncRebalanceCallback] = None
        self._on_revoke: Optional[AsyncRebalanceCallback] = None

    async def subscribe(self, topics: "str | Sequence[str]", on_assign: Optional[AsyncRebalanceCallback] = None,
                        on_revoke: Optional[AsyncRebalanceCallback] = None) -> None:
        """Joins the group for ``topics`` (names, or one ``"^regex"``); the
        callbacks (plain or ``async``) run inside :meth:`poll`."""
        names, pattern = _subscription(topics)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        await _start(self._completions, lambda queue, token: self._native.subscribe(names, pattern, queue, token))

    async def assign(self, partitions: Sequence[Partition]) -> None:
        partitions = list(partitions)
        await _start(self._completions, lambda queue, token: self._native.assign(partitions, queue, token))

    def assignment(self) -> list[Partition]:
        return self._native.assignment()

    def seek(self, topic: str, partition: int, offset: "int | str") -> None:
        """``offset``: a number, ``"beginning"`` or ``"end"``."""
        self._buffer = collections.deque(m for m in self._buffer if (m.topic, m.partition) != (topic, partition))
        self._native.seek(topic, partition, offset)
        if self._in_flight is not None:
            self._sought.append((topic, partition, offset))

    def seek_to_beginning(self) -> None:
        self._seek_all("beginning")

    def seek_to_end(self) -> None:
        self._seek_all("end")

    def _seek_all(self, offset: str) -> None:
        self._buffer.clear()
        self._native.seek_all(offset)
        if self._in_flight is not None:
            self._sought += [(topic, partition, offset) for topic, partition in self._native.assignment()]

    def position(self, topic: str, partition: int) -> Optional[int]:
        if self._in_flight is not None and self._in_flight.done():
            self._landed(self._in_flight)
        first = next((m.offset for m in self._buffer if (m.topic, m.partition) == (topic, partition)), None)
        return first if first is not None else self._native.position(topic, partition)

    def pause(self, partitions: Sequence[Partition]) -> None:
        for topic, partition in partitions:
            self._native.pause(topic, partition)

    def resume(self, partitions: Sequence[Partition]) -> None:
        for topic, partition in partitions:
            self._native.resume(topic, partition)

    def _landed(self, future: asyncio.Future) -> None:
        """Takes a finished native poll's result into the buffer, once: from its
        done callback or, sooner, from whoever finds it done (awaiting a done
        future does not yield, so the callback may not have run yet)."""
        if future is not self._in_flight:
            return
        self._in_flight = None
        sought, self._sought = self._sought, []
        if future.cancelled():
            return
        if future.exception() is not None:
            self._error = future.exception()
            return
        # The poll may hold records of a partition sought after it started, from
        # before the seek (drop them) or from after it (the core's position moved
        # past them): drop both and repeat the seeks in order, so the core reads
        # them once more. A partition no longer assigned is left alone.
        sought_partitions = {(topic, partition) for topic, partition, _ in sought}
        self._buffer.extend(m for m in future.result() if (m.topic, m.partition) not in sought_partitions)
        for topic, partition, offset in sought:
            try:
                self._native.seek(topic, partition, offset)
            except WeirError:
                pass

    async def _fill(self, timeout: float, max_records: Optional[int] = None) -> None:
        if not self._buffer and self._error is None:
            if self._in_flight is None:
                self._in_flight = _start(self._completions, lambda queue, token: self._native.poll_batch(
                    timeout, queue, token, max_records=max_records))
                self._in_flight.add_done_callback(self._landed)
            in_flight = self._in_flight
            # Waits at most this call's timeout (a poll left in flight by a
            # cancelled call may have a longer one) and never cancels it.
            await asyncio.wait({in_flight}, timeout=timeout)
            if in_flight.done():
                self._landed(in_flight)
        for kind, partitions in self._native.rebalance_events():
            callback = self._on_assign if kind == "assigned" else self._on_revoke
            if callback is not None:
                outcome = callback(self, partitions)
                if inspect.isawaitable(outcome):
                    await outcome
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def poll_batch(self, timeout: float = 1.0) -> list[Message]:
        """Records that arrived within ``timeout`` seconds (possibly none)."""
        await self._fill(timeout)
        batch = list(self._buffer)
        self._buffer.clear()
        return batch

    async def poll(self, timeout: float = 1.0) -> Optional[Message]:
        """One record, or ``None`` when none arrived within ``timeout`` seconds."""
        await self._fill(timeout, max_records=1)
        return self._buffer.popleft() if self._buffer else None

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            message = await self.poll(1.0)
            if message is not None:
                yield message

    async def commit(self, message: Optional[Message] = None,
                     offsets: "Optional[Mapping[Partition, int] | Sequence[tuple[str, int, int]]]" = None) -> None:
        """As :meth:`weir.Consumer.commit`, awaiting the group coordinator."""
        entries = _offsets_list(message, offsets)
        await _start(self._completions, lambda queue, token: self._native.commit(entries, queue, token))

    async def committed(self, topic: str, partition: int) -> Optional[int]:
        return await _start(self._completions,
                            lambda queue, token: self._native.committed(topic, partition, queue, token))

    async def close(self) -> None:
        """Leaves the group (committing first with auto-commit) and stops fetching.
        Records a cancelled poll brought that were never returned are given back
        first, so the commit does not cover them."""
        try:
            if self._in_flight is not None and self._in_flight.done():
                self._landed(self._in_flight)
            # (A poll still in flight may take records between this and the close;
            # the core has no way to cancel it.)
            _give_back(self._native, self._buffer)
            self._buffer.clear()
            await _start(self._completions, lambda queue, token: self._native.close(queue, token))
        finally:
            self._completions.close()

    async def __aenter__(self) -> "AsyncConsumer":
        if self._topics:
            await self.subscribe(self._topics)
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
