"""Weir's Python client: a native producer, consumer and admin client built on
Weir's Rust client core (batching, partitioning, retries and consumer groups all
happen there).

    >>> import weir
    >>> with weir.Producer("127.0.0.1:9292") as producer:
    ...     producer.produce("orders", b"hello", key=b"user-42").result()

Every error is a :class:`WeirError` subclass named after the broker's
``ErrorCode`` (``weir.UnknownTopicOrPartitionError``, ...), with ``.code``.
Blocking calls release the GIL and can be interrupted with Ctrl-C.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence

from . import _native
from ._native import Message, WeirError, partition_for_key

__all__ = [
    "Admin",
    "Consumer",
    "Message",
    "Deliveries",
    "NewTopic",
    "Producer",
    "RecordMetadata",
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


class Delivery:
    """A produced record's pending acknowledgement."""

    def __init__(self, native):
        self._native = native

    def result(self, timeout: Optional[float] = None) -> RecordMetadata:
        """Waits for the acknowledgement; raises the record's error if it failed."""
        return RecordMetadata(*self._native.result(timeout))


class Deliveries:
    """The acknowledgements of one :meth:`Producer.produce_many` call. One object
    for the whole call (not one per record), so large batches do not wake
    Python's cyclic garbage collector."""

    def __init__(self, natives):
        self._natives = natives

    def __len__(self) -> int:
        return len(self._natives)

    def __getitem__(self, index: int) -> Delivery:
        return Delivery(self._natives[index])

    def results(self) -> list[RecordMetadata]:
        """Waits for all of them in one native call; raises the first failure."""
        return [RecordMetadata(*metadata) for metadata in _native.wait_all(self._natives)]


def wait_all(deliveries: "Sequence[Delivery] | Sequence[Deliveries]") -> list[RecordMetadata]:
    """Waits for many deliveries (or ``produce_many`` results) in one native call;
    raises the first failure."""
    natives = []
    for item in deliveries:
        natives.extend(item._natives if isinstance(item, Deliveries) else [item._native])
    return [RecordMetadata(*metadata) for metadata in _native.wait_all(natives)]


def _settings(config: Optional[Mapping[str, object]], **typed: object) -> dict:
    settings = {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in (config or {}).items()}
    for key, value in typed.items():
        if value is not None:
            settings[key.replace("_", ".")] = str(value).lower() if isinstance(value, bool) else str(value)
    return settings


class Producer:
    """Sends records; see the Rust client for batching, retries and idempotence.

    ``config`` takes Kafka-style settings (``linger.ms``, ``acks``,
    ``compression.type``, ...); unknown keys are errors.
    """

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9292", *, acks: Optional[str] = None,
                 linger_ms: Optional[int] = None, config: Optional[Mapping[str, object]] = None):
        self._native = _native.Producer(bootstrap_servers, _settings(config, acks=acks, linger_ms=linger_ms))

    def produce(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None,
                headers: Optional[Sequence[tuple[str, Optional[bytes]]]] = None,
                partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> Delivery:
        """Queues a record; returns its :class:`Delivery`."""
        return Delivery(self._native.send(topic, value, key, list(headers) if headers else None, partition, timestamp_ms))

    def produce_many(self, topic: str, values: Sequence[Optional[bytes]],
                     keys: Optional[Sequence[Optional[bytes]]] = None,
                     partition: Optional[int] = None) -> Deliveries:
        """Queues many records of one topic in one native call (much cheaper per
        record than :meth:`produce`); returns their :class:`Deliveries`."""
        return Deliveries(self._native.send_many(topic, list(values), list(keys) if keys is not None else None, partition))

    def flush(self) -> None:
        self._native.flush()

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class Consumer:
    """Reads assigned partitions, or joins a consumer group with :meth:`subscribe`."""

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9292", *, group_id: Optional[str] = None,
                 auto_offset_reset: Optional[str] = None, config: Optional[Mapping[str, object]] = None):
        settings = _settings(config, group_id=group_id, auto_offset_reset=auto_offset_reset)
        self._native = _native.Consumer(bootstrap_servers, settings)
        self._buffer: list[Message] = []

    def assign(self, partitions: Sequence[tuple[str, int]]) -> None:
        self._native.assign(list(partitions))

    def subscribe(self, topics: Sequence[str]) -> None:
        self._native.subscribe(list(topics))

    def seek(self, topic: str, partition: int, offset: "int | str") -> None:
        """``offset``: a number, ``"beginning"`` or ``"end"``."""
        self._native.seek(topic, partition, offset)

    def assignment(self) -> list[tuple[str, int]]:
        return self._native.assignment()

    def position(self, topic: str, partition: int) -> Optional[int]:
        return self._native.position(topic, partition)

    def poll_batch(self, timeout: float = 1.0) -> list[Message]:
        """Records that arrived within ``timeout`` seconds (possibly none)."""
        batch, self._buffer = self._buffer + self._native.poll_batch(timeout), []
        return batch

    def poll(self, timeout: float = 1.0) -> Optional[Message]:
        """One record, or ``None`` when none arrived within ``timeout`` seconds."""
        if not self._buffer:
            self._buffer = self._native.poll_batch(timeout)
        return self._buffer.pop(0) if self._buffer else None

    def __iter__(self) -> Iterator[Message]:
        while True:
            message = self.poll(1.0)
            if message is not None:
                yield message

    def commit(self) -> None:
        self._native.commit()

    def committed(self, topic: str, partition: int) -> Optional[int]:
        return self._native.committed(topic, partition)

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@dataclass
class NewTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = -1
    config: dict = field(default_factory=dict)


class Admin:
    """Topic administration."""

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9292"):
        self._native = _native.Admin(bootstrap_servers)

    def create_topics(self, topics: Sequence[NewTopic]) -> None:
        for topic in topics:
            self._native.create_topic(topic.name, topic.num_partitions, topic.replication_factor,
                                      {key: str(value) for key, value in topic.config.items()})

    def list_topics(self) -> list[str]:
        return self._native.list_topics()

    def delete_topics(self, names: Sequence[str]) -> None:
        for name in names:
            self._native.delete_topic(name)

    def describe_topic(self, name: str) -> tuple[int, dict[str, str]]:
        """(partition count, effective configs)."""
        return self._native.describe_topic(name)
