"""Weir's Python client: a native producer, consumer and admin client built on
Weir's Rust client core (batching, partitioning, retries and consumer groups all
happen there).

    import weir

    with weir.Producer("127.0.0.1:9292") as producer:
        metadata = producer.produce("orders", b"hello", key=b"user-42").result()

    with weir.Consumer("127.0.0.1:9292", group_id="billing") as consumer:
        consumer.subscribe(["orders"])
        for message in consumer:
            print(message.partition, message.offset, message.value)

``weir.aio`` has the asyncio versions (``AsyncProducer``, ``AsyncConsumer``).
Every error is a :class:`WeirError` subclass named after the broker's
``ErrorCode`` (``weir.UnknownTopicOrPartitionError``, ...), with ``.code``.
Blocking calls release the GIL and can be interrupted with Ctrl-C.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import itertools
import select
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

from . import _native
from ._native import Message, WeirError, partition_for_key

__all__ = [
    "Admin",
    "CommittedOffset",
    "Consumer",
    "Deliveries",
    "GroupDescription",
    "GroupListing",
    "GroupMember",
    "Message",
    "NewTopic",
    "PartitionInfo",
    "PartitionLag",
    "PluginDescription",
    "Producer",
    "RecordMetadata",
    "TopicDescription",
    "TransformDescription",
    "TransformPartition",
    "WeirError",
    "partition_for_key",
    "wait_all",
]

# One exception class per ErrorCode: weir.UnknownTopicOrPartitionError, ...
for _name in dir(_native):
    if _name.endswith("Error") and _name != "WeirError":
        globals()[_name] = getattr(_native, _name)
        __all__.append(_name)


def _error_init(self, code, message):
    Exception.__init__(self, message)
    self.code = code


WeirError.__init__ = _error_init


@dataclass(frozen=True)
class RecordMetadata:
    """Where an acknowledged record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class Deliveries:
    """The acknowledgements of one :meth:`Producer.produce_many` call, as one
    object (not one per record, so big batches do not keep Python's cyclic
    garbage collector busy)."""

    def __init__(self, native):
        self._native = native

    def __len__(self) -> int:
        return len(self._native)

    def wait(self) -> None:
        """Waits for all of them; raises the first failure. The cheapest check."""
        self._native.wait()

    def results(self) -> list[RecordMetadata]:
        """Waits for all of them; their metadata in order, or the first failure raised."""
        outcomes = self.outcomes()
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes

    def outcomes(self) -> "list[RecordMetadata | WeirError]":
        """Waits for all of them; per record its metadata or its error (not raised)."""
        return [outcome if isinstance(outcome, BaseException) else RecordMetadata(*outcome)
                for outcome in self._native.outcomes()]


def wait_all(deliveries: "Sequence[Deliveries | concurrent.futures.Future]") -> list[RecordMetadata]:
    """Waits for many acknowledgements (``produce_many`` results and ``produce``
    futures) and returns their metadata in order; raises the first failure."""
    results: list[RecordMetadata] = []
    for item in deliveries:
        if isinstance(item, Deliveries):
            results.extend(item.results())
        else:
            results.append(item.result())
    return results


def _settings(config: Optional[Mapping[str, object]], **typed: object) -> dict:
    settings = {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in (config or {}).items()}
    for key, value in typed.items():
        if value is not None:
            settings[key.replace("_", ".")] = str(value).lower() if isinstance(value, bool) else str(value)
    return settings



# Clients still open at interpreter exit are closed first (a producer flushes, a
# group member leaves its group), while the interpreter is whole.
_open_clients: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _close_open_clients() -> None:
    for client in list(_open_clients):
        try:
            client.close()
        except Exception:
            pass


