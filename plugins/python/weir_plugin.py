"""Read and write Weir's packed batches (see wit/weir-plugin.wit).

A batch is one byte arena plus an index of 8 u32 words per record:
key offset/length, value offset/length, headers offset/length, offset delta,
timestamp delta (an s32's bits). A length of 0xFFFF_FFFF means null.
"""

import struct
from dataclasses import dataclass
from typing import Iterator

from wit_world.imports.types import Batch, ErrorCode, PluginError
from componentize_py_types import Err

STRIDE = 8
NULL = 0xFFFF_FFFF


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_delta: int  # ms, relative to the batch's base-timestamp-ms
    offset_delta: int


def fail(code: ErrorCode, message: str) -> Err:
    """An error to `raise` from init/on-consume/process."""
    return Err(PluginError(code, message))


def _span(arena: bytes, offset: int, length: int) -> bytes | None:
    if length == NULL:
        return None
    if offset + length > len(arena):
        raise fail(ErrorCode.INVALID_INPUT, "span outside the arena")
    return arena[offset:offset + length]


def _headers(span: bytes) -> list[tuple[str, bytes | None]]:
    headers, at = [], 0
    while at < len(span):
        (name_length,) = struct.unpack_from("<I", span, at)
        name = span[at + 4:at + 4 + name_length].decode()
        at += 4 + name_length
        (value_length,) = struct.unpack_from("<I", span, at)
        at += 4
        if value_length == NULL:
            headers.append((name, None))
        else:
            headers.append((name, span[at:at + value_length]))
            at += value_length
    return headers


def records(batch: Batch) -> Iterator[Record]:
    """The records of an input batch, in order (one at a time: memory is tight)."""
    arena, index = batch.arena, batch.index
    for at in range(0, len(index), STRIDE):
        w = index[at:at + STRIDE]
        delta = w[7] - (1 << 32) if w[7] >= 1 << 31 else w[7]
        yield Record(
            key=_span(arena, w[0], w[1]),
            value=_span(arena, w[2], w[3]),
            headers=_headers(_span(arena, w[4], w[5]) or b""),
            timestamp_delta=delta,
            offset_delta=w[6],
        )


class BatchBuilder:
    """Builds an output batch (replacements, transform output)."""

    def __init__(self) -> None:
        self.arena = bytearray()
        self.index: list[int] = []  # componentize-py wants a list (not an array) for list<u32>

    @property
    def count(self) -> int:
        """Records pushed so far."""
        return len(self.index) // STRIDE

    def _bytes(self, data: bytes | None) -> tuple[int, int]:
        offset = len(self.arena)
        if data is None:
            return offset, NULL
        self.arena += data
        return offset, len(data)

    def push(self, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes | None]], timestamp_delta: int) -> None:
        """Appends a record; timestamp_delta is relative to the input's base."""
        key_span = self._bytes(key)
        value_span = self._bytes(value)
        headers_offset = len(self.arena)
        for name, header_value in headers:
            encoded = name.encode()
            self.arena += struct.pack("<I", len(encoded)) + encoded
            if header_value is None:
                self.arena += struct.pack("<I", NULL)
            else:
                self.arena += struct.pack("<I", len(header_value)) + header_value
        headers_length = len(self.arena) - headers_offset
        self.index += [*key_span, *value_span, headers_offset, headers_length,
                       len(self.index) // STRIDE, timestamp_delta & 0xFFFF_FFFF]

    def push_with_value(self, record: Record, value: bytes | None) -> None:
        """Appends a copy of `record` with a new value (same key, headers, timestamp)."""
        self.push(record.key, value, record.headers, record.timestamp_delta)

    def build(self, input: Batch) -> Batch:
        """The batch, with the input's base timestamp (so deltas stay valid)."""
        return Batch(-1, input.base_timestamp_ms, bytes(self.arena), self.index)
