// Read and write Weir's packed batches (see wit/weir-plugin.wit).
//
// A batch is one byte arena (Uint8Array) plus an index (Uint32Array) of 8
// words per record: key offset/length, value offset/length, headers
// offset/length, offset delta, timestamp delta (an s32's bits). A length of
// 0xFFFF_FFFF means null. Base offset/timestamp are BigInts (s64).

export const STRIDE = 8;
export const NULL = 0xffffffff;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** An error to `throw` from init/process: the host sees err(plugin-error). */
export function fail(code, message) {
  // code: 'invalid-config' | 'invalid-input' | 'retryable' | 'internal'
  return { payload: { code, message } };
}

function span(arena, offset, length) {
  if (length === NULL) return null;
  if (offset + length > arena.length) throw fail('invalid-input', 'span outside the arena');
  return arena.subarray(offset, offset + length);
}

function readHeaders(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headers = [];
  let at = 0;
  while (at < bytes.length) {
    const nameLength = view.getUint32(at, true);
    const name = decoder.decode(bytes.subarray(at + 4, at + 4 + nameLength));
    at += 4 + nameLength;
    const valueLength = view.getUint32(at, true);
    at += 4;
    if (valueLength === NULL) {
      headers.push([name, null]);
    } else {
      headers.push([name, bytes.subarray(at, at + valueLength)]);
      at += valueLength;
    }
  }
  return headers;
}

/**
 * The records of an input batch, in order, one at a time (memory is tight):
 * { key, value (Uint8Array | null), headers ([name, Uint8Array | null][]),
 *   timestampDelta (ms relative to the batch base), offsetDelta }.
 */
export function* records(batch) {
  const { arena, index } = batch;
  for (let at = 0; at < index.length; at += STRIDE) {
    const w = index.subarray(at, at + STRIDE);
    yield {
      key: span(arena, w[0], w[1]),
      value: span(arena, w[2], w[3]),
      headers: readHeaders(span(arena, w[4], w[5]) ?? new Uint8Array()),
      timestampDelta: w[7] | 0, // the s32 from its bits
      offsetDelta: w[6],
    };
  }
}

/** Builds an output batch (replacements, transform output). */
export class BatchBuilder {
  #arena = new Uint8Array(4096);
  #view = new DataView(this.#arena.buffer);
  #length = 0;
  #index = [];

  get count() {
    return this.#index.length / STRIDE;
  }

  #reserve(bytes) {
    if (this.#length + bytes <= this.#arena.length) return;
    const grown = new Uint8Array(Math.max(2 * this.#arena.length, this.#length + bytes));
    grown.set(this.#arena.subarray(0, this.#length));
    this.#arena = grown;
    this.#view = new DataView(grown.buffer);
  }

  #bytes(bytes) {
    const offset = this.#length;
    if (bytes === null || bytes === undefined) return [offset, NULL];
    this.#reserve(bytes.length);
    this.#arena.set(bytes, offset);
    this.#length += bytes.length;
    return [offset, bytes.length];
  }

  #u32(value) {
    this.#reserve(4);
    this.#view.setUint32(this.#length, value, true);
    this.#length += 4;
  }

  /** Appends a record; timestampDelta is relative to the input's base timestamp. */
  push(key, value, headers, timestampDelta) {
    const [keyOffset, keyLength] = this.#bytes(key);
    const [valueOffset, valueLength] = this.#bytes(value);
    const headersOffset = this.#length;
    for (const [name, headerValue] of headers) {
      const encoded = encoder.encode(name);
      this.#u32(encoded.length);
      this.#bytes(encoded);
      if (headerValue === null) {
        this.#u32(NULL);
      } else {
        this.#u32(headerValue.length);
        this.#bytes(headerValue);
      }
    }
    const offsetDelta = this.count;
    this.#index.push(keyOffset, keyLength, valueOffset, valueLength,
      headersOffset, this.#length - headersOffset, offsetDelta, timestampDelta >>> 0);
  }

  /** Appends a copy of `record` with a new value (same key, headers, timestamp). */
  pushWithValue(record, value) {
    this.push(record.key, value, record.headers, record.timestampDelta);
  }

  /** The batch, with the input's base timestamp (so deltas stay valid). */
  build(input) {
    return {
      baseOffset: -1n,
      baseTimestampMs: input.baseTimestampMs,
      arena: this.#arena.slice(0, this.#length),
      index: new Uint32Array(this.#index),
    };
  }
}