class _Completions:
    """Resolves ``concurrent.futures.Future`` objects from a native completion
    queue on one helper thread (started on first use, gone after 1 s idle). The
    helper only waits on a socket and sets results: no Rust thread ever runs
    Python code."""

    _IDLE_ROUNDS = 4  # of 0.25 s

    def __init__(self, convert: Callable[[object], object]):
        self._queue = _native.CompletionQueue()
        self._convert = convert
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._running = False

    def new(self) -> tuple[object, int, concurrent.futures.Future]:
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # a sent record cannot be called back
        token = next(self._tokens)
        with self._lock:
            self._futures[token] = future
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="weir-completions", daemon=True).start()
        return self._queue, token, future

    def forget(self, token: int) -> None:
        with self._lock:
            self._futures.pop(token, None)

    def _run(self) -> None:
        fd = self._queue.fileno()
        idle = 0
        while True:
            readable, _, _ = select.select([fd], [], [], 0.25)
            for token, ok, value in self._queue.drain() if readable else ():
                with self._lock:
                    future = self._futures.pop(token, None)
                if future is None:
                    continue
                if ok:
                    future.set_result(self._convert(value))
                else:
                    future.set_exception(value)
            with self._lock:
                idle = 0 if self._futures or readable else idle + 1
                if idle >= self._IDLE_ROUNDS:
                    self._running = False
                    return


def _metadata(value) -> RecordMetadata:
    return RecordMetadata(*value)


class Producer:
    """Sends records; batching, retries, idempotence and key partitioning happen
    in Weir's Rust client core.

    Typed keywords cover the common settings; ``config`` takes any Kafka-style
    setting (``batch.size``, ``delivery.timeout.ms``, ...). An unknown key is an
    :class:`InvalidConfigError`, with every problem listed at once.

        with weir.Producer("127.0.0.1:9292", acks="all", linger_ms=5) as producer:
            future = producer.produce("orders", b"{...}", key=b"user-42")
            print(future.result().offset)
    """

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
        self._completions = _Completions(_metadata)
        _open_clients.add(self)

    def produce(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None,
                headers: Optional[Sequence[tuple[str, Optional[bytes]]]] = None,
                partition: Optional[int] = None,
                timestamp_ms: Optional[int] = None) -> "concurrent.futures.Future[RecordMetadata]":
        """Queues a record and returns a future of its :class:`RecordMetadata`.
        Blocks only while the producer's buffer is full. Raises at once for an
        unknown topic or partition or a record bigger than the buffer."""
        queue, token, future = self._completions.new()
        try:
            self._native.send(queue, token, topic, value, key, list(headers) if headers else None, partition,
                              timestamp_ms)
        except BaseException:
            self._completions.forget(token)
            raise
        return future

    def produce_many(self, topic: str, values: Sequence[Optional[bytes]],
                     keys: Optional[Sequence[Optional[bytes]]] = None,
                     partition: Optional[int] = None) -> Deliveries:
        """Queues many records of one topic in one native call (much cheaper per
        record than :meth:`produce`); returns their :class:`Deliveries`."""
        return Deliveries(self._native.send_many(topic, list(values), list(keys) if keys is not None else None, partition))

    def flush(self) -> None:
        """Sends everything buffered and waits until every record is acknowledged or failed."""
        self._native.flush()

    def close(self) -> None:
        """Flushes, then refuses further records. Called on ``with`` exit and at interpreter exit."""
        self._native.close()
        _open_clients.discard(self)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


Partition = tuple[str, int]
RebalanceCallback = Callable[["Consumer", list[Partition]], None]


def _offsets_list(message: Optional[Message],
                  offsets: "Optional[Mapping[Partition, int] | Sequence[tuple[str, int, int]]]") -> Optional[list]:
    if message is not None and offsets is not None:
        raise ValueError("commit takes a message or offsets, not both")
    if message is not None:
        return [(message.topic, message.partition, message.offset + 1)]
    if offsets is None:
        return None
    if isinstance(offsets, Mapping):
        return [(topic, partition, offset) for (topic, partition), offset in offsets.items()]
    return [tuple(entry) for entry in offsets]


def _subscription(topics: "str | Sequence[str]") -> tuple[list[str], Optional[str]]:
    """Topic names, or one regular expression starting with ``^`` (as in confluent-kafka)."""
    topics = [topics] if isinstance(topics, str) else list(topics)
    patterns = [topic for topic in topics if topic.startswith("^")]
    if patterns and len(topics) > 1:
        raise ValueError("subscribe to either one '^pattern' or a list of topic names")
    return (topics, None) if not patterns else ([], patterns[0][1:])


def _give_back(native, messages: Sequence[Message]) -> None:
    """Seeks each partition of ``messages`` back to its first record among them,
    so the core's position (what commits cover) excludes records never handed to
    the application. A partition no longer assigned is left alone."""
    for topic, partition in dict.fromkeys((m.topic, m.partition) for m in messages):
        first = next(m.offset for m in messages if (m.topic, m.partition) == (topic, partition))
        try:
            native.seek(topic, partition, first)
        except WeirError:
            pass


class Consumer:
    """Reads records: either partitions you :meth:`assign`, or — with a
    ``group_id`` — the share of topics passed to :meth:`subscribe` the consumer group
    gives this member.

    Rebalance callbacks (``on_assign``/``on_revoke`` of :meth:`subscribe`) run
    on the thread calling :meth:`poll`, before it returns. With auto-commit (the
    default) positions are committed before partitions are revoked.

        with weir.Consumer("127.0.0.1:9292", group_id="billing",
                           auto_offset_reset="earliest") as consumer:
            consumer.subscribe(["orders"])
            for message in consumer:
                handle(message.key, message.value)
    """

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9292", *, group_id: Optional[str] = None,
                 auto_offset_reset: Optional[str] = None, enable_auto_commit: Optional[bool] = None,
                 auto_commit_interval_ms: Optional[int] = None, session_timeout_ms: Optional[int] = None,
                 max_poll_records: Optional[int] = None, group_instance_id: Optional[str] = None,
                 fetch_max_bytes: Optional[int] = None, client_id: Optional[str] = None,
                 config: Optional[Mapping[str, object]] = None):
        settings = _settings(config, group_id=group_id, auto_offset_reset=auto_offset_reset,
                             enable_auto_commit=enable_auto_commit, auto_commit_interval_ms=auto_commit_interval_ms,
                             session_timeout_ms=session_timeout_ms, max_poll_records=max_poll_records,
                             group_instance_id=group_instance_id, fetch_max_bytes=fetch_max_bytes,
                             client_id=client_id)
        self._native = _native.Consumer(bootstrap_servers, settings)
        self._on_assign: Optional[RebalanceCallback] = None
        self._on_revoke: Optional[RebalanceCallback] = None
        _open_clients.add(self)

    def assign(self, partitions: Sequence[Partition]) -> None:
        """Reads exactly these ``(topic, partition)`` pairs (no group)."""
        self._native.assign(list(partitions))

    def subscribe(self, topics: "str | Sequence[str]", on_assign: Optional[RebalanceCallback] = None,
                  on_revoke: Optional[RebalanceCallback] = None) -> None:
        """Joins the group for ``topics`` (names, or one ``"^regex"`` that also
        picks up topics created later). ``on_assign(consumer, partitions)`` and
        ``on_revoke(consumer, partitions)`` are called from :meth:`poll`."""
        names, pattern = _subscription(topics)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._native.subscribe(names, pattern)

    def _dispatch_rebalances(self) -> None:
        for kind, partitions in self._native.rebalance_events():
            callback = self._on_assign if kind == "assigned" else self._on_revoke
            if callback is not None:
                callback(self, partitions)

    def assignment(self) -> list[Partition]:
        return self._native.assignment()

    def seek(self, topic: str, partition: int, offset: "int | str") -> None:
        """``offset``: a number, ``"beginning"`` or ``"end"``."""
        self._native.seek(topic, partition, offset)

    def seek_to_beginning(self, partitions: Optional[Sequence[Partition]] = None) -> None:
        """Seeks ``partitions`` (default: all assigned) to their first offset."""
        self._seek_many(partitions, "beginning")

    def seek_to_end(self, partitions: Optional[Sequence[Partition]] = None) -> None:
        """Seeks ``partitions`` (default: all assigned) past their last record."""
        self._seek_many(partitions, "end")

    def _seek_many(self, partitions: Optional[Sequence[Partition]], offset: str) -> None:
        if partitions is None:
            self._native.seek_all(offset)
        else:
            for topic, partition in partitions:
                self.seek(topic, partition, offset)

    def position(self, topic: str, partition: int) -> Optional[int]:
        """The offset of the next record :meth:`poll` returns for the partition."""
        return self._native.position(topic, partition)

    def pause(self, partitions: Sequence[Partition]) -> None:
        for topic, partition in partitions:
            self._native.pause(topic, partition)

    def resume(self, partitions: Sequence[Partition]) -> None:
        for topic, partition in partitions:
            self._native.resume(topic, partition)

    def poll_batch(self, timeout: float = 1.0) -> list[Message]:
        """Records that arrived within ``timeout`` seconds (possibly none)."""
        return self._handed_out(self._native.poll_batch(timeout))

    def poll(self, timeout: float = 1.0) -> Optional[Message]:
        """One record, or ``None`` when none arrived within ``timeout`` seconds.
        The core hands out exactly one, so commits (and a group hand-over) never
        cover a record the application was not given."""
        batch = self._handed_out(self._native.poll_batch(timeout, max_records=1))
        return batch[0] if batch else None

    def _handed_out(self, batch: list[Message]) -> list[Message]:
        """Runs the rebalance callbacks, then returns ``batch``; if a callback
        raises, the batch is given back to the core first (its partitions seek to
        their first record in it), so no commit covers it."""
        try:
            self._dispatch_rebalances()
        except BaseException:
            _give_back(self._native, batch)
            raise
        return batch

    def __iter__(self) -> Iterator[Message]:
        """Every record, forever (stop with ``break`` or Ctrl-C)."""
        while True:
            message = self.poll(1.0)
            if message is not None:
                yield message

    def commit(self, message: Optional[Message] = None,
               offsets: "Optional[Mapping[Partition, int] | Sequence[tuple[str, int, int]]]" = None) -> None:
        """Commits, and waits for the group coordinator: by default the position
        of every owned partition; with ``message``, everything up to and
        including it; with ``offsets``, ``{(topic, partition): next offset}``."""
        self._native.commit(_offsets_list(message, offsets))

    def committed(self, topic: str, partition: int) -> Optional[int]:
        """The group's committed offset of the partition (``None`` if never committed)."""
        return self._native.committed(topic, partition)

    def close(self) -> None:
        """Leaves the group (committing first with auto-commit) and stops fetching."""
        self._native.close()
        _open_clients.discard(self)

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@dataclass
class NewTopic:
    """A topic for :meth:`Admin.create_topics`. ``replication_factor=-1`` takes
    the broker's default; ``config`` takes topic configs (``retention.ms``, ...)."""

    name: str
    num_partitions: int = 1
    replication_factor: int = -1
    config: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionInfo]
    config: dict[str, str]


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    member_count: int


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    instance_id: Optional[str]
    member_epoch: int
    subscribed_topics: list[str]
    assigned: list[Partition]
    target: list[Partition]


@dataclass(frozen=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignor: str
    members: list[GroupMember]
    offsets: list[CommittedOffset]


@dataclass(frozen=True)
class PartitionLag:
    """``lag`` is ``log_end_offset - committed`` (``None`` without a commit)."""

    topic: str
    partition: int
    committed: Optional[int]
    log_end_offset: int
    lag: Optional[int]
    owner: Optional[str]


@dataclass(frozen=True)
class PluginDescription:
    """An uploaded plugin and its counters since the broker started."""

    name: str
    hook: str
    digest: str
    size_bytes: int
    uploaded_ms: int
    calls: int
    errors: int
    traps: int
    busy_nanos: int
    attached_to: list[str]
    #: ``ready``, ``compiling`` (an upload answers before the broker
    #: compiles), ``failed`` (see ``state_reason``) or ``fetching``.
    state: str = "ready"
    #: Why the code failed to compile; empty otherwise.
    state_reason: str = ""


@dataclass(frozen=True)
class TransformPartition:
    """A transform's progress on one partition of its input topic. The counters
    run since the deployment (a replay counts again) and survive restarts."""

    partition: int
    #: The next input offset the transform processes.
    next_offset: int
    #: Input high watermark minus ``next_offset``; ``None`` when unknown.
    lag: Optional[int]
    #: Input records processed.
    processed: int
    #: Output records produced.
    emitted: int
    #: Input records sent to the dead-letter topic.
    dead_lettered: int


@dataclass(frozen=True)
class TransformDescription:
    """A deployed transform (see :meth:`Admin.deploy_transform`) and its
    progress per input partition."""

    name: str
    plugin: str
    input_topic: str
    output_topics: list[str]
    #: Where records the plugin fails on for good go; ``None``: they hold their partition.
    dead_letter_topic: Optional[str]
    #: ``running``, ``paused``, ``starting``, or ``retrying: <why>``.
    state: str
    partitions: list[TransformPartition]


#: Where a transform starts, or replays from: ``"earliest"`` (each input
#: partition's first record), ``"latest"`` (new records only) or an offset.
TransformStart = Union[str, int]

_TRANSFORM_STARTS = {"earliest": -2, "latest": -1}


def _transform_offset(start: TransformStart) -> int:
    """The core's number for ``start`` (-2 earliest, -1 latest, or the offset)."""
    if isinstance(start, str):
        if start not in _TRANSFORM_STARTS:
            raise ValueError(f"start is 'earliest', 'latest' or an offset >= 0, not {start!r}")
        return _TRANSFORM_STARTS[start]
    if isinstance(start, bool) or not isinstance(start, int):
        raise TypeError(f"start is 'earliest', 'latest' or an offset >= 0, not {type(start).__name__} {start!r}")
    if start < 0:
        raise ValueError(f"start is 'earliest', 'latest' or an offset >= 0, not {start}")
    return start


def _transform(row) -> TransformDescription:
    name, plugin, input_topic, output_topics, dead_letter_topic, state, partitions = row
    return TransformDescription(
        name, plugin, input_topic, output_topics, dead_letter_topic, state,
        [TransformPartition(partition, next_offset, None if lag < 0 else lag, processed, emitted, dead_lettered)
         for partition, next_offset, lag, processed, emitted, dead_lettered in partitions])


class _ClosedAdmin:
    """Stands in for the native admin after :meth:`Admin.close`."""

    def __getattr__(self, name: str):
        raise RuntimeError("the Admin is closed")


class Admin:
    """Topics, consumer groups, plugins and transforms.

        with weir.Admin("127.0.0.1:9292") as admin:
            admin.create_topics([weir.NewTopic("orders", num_partitions=6, config={"retention.ms": "86400000"})])
            for row in admin.group_lag("billing"):
                print(row.topic, row.partition, row.lag)
    """

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9292"):
        self._native = _native.Admin(bootstrap_servers)

    def close(self) -> None:
        """Releases the connections; later calls raise ``RuntimeError``. Called on ``with`` exit."""
        self._native = _ClosedAdmin()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def create_topics(self, topics: Sequence[NewTopic]) -> None:
        """Creates each topic in turn; raises on the first failure (e.g. :class:`TopicAlreadyExistsError`)."""
        for topic in topics:
            self._native.create_topic(topic.name, topic.num_partitions, topic.replication_factor,
                                      {key: str(value) for key, value in topic.config.items()})

    def list_topics(self) -> list[str]:
        return self._native.list_topics()

    def delete_topics(self, names: Sequence[str]) -> None:
        for name in names:
            self._native.delete_topic(name)

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions (leader, replicas, ISR) and effective configs."""
        partitions, config = self._native.describe_topic(name)
        return TopicDescription(name, [PartitionInfo(*row) for row in partitions], config)

    def alter_topic_config(self, name: str, config: Mapping[str, object]) -> None:
        """Sets topic configs live; an invalid one is an :class:`InvalidConfigError` and changes nothing."""
        self._native.alter_topic_config(name, {key: str(value) for key, value in config.items()})

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log start offset, high watermark)``."""
        return self._native.watermarks(topic, partition)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        return self._native.offset_for_timestamp(topic, partition, timestamp_ms)

    def list_groups(self) -> list[GroupListing]:
        return [GroupListing(*row) for row in self._native.list_groups()]

    def describe_group(self, group_id: str) -> GroupDescription:
        group_id, state, epoch, assignor, members, offsets = self._native.describe_group(group_id)
        return GroupDescription(group_id, state, epoch, assignor, [GroupMember(*row) for row in members],
                                [CommittedOffset(*row) for row in offsets])

    def group_lag(self, group_id: str) -> list[PartitionLag]:
        """Committed offset, log end and lag of each partition of the group."""
        return [PartitionLag(*row) for row in self._native.group_lag(group_id)]

    def reset_offsets(self, group_id: str, offsets: "Mapping[Partition, int]") -> None:
        """Sets a group's committed offsets; the group must have no members."""
        self._native.reset_offsets(group_id, [(topic, partition, offset) for (topic, partition), offset in offsets.items()])

    def delete_groups(self, group_ids: Sequence[str]) -> None:
        for group_id in group_ids:
            self._native.delete_group(group_id)

    def upload_plugin(self, name: str, wasm: "bytes | str", hook: str = "") -> PluginDescription:
        """Uploads a plugin (the component's bytes, or a path to the ``.wasm``).
        The broker checks it exports ``hook`` (empty: any) before storing it,
        then compiles it in the background: the answer's ``state`` may be
        ``compiling`` (:meth:`list_plugins` shows when it is ``ready`` or
        ``failed``); attaching or deploying it waits for the compile."""
        if isinstance(wasm, str):
            with open(wasm, "rb") as file:
                wasm = file.read()
        return PluginDescription(*self._native.upload_plugin(name, bytes(wasm), hook))

    def list_plugins(self) -> list[PluginDescription]:
        return [PluginDescription(*row) for row in self._native.list_plugins()]

    def delete_plugins(self, names: Sequence[str]) -> None:
        """Deletes plugins (refused while attached or deployed: :class:`PluginInUseError`)."""
        for name in names:
            self._native.delete_plugin(name)

    def plugin_logs(self, name: str) -> list[tuple[int, str, str]]:
        """``(unix ms, level, message)`` lines of the plugin's log."""
        return self._native.plugin_logs(name)

    def add_interceptor(self, topic: str, plugin: str, kind: str = "produce",
                        config: Optional[Mapping[str, object]] = None, failure_policy: str = "fail-closed") -> None:
        """Attaches a ``produce`` or ``consume`` interceptor; its ``init(config)`` may refuse."""
        self._native.attach_plugin(topic, f"{kind}-interceptor", plugin,
                                   {key: str(value) for key, value in (config or {}).items()}, failure_policy)

    def remove_interceptor(self, topic: str, plugin: str, kind: str = "produce") -> None:
        self._native.detach_plugin(topic, f"{kind}-interceptor", plugin)

    def set_partitioner(self, topic: str, plugin: str, config: Optional[Mapping[str, object]] = None) -> None:
        """Makes a partitioner plugin place records sent to ``topic`` without a
        partition — in every producer, in every language (new producers, and
        others when they refresh the topic's metadata)."""
        self._native.attach_plugin(topic, "partitioner", plugin,
                                   {key: str(value) for key, value in (config or {}).items()}, "")

    def deploy_transform(self, name: str, plugin: str, input_topic: str, output_topics: Sequence[str],
                         start: TransformStart = "earliest", config: Optional[Mapping[str, object]] = None,
                         dead_letter_topic: Optional[str] = None) -> None:
        """Deploys a transform: the broker runs the ``transform`` plugin
        ``plugin`` over every committed record of ``input_topic`` and produces
        what it emits to ``output_topics`` (1 to 8; the plugin picks one per
        record), exactly once.

        ``start`` is ``"earliest"``, ``"latest"`` (new records only) or an
        offset of every input partition; anything else is a ``ValueError``
        (``TypeError`` for a non-number). The plugin's ``init(config)`` runs
        first and may refuse. Records the plugin fails on for good (a trap, bad
        output, its own non-retryable error) go to ``dead_letter_topic``
        unchanged, with ``weir.dlq.*`` headers, when it is set; otherwise such a
        record holds its partition (state ``retrying: <why>``)."""
        self._native.deploy_transform(name, plugin, input_topic, list(output_topics), _transform_offset(start),
                                      {key: str(value) for key, value in (config or {}).items()}, dead_letter_topic)

    def list_transforms(self) -> list[TransformDescription]:
        """Every deployed transform, with its progress per input partition."""
        return [_transform(row) for row in self._native.list_transforms()]

    def pause_transform(self, name: str) -> None:
        """Holds a transform's input back (its checkpoint stays where it is)."""
        self._native.control_transform(name, "pause")

    def resume_transform(self, name: str) -> None:
        """Lets a paused transform catch up from where it stopped."""
        self._native.control_transform(name, "resume")

    def replay_transform(self, name: str, start: TransformStart = "earliest") -> None:
        """Processes the input again from ``start`` (as in :meth:`deploy_transform`):
        a new run, so outputs are produced again."""
        self._native.control_transform(name, "replay", _transform_offset(start))

    def delete_transform(self, name: str) -> None:
        """Stops and deletes a transform; its output topics and their records stay."""
        self._native.control_transform(name, "delete")
