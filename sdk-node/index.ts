/**
 * Weir for Node: a native addon over Weir's Rust client core with a
 * kafkajs-familiar API.
 *
 * ```js
 * const { Weir } = require('weir')      // or: import { Weir } from 'weir'
 * const weir = new Weir({ brokers: ['127.0.0.1:9292'] })
 * const producer = weir.producer({ idempotent: true })
 * await producer.send({ topic: 'orders', messages: [{ key: 'k', value: 'v' }] })
 * ```
 *
 * Offsets are `bigint` (never a lossy `number`), keys and values `Buffer`
 * (strings are accepted on input), and errors `WeirError` subclasses from the
 * one ErrorCode table, with `code` and `retriable`.
 * @packageDocumentation
 */

import { AsyncLocalStorage } from 'async_hooks'
import { EventEmitter } from 'events'
import { inspect } from 'util'

import { ERROR_CLASSES, InvalidRequestError, WeirError } from './errors'

export * from './errors'

import type * as NativeTypes from './native'

export type {
  CommittedOffset,
  GroupDescription,
  GroupListing,
  GroupMember,
  PartitionDescription,
  PartitionLag,
  PluginDescription,
  PluginLogLine,
  TopicDescription,
  TransformPartition,
  TransformStatus,
} from './native'

type Native = typeof NativeTypes
// eslint-disable-next-line @typescript-eslint/no-require-imports
const native: Native = require('./native.js')

/** Turns an error from the native layer into its `WeirError` subclass. */
function weirError(error: unknown): Error {
  if (!(error instanceof Error)) {
    return new WeirError(String(error), 1, false)
  }
  const match = /^\[weir:(\d+)\] ([\s\S]*)$/.exec(error.message)
  if (match === null) {
    return error
  }
  const code = Number(match[1])
  const entry = ERROR_CLASSES.get(code)
  if (entry === undefined) {
    return new WeirError(match[2], code, false)
  }
  const [Class, retriable] = entry
  return new Class(match[2], code, retriable)
}

async function call<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (error) {
    throw weirError(error)
  }
}

function sync<T>(work: () => T): T {
  try {
    return work()
  } catch (error) {
    throw weirError(error)
  }
}

/** Bytes in: a `Buffer`, or a string (UTF-8). */
export type Bytes = Buffer | string

function bytes(value: Bytes | null | undefined): Buffer | undefined {
  if (value === null || value === undefined) {
    return undefined
  }
  return typeof value === 'string' ? Buffer.from(value, 'utf8') : value
}

/** An offset in: a `bigint`, or a number or decimal string that is an integer. */
export type OffsetLike = bigint | number | string

function offset_(value: OffsetLike): bigint {
  if (typeof value === 'number' && !Number.isSafeInteger(value)) {
    throw new RangeError(`offset ${value} is not a safe integer; pass a bigint`)
  }
  return BigInt(value)
}

/** Settings every client takes. */
export interface WeirConfig {
  /** `host:port` of one or more brokers (the rest are discovered). */
  brokers: string[]
  clientId?: string
  /** Longest any request waits for its answer (ms). */
  requestTimeout?: number
  /** Longest a connection takes to set up (ms). */
  connectionTimeout?: number
  /**
   * Any other setting every client takes, by its Kafka name
   * (`retry.backoff.ms`, …); producer- or consumer-only settings go in
   * `producer({ config })` or `consumer({ config })`.
   */
  config?: Record<string, string>
}

/** Producer settings; `config` takes any other by its Kafka name. */
export interface ProducerConfig {
  /** Idempotent sends: retries never duplicate or reorder (needs `acks: 'all'`). */
  idempotent?: boolean
  /** `0`, `1`, or `-1` / `'all'` (the default). */
  acks?: 0 | 1 | -1 | 'all'
  /** How long a batch waits for more records (ms). */
  lingerMs?: number
  compression?: 'none' | 'lz4' | 'zstd'
  /** Largest batch per partition (bytes). */
  batchSize?: number
  /** Bytes of records buffered before sends wait. */
  bufferMemory?: number
  /** Longest a record may take to be acknowledged, retries included (ms). */
  deliveryTimeout?: number
  config?: Record<string, string>
}

/** Consumer settings; `config` takes any other by its Kafka name. */
export interface ConsumerConfig {
  /** The consumer group; needed by `subscribe` (not by `assign`). */
  groupId?: string
  /** A static member id: a restart within the session timeout keeps its partitions. */
  groupInstanceId?: string
  sessionTimeout?: number
  /** Commit positions in the background (default true). */
  autoCommit?: boolean
  autoCommitInterval?: number
  /** Most records one poll returns. */
  maxPollRecords?: number
  /** How long a poll waits for records (ms, default 1000). */
  maxWaitTimeInMs?: number
  config?: Record<string, string>
}

/** A record to send. */
export interface Message {
  key?: Bytes | null
  value: Bytes | null
  /** A header per key; an array for a key repeated (in order), as kafkajs takes them. */
  headers?: Record<string, Bytes | null | undefined | (Bytes | null)[]>
  /** A partition, or none for the topic's partitioner (its plugin, else murmur2 of the key). */
  partition?: number
  /** Milliseconds since the epoch (default: now). */
  timestamp?: number | bigint | string
}

/** What `send` takes. */
export interface ProducerRecord {
  topic: string
  messages: Message[]
}

/** Where one sent message landed. */
export interface RecordMetadata {
  topicName: string
  partition: number
  errorCode: number
  /** -1 with `acks: 0`. */
  offset: bigint
  timestamp: bigint
}

/** A record read by a consumer. */
export interface KafkaMessage {
  key: Buffer | null
  value: Buffer | null
  /** A header per key; an array for a key that repeats (in order). */
  headers: Record<string, Buffer | null | (Buffer | null)[]>
  offset: bigint
  /** Milliseconds since the epoch. */
  timestamp: bigint
}

/** A topic and partition. */
export interface TopicPartition {
  topic: string
  partition: number
}

/** An offset to commit or seek to. */
export interface TopicPartitionOffset extends TopicPartition {
  offset: OffsetLike
}

function commonSettings(config: WeirConfig): Record<string, string> {
  const settings: Record<string, string> = {}
  if (config.clientId !== undefined) settings['client.id'] = config.clientId
  if (config.requestTimeout !== undefined) settings['request.timeout.ms'] = String(config.requestTimeout)
  if (config.connectionTimeout !== undefined) {
    settings['socket.connection.setup.timeout.ms'] = String(config.connectionTimeout)
  }
  return { ...settings, ...(config.config ?? {}) }
}

/**
 * The `RecordMetadata` of one sent message. `offset` and `timestamp` are
 * read from the send's answer when first asked for: a `bigint` is a heap
 * object, and making two per message up front is most of the cost of the
 * metadata (45–85 ms of CPU per 200,000 messages in a micro-benchmark,
 * about 10 ms without them), whether or not the application looks. They are
 * accessors on the prototype, so a spread (`{ ...metadata }`) or
 * `Object.keys` does not list them; `console.log` and `toJSON()` show every
 * field (and `JSON.stringify` refuses the `bigint`, as before).
 */
class SentRecordMetadata implements RecordMetadata {
  readonly topicName: string
  readonly partition: number
  readonly errorCode = 0
  readonly #sent: NativeTypes.Sent
  readonly #index: number

  constructor(topicName: string, sent: NativeTypes.Sent, index: number) {
    this.topicName = topicName
    this.partition = sent.partitions[index]
    this.#sent = sent
    this.#index = index
  }

  /** -1 with `acks: 0`. */
  get offset(): bigint {
    return this.#sent.offsets[this.#index]
  }

  get timestamp(): bigint {
    return this.#sent.timestamps[this.#index]
  }

  /** Every field as an own property. */
  toJSON(): RecordMetadata {
    const { topicName, partition, errorCode, offset, timestamp } = this
    return { topicName, partition, errorCode, offset, timestamp }
  }

  [inspect.custom](): RecordMetadata {
    return this.toJSON()
  }
}

/**
 * Records cross to the native layer packed, both ways: one buffer holding
 * every key, value and header, and typed arrays with `STRIDE` words per record
 * (topic position, partition, key start and length, value start and length,
 * first header, header count) and 4 per header (key start and length, value
 * start and length). A length of `NULL` is a null key or value; a partition
 * of `NULL` leaves the choice to the topic's partitioner. A handful of objects
 * cross per call instead of a dozen per record.
 */
const STRIDE = 8
const NULL = 0xffffffff

function byteLength(value: Bytes | null | undefined): number {
  if (value === null || value === undefined) return 0
  return typeof value === 'string' ? Buffer.byteLength(value, 'utf8') : value.length
}

function headerValues(value: Bytes | null | undefined | (Bytes | null)[]): (Bytes | null | undefined)[] {
  return Array.isArray(value) ? value : [value]
}

function checkedPartition(partition: number | undefined): number {
  if (partition === undefined) return NULL
  if (!Number.isInteger(partition) || partition < 0 || partition > 0x7fffffff) {
    throw new InvalidRequestError(`partition ${partition} is not a non-negative integer`, 8, false)
  }
  return partition
}

function checkedTimestamp(timestamp: number | bigint | string | undefined): number {
  if (timestamp === undefined) return -1
  const milliseconds = Number(timestamp)
  if (!Number.isSafeInteger(milliseconds) || milliseconds < 0) {
    throw new InvalidRequestError(`timestamp ${String(timestamp)} is not a non-negative integer of ms`, 8, false)
  }
  return milliseconds
}

/** `batch` packed for the native `send`, its data in a buffer `allocate` gives. */
function pack(batch: ProducerRecord[], allocate: (bytes: number) => Buffer): NativeTypes.Outgoing {
  let count = 0
  let dataBytes = 0
  let headerCount = 0
  for (const { messages } of batch) {
    count += messages.length
    for (const message of messages) {
      dataBytes += byteLength(message.key) + byteLength(message.value)
      if (message.headers === undefined) continue
      for (const [key, value] of Object.entries(message.headers)) {
        for (const each of headerValues(value)) {
          headerCount += 1
          dataBytes += Buffer.byteLength(key, 'utf8') + byteLength(each)
        }
      }
    }
  }
  const topics: string[] = []
  const topicPositions = new Map<string, number>()
  const data = allocate(dataBytes)
  const index = new Uint32Array(count * STRIDE)
  const headers = new Uint32Array(headerCount * 4)
  const timestamps = new Float64Array(count)
  let position = 0
  const put = (value: Bytes | null | undefined, words: Uint32Array, slot: number): void => {
    if (value === null || value === undefined) {
      words[slot] = 0
      words[slot + 1] = NULL
      return
    }
    let length: number
    if (typeof value === 'string') {
      length = data.write(value, position, 'utf8')
    } else {
      // TypedArray#set copies in place; Buffer#copy makes a view of the source first.
      data.set(value, position)
      length = value.length
    }
    words[slot] = position
    words[slot + 1] = length
    position += length
  }
  let record = 0
  let header = 0
  for (const { topic, messages } of batch) {
    let topicPosition = topicPositions.get(topic)
    if (topicPosition === undefined) {
      topicPosition = topics.push(topic) - 1
      topicPositions.set(topic, topicPosition)
    }
    for (const message of messages) {
      const at = record * STRIDE
      index[at] = topicPosition
      index[at + 1] = checkedPartition(message.partition)
      put(message.key, index, at + 2)
      put(message.value, index, at + 4)
      index[at + 6] = header
      if (message.headers !== undefined) {
        for (const [key, value] of Object.entries(message.headers)) {
          for (const each of headerValues(value)) {
            put(key, headers, header * 4)
            put(each, headers, header * 4 + 2)
            header += 1
          }
        }
      }
      index[at + 7] = header - index[at + 6]
      timestamps[record] = checkedTimestamp(message.timestamp)
      record += 1
    }
  }
  return { topics, data, index, headers, timestamps }
}

/**
 * The messages of a native poll's answer. It arrives packed the other way
 * round and uncopied: keys, values and header values are views into
 * `buffers` (the bytes the client core fetched, shared with no one else),
 * with `POLLED_STRIDE` (the core's `client_ffi::VIEW_STRIDE`) words per record (topic position, partition, buffer
 * position, key start and length, value start and length, first header,
 * header count) and 4 per header (key start and length in `headerKeys`, value
 * start and length in the record's buffer).
 */
const POLLED_STRIDE = 9

/**
 * How long a consumer keeps taking already-fetched records without letting
 * the event loop turn (a catch-up read could otherwise run on microtasks
 * alone, starving timers and I/O).
 */
const EVENT_LOOP_TURN_MS = 10

function unpack(polled: NativeTypes.Polled): (KafkaMessage & TopicPartition)[] {
  const { topics, buffers, headerKeys, index, headers, offsets, timestamps } = polled
  const messages: (KafkaMessage & TopicPartition)[] = new Array(offsets.length)
  for (let record = 0; record < offsets.length; record++) {
    const at = record * POLLED_STRIDE
    const data = buffers[index[at + 2]]
    const slice = (start: number, length: number): Buffer | null =>
      length === NULL ? null : data.subarray(start, start + length)
    const messageHeaders: Record<string, Buffer | null | (Buffer | null)[]> = {}
    const first = index[at + 7]
    for (let header = first; header < first + index[at + 8]; header++) {
      const words = header * 4
      const key = headerKeys.toString('utf8', headers[words], headers[words] + headers[words + 1])
      const value = slice(headers[words + 2], headers[words + 3])
      const seen = messageHeaders[key]
      if (seen === undefined) messageHeaders[key] = value
      else if (Array.isArray(seen)) seen.push(value)
      else messageHeaders[key] = [seen, value]
    }
    messages[record] = {
      topic: topics[index[at]],
      partition: index[at + 1],
      key: slice(index[at + 3], index[at + 4]),
      value: slice(index[at + 5], index[at + 6]),
      headers: messageHeaders,
      offset: offsets[record],
      timestamp: timestamps[record],
    }
  }
  return messages
}

/** A producer with nothing unacknowledged lets its packing buffers go after this long (ms). */
const PACK_BUFFERS_IDLE_MS = 1000

/**
 * The most bytes of packed sends handed to the core and not yet settled (less
 * when `buffer.memory` is smaller). 16 MiB keeps a round trip's worth in
 * flight at several hundred MB/s, and the buffers stay warm in the CPU cache
 * for the core's copy into batches: packing up to the default 64 MiB ahead
 * made a burst fault in and zero four times the pages (a burst of 200,000
 * sends of 1 KiB: 0.52–0.64 CPU-seconds for the Node process, against
 * 0.53–0.59 with 16 MiB and 0.49–0.54 with 8 MiB).
 */
const PACKED_AHEAD_BYTES_MAX = 16 * 1024 * 1024

/**
 * Buffers that packed sends reuse once the core has let go of them. A send of
 * many records packs them into one buffer of their bytes; a fresh one per
 * send would come from new pages every time (the kernel faults in and zeroes
 * each page: most of a large send's cost), so buffers of settled sends are
 * kept, up to `bytesMax` in all, and given to later sends; the producer lets
 * them go once it has been idle a while.
 */
class PackBuffers {
  /** Below this a send packs into a fresh buffer (Node pools small ones itself). */
  static readonly POOLED_MIN = 64 * 1024
  readonly #free: Buffer[] = []
  #freeBytes = 0
  readonly #bytesMax: number

  constructor(bytesMax: number) {
    this.#bytesMax = bytesMax
  }

  /** A buffer of exactly `bytes`: a view of a kept one that is large enough (not more than twice), or a new one. */
  take(bytes: number): Buffer {
    if (bytes < PackBuffers.POOLED_MIN) return Buffer.allocUnsafe(bytes)
    let best = -1
    for (let at = 0; at < this.#free.length; at++) {
      const length = this.#free[at].length
      if (length >= bytes && length <= 2 * bytes && (best < 0 || length < this.#free[best].length)) best = at
    }
    if (best < 0) {
      // Whole 64 KiB units, so sends of similar sizes fit each other's buffers.
      const units = Math.ceil(bytes / PackBuffers.POOLED_MIN)
      return Buffer.allocUnsafeSlow(units * PackBuffers.POOLED_MIN).subarray(0, bytes)
    }
    const [buffer] = this.#free.splice(best, 1)
    this.#freeBytes -= buffer.length
    return buffer.subarray(0, bytes)
  }

  /** Keeps the whole buffer `view` (from `take`) for later sends, if there is room. */
  give(view: Buffer): void {
    if (view.length < PackBuffers.POOLED_MIN) return
    const buffer = Buffer.from(view.buffer, view.byteOffset, view.buffer.byteLength - view.byteOffset)
    if (this.#freeBytes + buffer.length > this.#bytesMax) return
    this.#free.push(buffer)
    this.#freeBytes += buffer.length
  }

  clear(): void {
    this.#free.length = 0
    this.#freeBytes = 0
  }
}

/** A send waiting for the producer's buffer to have room. */
interface WaitingSend {
  batch: ProducerRecord[]
  resolve: (sent: NativeTypes.Sent) => void
  reject: (error: unknown) => void
}

/**
 * Sends records; `send` resolves once they are acknowledged.
 *
 * Sends go to the core in call order, each packed into one buffer. They are
 * packed while less than `bufferMemory` bytes (at most 16 MiB) of packed
 * records are unacknowledged (so the last one packed may go past it); later
 * sends wait here, unpacked, until earlier ones settle, so a burst of sends costs the
 * memory of its messages and not a second copy of them. A waiting send reads
 * its messages when it is packed: do not change them before its promise
 * settles.
 */
export class Producer {
  readonly #native: InstanceType<Native['NativeProducer']>
  /** Bytes of packed sends the core has not settled yet. */
  #unsettled = 0
  readonly #bytesMax: number
  readonly #waiting: WaitingSend[] = []
  /** Resolved when no send waits (`flush` and `disconnect` hand every send over first). */
  #handedOver: (() => void)[] = []
  readonly #buffers: PackBuffers
  /** Lets the packing buffers go if the producer is still idle when it fires. */
  #idle: NodeJS.Timeout | undefined
  #closing = false

  /** @internal */
  constructor(brokers: string[], settings: Record<string, string>) {
    this.#native = sync(() => new native.NativeProducer(brokers, settings))
    this.#bytesMax = Math.min(this.#native.bufferMemory, PACKED_AHEAD_BYTES_MAX)
    this.#buffers = new PackBuffers(this.#bytesMax)
  }

  /** Resolves at once: connections are made as sends need them. */
  async connect(): Promise<void> {}

  /**
   * Sends `messages` to `topic`, queued behind earlier sends in call order;
   * one `RecordMetadata` per message, in order.
   */
  async send(record: ProducerRecord): Promise<RecordMetadata[]> {
    return this.sendBatch({ topicMessages: [record] })
  }

  /** Sends the messages of several topics in one call. */
  async sendBatch(batch: { topicMessages: ProducerRecord[] }): Promise<RecordMetadata[]> {
    if (this.#closing) throw new InvalidRequestError('the producer is disconnected', 8, false)
    const shape = batch.topicMessages.map(({ topic, messages }): [string, number] => [topic, messages.length])
    const sent = await new Promise<NativeTypes.Sent>((resolve, reject) => {
      this.#waiting.push({ batch: batch.topicMessages, resolve, reject })
      this.#pump()
    })
    const metadata: RecordMetadata[] = new Array(sent.offsets.length)
    let record = 0
    for (const [topicName, count] of shape) {
      for (let each = 0; each < count; each++, record++) {
        metadata[record] = new SentRecordMetadata(topicName, sent, record)
      }
    }
    return metadata
  }

  /**
   * Packs and hands to the core, in call order, the waiting sends that have
   * room. Synchronous, so no later send can overtake an earlier one.
   */
  #pump(): void {
    while (this.#waiting.length > 0 && this.#unsettled < this.#bytesMax) {
      const { batch, resolve, reject } = this.#waiting.shift()!
      let packed: NativeTypes.Outgoing
      let settled: Promise<NativeTypes.Sent>
      try {
        packed = sync(() => pack(batch, (bytes) => this.#buffers.take(bytes)))
        settled = call(() => this.#native.send(packed))
      } catch (error) {
        reject(error)
        continue
      }
      const bytes = packed.data.length
      this.#unsettled += bytes
      // The core has dropped its hold on the data when a send settles.
      const release = (): void => {
        this.#unsettled -= bytes
        this.#buffers.give(packed.data)
        this.#pump()
      }
      settled.then(
        (sent) => {
          release()
          resolve(sent)
        },
        (error) => {
          release()
          reject(error)
        },
      )
    }
    if (this.#waiting.length === 0 && this.#handedOver.length > 0) {
      for (const resolve of this.#handedOver.splice(0)) resolve()
    }
    if (this.#unsettled === 0 && this.#idle === undefined) {
      this.#idle = setTimeout(() => {
        this.#idle = undefined
        if (this.#unsettled === 0) this.#buffers.clear()
      }, PACK_BUFFERS_IDLE_MS)
      this.#idle.unref()
    }
  }

  /** Resolves once every send made before it is with the core. */
  #allHandedOver(): Promise<void> {
    if (this.#waiting.length === 0) return Promise.resolve()
    return new Promise((resolve) => this.#handedOver.push(resolve))
  }

  /** Resolves once everything sent before it is acknowledged. */
  async flush(): Promise<void> {
    await this.#allHandedOver()
    await call(() => this.#native.flush())
  }

  /** Flushes, then refuses further sends. */
  async disconnect(): Promise<void> {
    this.#closing = true
    await this.#allHandedOver()
    await call(() => this.#native.close())
    this.#buffers.clear()
  }
}

/** What `subscribe` takes. */
export interface ConsumerSubscribeTopics {
  /** Names, or `RegExp`s matched anywhere in a name (as kafkajs does; flags `i`, `m`, `s` kept). */
  topics?: (string | RegExp)[]
  topic?: string | RegExp
  /** With no committed offset, start at the earliest record (else at the end). */
  fromBeginning?: boolean
}

/** One partition's records, for `eachBatch`. */
export interface Batch {
  topic: string
  partition: number
  messages: KafkaMessage[]
  isEmpty(): boolean
  /** The first message's offset (`null` when empty). */
  firstOffset(): bigint | null
  /** The last message's offset (`null` when empty), as kafkajs's `lastOffset`. */
  lastOffset(): bigint | null
}

/** What `eachMessage` is called with. */
export interface EachMessagePayload {
  topic: string
  partition: number
  message: KafkaMessage
  /** Pauses this partition: the rest of its batch is delivered after `resume`. */
  pause(): () => void
}

/** What `eachBatch` is called with. */
export interface EachBatchPayload {
  batch: Batch
  /** Marks the batch handled up to `offset` (what commits take). */
  resolveOffset(offset: OffsetLike): void
  /** Resolves at once: the client core heartbeats on its own. */
  heartbeat(): Promise<void>
  /** Commits what was resolved so far (with `autoCommit`). */
  commitOffsetsIfNecessary(): Promise<void>
  /** Whether the consumer is still running (stop after `stop()`). */
  isRunning(): boolean
  /** Whether this partition was taken away meanwhile. */
  isStale(): boolean
  /** Pauses this partition: what was not resolved is delivered after `resume`. */
  pause(): () => void
}

/** What `run` takes: one of the handlers. */
export interface ConsumerRunConfig {
  eachMessage?: (payload: EachMessagePayload) => Promise<void>
  eachBatch?: (payload: EachBatchPayload) => Promise<void>
  /** Resolve a batch's messages when `eachBatch` returns (default true). */
  eachBatchAutoResolve?: boolean
  /** Partitions handled at once (messages of one partition stay in order). Default 1. */
  partitionsConsumedConcurrently?: number
}

/** A rebalance: partitions this member got or gave up. */
export interface RebalanceEvent {
  type: 'assigned' | 'revoked'
  partitions: TopicPartition[]
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/** A JavaScript RegExp as a pattern for the client core (which matches whole names). */
function corePattern(pattern: RegExp): string {
  const flags = [...pattern.flags].filter((flag) => 'ims'.includes(flag)).join('')
  const body = `.*(?:${pattern.source}).*`
  return flags === '' ? `(?:${body})` : `(?${flags}:${body})`
}

const partitionKey = (topic: string, partition: number): string => `${topic}\u0000${partition}`

/** Longest a partition waits before a message whose handler failed is delivered again. */
const RETRY_MAX_MS = 30_000

/**
 * Reads records, in a group (`subscribe`) or from chosen partitions
 * (`assign`): with `run({ eachMessage | eachBatch })`, `for await (const m of
 * consumer)`, or `poll()`.
 *
 * Commits take only what was handled: a message counts once its `eachMessage`
 * returned, once `eachBatch` resolved it, once the loop asked for the next
 * message after it, or once `poll()` returned it. With `autoCommit` (the
 * default) that is committed every `autoCommitInterval`, when partitions move
 * to another member, and on `disconnect()`. What was fetched and not handled
 * (after `stop()`, a `break`, a `pause`, a handler error) is delivered again.
 *
 * Events: `consumer.rebalance` (a `RebalanceEvent`) and `consumer.crash` (a
 * handler's error: its message is delivered again, after a pause that grows
 * to 30 s while the handler keeps failing).
 */
export class Consumer extends EventEmitter {
  readonly events = { REBALANCE: 'consumer.rebalance', CRASH: 'consumer.crash' } as const
  readonly #brokers: string[]
  readonly #settings: Record<string, string>
  readonly #maxWait: number
  #native: InstanceType<Native['NativeConsumer']> | undefined
  #topics: string[] = []
  #patterns: string[] = []
  #fromBeginning: boolean | undefined
  #joined: Promise<void> | undefined
  #running = false
  #iterating = false
  #loop: Promise<void> | undefined
  #closed = false
  /** Partitions the application paused. */
  readonly #paused = new Set<string>()
  /** Partitions held back after a handler failed: key → consecutive failures. */
  readonly #failures = new Map<string, number>()
  /** Seeks asked for per partition: a batch in hand stops at a new one. */
  readonly #seeks = new Map<string, number>()
  /** The last seek asked for per partition, re-issued after a poll it raced. */
  readonly #seekTargets = new Map<string, { topic: string; partition: number; where: bigint | string }>()
  /** Set while a handler runs: `stop()` from inside it must not wait for it. */
  readonly #inHandler = new AsyncLocalStorage<{ active: boolean }>()
  /** Each `run` call's number: a run stopped while it joined does not start its loop. */
  #runId = 0
  /** When the event loop last turned under `#fetch` (`performance.now()`). */
  #turnedAt = 0

  /** @internal */
  constructor(brokers: string[], settings: Record<string, string>, maxWait: number) {
    super()
    this.#brokers = brokers
    // Commits take stored offsets (what was handled), never what was fetched.
    this.#settings = { ...settings, 'enable.auto.offset.store': 'false' }
    this.#maxWait = maxWait
  }

  #consumer(): InstanceType<Native['NativeConsumer']> {
    if (this.#native === undefined) {
      const settings = { ...this.#settings }
      if (this.#fromBeginning !== undefined && settings['auto.offset.reset'] === undefined) {
        settings['auto.offset.reset'] = this.#fromBeginning ? 'earliest' : 'latest'
      }
      this.#native = sync(() => new native.NativeConsumer(this.#brokers, settings))
    }
    return this.#native
  }

  /** Resolves at once: connections are made as calls need them. */
  async connect(): Promise<void> {}

  /**
   * Adds topics (names, or `RegExp`s, now and as topics come and go) to the
   * group subscription, joined on the first `run`, `poll` or iteration.
   */
  async subscribe(subscription: ConsumerSubscribeTopics): Promise<void> {
    this.#refuseClosed()
    if (this.#joined !== undefined) {
      throw new InvalidRequestError('subscribe before the consumer runs, polls or iterates', 8, false)
    }
    const topics = [...(subscription.topics ?? []), ...(subscription.topic === undefined ? [] : [subscription.topic])]
    for (const topic of topics) {
      if (typeof topic === 'string') this.#topics.push(topic)
      else this.#patterns.push(corePattern(topic))
    }
    if (subscription.fromBeginning !== undefined) this.#fromBeginning ??= subscription.fromBeginning
  }

  /** Reads exactly these partitions, outside any group. */
  async assign(partitions: TopicPartition[]): Promise<void> {
    this.#refuseClosed()
    await call(() => this.#consumer().assign(partitions))
    this.#joined = Promise.resolve()
  }

  #refuseClosed(): void {
    if (this.#closed) throw new InvalidRequestError('the consumer is disconnected', 8, false)
  }

  /** Joins once; a join that failed is tried again by the next call. */
  #join(): Promise<void> {
    if (this.#joined === undefined) {
      const consumer = this.#consumer()
      const joining =
        this.#patterns.length === 0
          ? call(() => consumer.subscribe(this.#topics, null))
          : call(() => consumer.subscribe([], [...this.#topics.map(escapeRegExp), ...this.#patterns].join('|')))
      this.#joined = joining
      joining.catch(() => {
        if (this.#joined === joining) this.#joined = undefined
      })
    }
    return this.#joined
  }

  /** Fetched records, not yet handled, with the seek counts from before the fetch. */
  async #fetch(maxRecords: number): Promise<{ messages: (KafkaMessage & TopicPartition)[]; seeks: Map<string, number> }> {
    await this.#join()
    const consumer = this.#consumer()
    const ready = await this.#pollReady(consumer, maxRecords)
    if (ready !== null) return this.#unpacked(consumer, ready, this.#seeks)
    // Disconnected while the event loop turned: its wakeup found no poll
    // waiting, so this one would wait out `maxWaitTimeInMs`.
    if (this.#closed) return { messages: [], seeks: this.#seeks }
    const before = new Map(this.#seeks)
    const fetched = await call(() => consumer.poll(this.#maxWait, maxRecords))
    this.#turnedAt = performance.now()
    return this.#unpacked(consumer, fetched, before)
  }

  /**
   * Records the core has fetched already, taken on this thread (no hop to the
   * core's runtime and back); null when a poll would wait. While records keep
   * coming this way the event loop is still let through every
   * `EVENT_LOOP_TURN_MS`, so timers and I/O are not starved by a catch-up.
   */
  async #pollReady(
    consumer: InstanceType<Native['NativeConsumer']>,
    maxRecords: number,
  ): Promise<NativeTypes.Polled | null> {
    if (performance.now() - this.#turnedAt >= EVENT_LOOP_TURN_MS) {
      await new Promise((resolve) => setImmediate(resolve))
      this.#turnedAt = performance.now()
    }
    return sync(() => consumer.pollReady(maxRecords))
  }

  /** A poll's messages, minus those of partitions sought since `before` (sought again). */
  #unpacked(
    consumer: InstanceType<Native['NativeConsumer']>,
    fetched: NativeTypes.Polled,
    before: Map<string, number>,
  ): { messages: (KafkaMessage & TopicPartition)[]; seeks: Map<string, number> } {
    // A seek made while the poll waited: the records of that partition may be
    // from before it or after it. Seek again to the target and drop them: the
    // partition is read from the target by the next poll either way.
    const raced = new Set<string>()
    for (const [key, count] of this.#seeks) {
      if ((before.get(key) ?? 0) === count) continue
      raced.add(key)
      const target = this.#seekTargets.get(key)
      if (target !== undefined) {
        try {
          consumer.seek(target.topic, target.partition, target.where)
        } catch {
          // Moved meanwhile.
        }
      }
    }
    const unpacked = unpack(fetched)
    const messages =
      raced.size === 0 ? unpacked : unpacked.filter((message) => !raced.has(partitionKey(message.topic, message.partition)))
    const seeks = new Map(this.#seeks)
    const events = consumer.rebalanceEvents()
    for (const event of events) {
      const rebalance: RebalanceEvent = { type: event.kind as 'assigned' | 'revoked', partitions: event.partitions }
      this.#emitSafely(this.events.REBALANCE, rebalance)
    }
    if (events.length > 0) this.#applyPauses()
    return { messages, seeks }
  }

  /** Whether the application sought `key` since the seek counts `seeks` were taken. */
  #soughtSince(key: string, seeks: Map<string, number>): boolean {
    return (this.#seeks.get(key) ?? 0) !== (seeks.get(key) ?? 0)
  }

  #refuseBusy(): void {
    if (this.#running || this.#iterating || this.#loop !== undefined) {
      throw new InvalidRequestError('the consumer is running (or still stopping)', 8, false)
    }
  }

  /** Pauses what the application paused and this consumer owns now (a partition assigned again starts unpaused in the core). */
  #applyPauses(): void {
    for (const { topic, partition } of this.assignment()) {
      if (this.#paused.has(partitionKey(topic, partition))) {
        try {
          this.#native?.pause(topic, partition)
        } catch {
          // Moved meanwhile.
        }
      }
    }
  }

  /** Marks a message handled: commits take the offset after it. */
  #handled(topic: string, partition: number, offset: bigint): void {
    try {
      this.#native?.storeOffset(topic, partition, offset + 1n)
    } catch {
      // The partition moved meanwhile: its next owner reads it again.
    }
  }

  /** Delivers `from` and what follows again (unless the partition moved). */
  #giveBack(topic: string, partition: number, from: bigint): void {
    try {
      this.#native?.seek(topic, partition, from)
    } catch {
      // The partition moved meanwhile: its next owner starts at the last commit.
    }
  }

  #emitSafely(event: string, payload: unknown): void {
    try {
      this.emit(event, payload)
    } catch {
      // A listener's own error must not stop the consumer.
    }
  }

  /** Holds a partition back after its handler failed, longer each time. */
  #backOff(topic: string, partition: number): void {
    const key = partitionKey(topic, partition)
    const failures = (this.#failures.get(key) ?? 0) + 1
    this.#failures.set(key, failures)
    const delay = Math.min(RETRY_MAX_MS, 1000 * 2 ** (failures - 1))
    try {
      this.#native?.pause(topic, partition)
    } catch {
      return
    }
    setTimeout(() => {
      // Unref'd: a pause must not keep the process alive by itself.
      if (!this.#paused.has(key) && !this.#closed) {
        try {
          this.#native?.resume(topic, partition)
        } catch {
          // Closed meanwhile.
        }
      }
    }, delay).unref()
  }

  /**
   * Records that arrive within `maxWaitTimeInMs` (joining the group first if
   * subscribed), each counted as handled.
   */
  async poll(maxRecords = 500): Promise<(KafkaMessage & TopicPartition)[]> {
    this.#refuseClosed()
    this.#refuseBusy()
    const { messages } = await this.#fetch(maxRecords)
    // Offsets only grow within a partition: the last message of each run of
    // one partition stands for the run (one store per run, not per message).
    messages.forEach((message, at) => {
      const next = messages[at + 1]
      if (next === undefined || next.partition !== message.partition || next.topic !== message.topic) {
        this.#handled(message.topic, message.partition, message.offset)
      }
    })
    return messages
  }

  /**
   * Runs the handler over everything consumed until `stop()` or
   * `disconnect()`; resolves once running.
   */
  async run(config: ConsumerRunConfig): Promise<void> {
    if (this.#closed) throw new InvalidRequestError('the consumer is disconnected', 8, false)
    this.#refuseBusy()
    if ((config.eachMessage === undefined) === (config.eachBatch === undefined)) {
      throw new TypeError('run takes exactly one of eachMessage and eachBatch')
    }
    this.#running = true
    const id = ++this.#runId
    try {
      await this.#join()
    } catch (error) {
      if (this.#runId === id) this.#running = false
      throw error
    }
    // Stopped, disconnected or run again while joining.
    if (!this.#running || this.#runId !== id) return
    const loop = this.#runLoop(config).finally(() => {
      if (this.#loop === loop) this.#loop = undefined
    })
    this.#loop = loop
  }

  async #runLoop(config: ConsumerRunConfig): Promise<void> {
    const concurrency = Math.max(1, config.partitionsConsumedConcurrently ?? 1)
    while (this.#running) {
      let messages: (KafkaMessage & TopicPartition)[]
      let seeks: Map<string, number>
      try {
        ;({ messages, seeks } = await this.#fetch(500))
      } catch (error) {
        if (!this.#running) return
        this.#emitSafely(this.events.CRASH, error)
        // Not unref'd: a consumer that only retries must keep the process alive.
        await new Promise((resolve) => setTimeout(resolve, 1000))
        continue
      }
      const batches = new Map<string, Batch>()
      for (const { topic, partition, ...message } of messages) {
        const key = partitionKey(topic, partition)
        let batch = batches.get(key)
        if (batch === undefined) {
          const owned: KafkaMessage[] = []
          batch = {
            topic,
            partition,
            messages: owned,
            isEmpty: () => owned.length === 0,
            firstOffset: () => (owned.length === 0 ? null : owned[0].offset),
            lastOffset: () => (owned.length === 0 ? null : owned[owned.length - 1].offset),
          }
          batches.set(key, batch)
        }
        batch.messages.push(message)
      }
      const queue = [...batches.values()]
      const workers = Array.from({ length: Math.min(concurrency, queue.length) }, async () => {
        for (let batch = queue.shift(); batch !== undefined; batch = queue.shift()) {
          const unhandled = await this.#handle(batch, config, seeks.get(partitionKey(batch.topic, batch.partition)) ?? 0)
          if (unhandled !== undefined) this.#giveBack(batch.topic, batch.partition, unhandled)
        }
      })
      await Promise.all(workers)
    }
  }

  /** Runs the handler over one partition's batch: the first offset not handled, if any. */
  async #handle(batch: Batch, config: ConsumerRunConfig, seeks: number): Promise<bigint | undefined> {
    const { topic, partition } = batch
    const key = partitionKey(topic, partition)
    // Sought since the fetch: these records are not where the application wants to read.
    if ((this.#seeks.get(key) ?? 0) !== seeks) return undefined
    /** The application paused the partition or sought elsewhere: the rest of the batch is not for now. */
    const interrupted = () => this.#paused.has(key) || (this.#seeks.get(key) ?? 0) !== seeks
    const pause = () => {
      this.pause([{ topic, partitions: [partition] }])
      return () => this.resume([{ topic, partitions: [partition] }])
    }
    if (config.eachBatch !== undefined) {
      // Stopped, or paused before its turn: the whole batch comes again.
      if (!this.#running || this.#paused.has(key)) return batch.firstOffset() ?? undefined
      let resolved: bigint | undefined
      const payload: EachBatchPayload = {
        batch,
        resolveOffset: (offset) => {
          resolved = offset_(offset)
          this.#handled(topic, partition, resolved)
        },
        heartbeat: async () => {},
        commitOffsetsIfNecessary: async () => {
          if (this.#settings['enable.auto.commit'] !== 'false') await this.commitOffsets()
        },
        isRunning: () => this.#running,
        isStale: () => !this.assignment().some((owned) => owned.topic === topic && owned.partition === partition),
        pause,
      }
      try {
        await this.#asHandler(() => config.eachBatch!(payload))
      } catch (error) {
        this.#emitSafely(this.events.CRASH, error)
        if ((this.#seeks.get(key) ?? 0) !== seeks) return undefined
        this.#backOff(topic, partition)
        return resolved === undefined ? (batch.firstOffset() ?? undefined) : resolved + 1n
      }
      this.#failures.delete(key)
      if ((this.#seeks.get(key) ?? 0) !== seeks) return undefined // the application moved it
      const last = batch.lastOffset()
      // The handler returned: its batch is resolved (as in kafkajs; with
      // `eachBatchAutoResolve: false` only what it resolved counts).
      if (config.eachBatchAutoResolve !== false && last !== null) {
        this.#handled(topic, partition, last)
        return undefined
      }
      // Not resolved to the end: the rest comes again.
      const next = resolved === undefined ? batch.firstOffset() : resolved + 1n
      return next !== null && last !== null && next <= last ? next : undefined
    }
    for (const message of batch.messages) {
      if ((this.#seeks.get(key) ?? 0) !== seeks) return undefined // the application moved it
      if (!this.#running || interrupted()) return message.offset
      try {
        await this.#asHandler(() => config.eachMessage!({ topic, partition, message, pause }))
      } catch (error) {
        this.#emitSafely(this.events.CRASH, error)
        if ((this.#seeks.get(key) ?? 0) !== seeks) return undefined
        this.#backOff(topic, partition)
        return message.offset
      }
      this.#failures.delete(key)
      this.#handled(topic, partition, message.offset)
    }
    return undefined
  }

  /** Runs a handler, marked so that `stop()` called from it does not wait for it. */
  async #asHandler(handler: () => Promise<void>): Promise<void> {
    const mark = { active: true }
    try {
      await this.#inHandler.run(mark, handler)
    } finally {
      mark.active = false
    }
  }

  /**
   * Stops `run` after the handlers in progress (a waiting poll returns at
   * once); the consumer stays in its group. Called from inside a handler, it
   * does not wait for that handler.
   */
  async stop(): Promise<void> {
    this.#running = false
    // Unconditional: a poll about to start is stopped too (a wakeup left over
    // only makes one later poll return empty).
    this.#native?.wakeup()
    if (this.#inHandler.getStore()?.active === true) return
    await this.#loop
  }

  /**
   * Messages one at a time, in order per partition, until the consumer is
   * disconnected or the loop ends (what was fetched and not handed out is
   * delivered again).
   */
  async *[Symbol.asyncIterator](): AsyncGenerator<KafkaMessage & TopicPartition> {
    this.#refuseBusy()
    this.#iterating = true
    let pending: (KafkaMessage & TopicPartition)[] = []
    let seeks = new Map<string, number>()
    let current: (KafkaMessage & TopicPartition) | undefined
    // Drops what was fetched for partitions the application sought or paused since.
    const unwanted = (message: TopicPartition) => {
      const key = partitionKey(message.topic, message.partition)
      return this.#soughtSince(key, seeks) || this.#paused.has(key)
    }
    try {
      while (!this.#closed) {
        if (pending.length === 0) {
          ;({ messages: pending, seeks } = await this.#fetch(100))
          continue
        }
        current = pending.shift()!
        if (unwanted(current)) {
          const dropped = current
          const key = partitionKey(dropped.topic, dropped.partition)
          // A pause gives the records back; a seek already moved the partition.
          if (!this.#soughtSince(key, seeks)) this.#giveBack(dropped.topic, dropped.partition, dropped.offset)
          pending = pending.filter((message) => partitionKey(message.topic, message.partition) !== key)
          current = undefined
          continue
        }
        yield current
        this.#handled(current.topic, current.partition, current.offset)
        current = undefined
      }
    } finally {
      this.#iterating = false
      // Left with a message in hand (a `break`, a `return` or a throw: they
      // cannot be told apart): it is not counted, and comes again.
      if (current !== undefined) pending.unshift(current)
      const firsts = new Map<string, KafkaMessage & TopicPartition>()
      for (const message of pending) {
        const key = partitionKey(message.topic, message.partition)
        // A partition the application sought has moved already.
        if (!firsts.has(key) && !this.#soughtSince(key, seeks)) firsts.set(key, message)
      }
      for (const message of firsts.values()) this.#giveBack(message.topic, message.partition, message.offset)
    }
  }

  /** Commits what was handled on every owned partition, or exactly `offsets` (the next offsets to read). */
  async commitOffsets(offsets?: TopicPartitionOffset[]): Promise<void> {
    const entries = offsets?.map((entry) => ({ ...entry, offset: offset_(entry.offset) }))
    await call(() => this.#consumer().commit(entries ?? null))
  }

  /** The group's committed offset of a partition (`null`: none). */
  async committed(topicPartition: TopicPartition): Promise<bigint | null> {
    return call(() => this.#consumer().committed(topicPartition.topic, topicPartition.partition))
  }

  /** Moves a partition's position: an offset, or `'earliest'` / `'latest'`. */
  seek(target: TopicPartition & { offset: OffsetLike | 'earliest' | 'latest' }): void {
    const where = target.offset === 'earliest' || target.offset === 'latest' ? target.offset : offset_(target.offset)
    sync(() => this.#consumer().seek(target.topic, target.partition, where))
    const key = partitionKey(target.topic, target.partition)
    this.#seeks.set(key, (this.#seeks.get(key) ?? 0) + 1)
    this.#seekTargets.set(key, { topic: target.topic, partition: target.partition, where })
  }

  /** The partitions this consumer owns now. */
  assignment(): TopicPartition[] {
    return this.#native === undefined ? [] : this.#native.assignment()
  }

  /** The next offset to read from a partition (`null`: not owned). */
  position(topicPartition: TopicPartition): bigint | null {
    return this.#native === undefined ? null : this.#native.position(topicPartition.topic, topicPartition.partition)
  }

  #each(topics: { topic: string; partitions?: number[] }[], act: (topic: string, partition: number) => void): void {
    const owned = this.assignment()
    for (const { topic, partitions } of topics) {
      const chosen = partitions ?? owned.filter((tp) => tp.topic === topic).map((tp) => tp.partition)
      for (const partition of chosen) act(topic, partition)
    }
  }

  /** Stops delivering these partitions (all of a topic's owned ones without `partitions`). */
  pause(topics: { topic: string; partitions?: number[] }[]): void {
    this.#each(topics, (topic, partition) => {
      this.#paused.add(partitionKey(topic, partition))
      sync(() => this.#consumer().pause(topic, partition))
    })
    this.#applyPauses()
  }

  /** Delivers paused partitions again. */
  resume(topics: { topic: string; partitions?: number[] }[]): void {
    for (const { topic, partitions } of topics) {
      // Without `partitions`: every paused partition of the topic, owned now or not.
      if (partitions === undefined) {
        for (const key of [...this.#paused]) if (key.startsWith(`${topic}\u0000`)) this.#paused.delete(key)
      }
    }
    this.#each(topics, (topic, partition) => {
      this.#paused.delete(partitionKey(topic, partition))
      sync(() => this.#consumer().resume(topic, partition))
    })
  }

  /** Stops, leaves the group (committing what was handled, with `autoCommit`) and closes. */
  async disconnect(): Promise<void> {
    this.#closed = true
    this.#native?.wakeup() // an iterator's waiting poll
    await this.stop()
    // A join in flight finishes first, so the close leaves the group it joined.
    await this.#joined?.catch(() => {})
    if (this.#native !== undefined) await call(() => this.#native!.close())
  }
}

/** A topic to create. */
export interface ITopicConfig {
  topic: string
  numPartitions?: number
  /** -1 (the default): the broker's default. */
  replicationFactor?: number
  configEntries?: { name: string; value: string }[]
}

/** Where to start a transform, or replay it from. */
export type TransformStart = 'earliest' | 'latest' | OffsetLike

function transformStart(start: TransformStart | undefined): bigint {
  if (start === undefined || start === 'earliest') return -2n
  if (start === 'latest') return -1n
  return offset_(start)
}

/** Topics, configs, groups, plugins and transforms. */
export class Admin {
  readonly #native: InstanceType<Native['NativeAdmin']>

  /** @internal */
  constructor(brokers: string[], settings: Record<string, string>) {
    this.#native = sync(() => new native.NativeAdmin(brokers, settings))
  }

  /** Resolves at once: connections are made as calls need them. */
  async connect(): Promise<void> {}

  /** Resolves at once: the admin client's connections close when it is collected. */
  async disconnect(): Promise<void> {}

  /** Creates topics; resolves `false` if any already existed (kafkajs does the same). */
  async createTopics(options: { topics: ITopicConfig[] }): Promise<boolean> {
    let created = true
    for (const topic of options.topics) {
      const configs = Object.fromEntries((topic.configEntries ?? []).map(({ name, value }) => [name, value]))
      try {
        await call(() =>
          this.#native.createTopic(topic.topic, topic.numPartitions ?? 1, topic.replicationFactor ?? -1, configs),
        )
      } catch (error) {
        if (error instanceof WeirError && error.code === 9) created = false
        else throw error
      }
    }
    return created
  }

  /** Every topic's name (internal ones too). */
  async listTopics(): Promise<string[]> {
    return call(() => this.#native.listTopics())
  }

  /** Deletes topics and their data. */
  async deleteTopics(options: { topics: string[] }): Promise<void> {
    for (const topic of options.topics) await call(() => this.#native.deleteTopic(topic))
  }

  /** Partitions (leader, replicas, in-sync replicas) and configs of a topic. */
  async describeTopic(topic: string) {
    return call(() => this.#native.describeTopic(topic))
  }

  /** kafkajs's shape: `{ topics: [{ name, partitions: [{ partitionId, leader, replicas, isr }] }] }`. */
  async fetchTopicMetadata(options: { topics: string[] }) {
    const topics = []
    for (const name of options.topics) {
      const description = await this.describeTopic(name)
      topics.push({
        name,
        partitions: description.partitions.map((p) => ({
          partitionId: p.partition,
          leader: p.leader,
          replicas: p.replicas,
          isr: p.isr,
        })),
      })
    }
    return { topics }
  }

  /** Each partition's log start (`low`) and high watermark (`high`). */
  async fetchTopicOffsets(topic: string): Promise<{ partition: number; low: bigint; high: bigint }[]> {
    const description = await this.describeTopic(topic)
    const offsets = []
    for (const { partition } of description.partitions) {
      const [low, high] = await call(() => this.#native.watermarks(topic, partition))
      offsets.push({ partition, low, high })
    }
    return offsets
  }

  /** A topic's configs (set ones and defaults). */
  async describeTopicConfigs(topic: string): Promise<Record<string, string>> {
    return (await this.describeTopic(topic)).configs
  }

  /** Sets topic configs (an empty value removes one). */
  async alterTopicConfigs(topic: string, configs: Record<string, string>): Promise<void> {
    await call(() => this.#native.alterTopicConfig(topic, configs))
  }

  /** Every consumer group: id, state and member count. */
  async listGroups() {
    const groups = await call(() => this.#native.listGroups())
    return { groups: groups.map((group) => ({ ...group, protocolType: 'consumer' })) }
  }

  /** Groups in full: members, what they own, committed offsets. */
  async describeGroups(groupIds: string[]) {
    const groups = []
    for (const groupId of groupIds) groups.push(await call(() => this.#native.describeGroup(groupId)))
    return { groups }
  }

  /** Per partition: committed offset, log end, lag and owner. */
  async groupLag(groupId: string) {
    return call(() => this.#native.groupLag(groupId))
  }

  /** Sets a group's committed offsets (the group must have no members). */
  async setOffsets(options: { groupId: string; topic: string; partitions: { partition: number; offset: OffsetLike }[] }) {
    const offsets = options.partitions.map(({ partition, offset: at }) => ({
      topic: options.topic,
      partition,
      offset: offset_(at),
    }))
    await call(() => this.#native.resetOffsets(options.groupId, offsets))
  }

  /** Moves a group's offsets of `topic` to each partition's start (`earliest`) or end. */
  async resetOffsets(options: { groupId: string; topic: string; earliest?: boolean }): Promise<void> {
    const watermarks = await this.fetchTopicOffsets(options.topic)
    const partitions = watermarks.map(({ partition, low, high }) => ({
      partition,
      offset: options.earliest ? low : high,
    }))
    await this.setOffsets({ groupId: options.groupId, topic: options.topic, partitions })
  }

  /** Deletes groups and their committed offsets (each must have no members). */
  async deleteGroups(groupIds: string[]): Promise<void> {
    for (const groupId of groupIds) await call(() => this.#native.deleteGroup(groupId))
  }

  /**
   * Uploads a WebAssembly component as plugin `name` for `hook`. The broker
   * compiles it in the background: the answer's `state` may be `compiling`
   * (`listPlugins` shows when it is `ready` or `failed`); attaching or
   * deploying the plugin waits for the compile.
   */
  async uploadPlugin(options: {
    name: string
    hook: 'partitioner' | 'produce-interceptor' | 'consume-interceptor' | 'transform'
    wasm: Buffer
  }) {
    return call(() => this.#native.uploadPlugin(options.name, options.hook, options.wasm))
  }

  /** Every stored plugin, with its counters. */
  async listPlugins() {
    return call(() => this.#native.listPlugins())
  }

  /** Deletes a plugin no topic or transform uses. */
  async deletePlugin(name: string): Promise<void> {
    await call(() => this.#native.deletePlugin(name))
  }

  /** A plugin's recent log lines. */
  async pluginLogs(name: string) {
    return call(() => this.#native.pluginLogs(name))
  }

  /** Attaches an interceptor to a topic. */
  async attachPlugin(options: {
    topic: string
    hook: 'produce-interceptor' | 'consume-interceptor'
    plugin: string
    config?: Record<string, string>
    failurePolicy?: 'fail-closed' | 'fail-open'
  }): Promise<void> {
    const { topic, hook, plugin, config, failurePolicy } = options
    await call(() => this.#native.attachPlugin(topic, hook, plugin, config ?? {}, failurePolicy ?? null))
  }

  /** Detaches a plugin from a topic. */
  async detachPlugin(options: { topic: string; hook: string; plugin: string }): Promise<void> {
    await call(() => this.#native.detachPlugin(options.topic, options.hook, options.plugin))
  }

  /** Makes a partitioner plugin place the topic's records (in every client). */
  async setPartitioner(options: { topic: string; plugin: string; config?: Record<string, string> }): Promise<void> {
    await call(() => this.#native.attachPlugin(options.topic, 'partitioner', options.plugin, options.config ?? {}, null))
  }

  /** Deploys a transform plugin over `input`, writing to `outputs`. */
  async deployTransform(options: {
    name: string
    plugin: string
    input: string
    outputs: string[]
    from?: TransformStart
    config?: Record<string, string>
    /** Where records the plugin fails on for good go (otherwise they hold their partition). */
    deadLetterTopic?: string
  }): Promise<void> {
    const { name, plugin, input, outputs, from, config, deadLetterTopic } = options
    await call(() =>
      this.#native.deployTransform(name, plugin, input, outputs, transformStart(from), config ?? {}, deadLetterTopic ?? null),
    )
  }

  /** Every deployed transform, with its progress per input partition. */
  async listTransforms() {
    return call(() => this.#native.listTransforms())
  }

  /** Holds a transform's input back. */
  async pauseTransform(name: string): Promise<void> {
    await call(() => this.#native.controlTransform(name, 'pause', null))
  }

  /** Lets a paused transform catch up. */
  async resumeTransform(name: string): Promise<void> {
    await call(() => this.#native.controlTransform(name, 'resume', null))
  }

  /** Processes the input again from `from` (a new run: outputs are emitted again). */
  async replayTransform(name: string, from: TransformStart): Promise<void> {
    await call(() => this.#native.controlTransform(name, 'replay', transformStart(from)))
  }

  /** Stops and deletes a transform (its outputs stay). */
  async deleteTransform(name: string): Promise<void> {
    await call(() => this.#native.controlTransform(name, 'delete', null))
  }
}

/** The entry point: `new Weir({ brokers })`, then its producers, consumers and admin. */
export class Weir {
  readonly #brokers: string[]
  readonly #common: Record<string, string>

  /** Checks `brokers`; clients connect when they first need to. */
  constructor(config: WeirConfig) {
    if (!Array.isArray(config?.brokers) || config.brokers.length === 0) {
      throw new TypeError('brokers must list at least one host:port')
    }
    this.#brokers = [...config.brokers]
    this.#common = commonSettings(config)
  }

  /** A producer; its settings are checked now (`InvalidConfigError`). */
  producer(config: ProducerConfig = {}): Producer {
    const settings: Record<string, string> = { ...this.#common }
    if (config.idempotent !== undefined) settings['enable.idempotence'] = String(config.idempotent)
    if (config.acks !== undefined) settings['acks'] = config.acks === -1 ? 'all' : String(config.acks)
    if (config.lingerMs !== undefined) settings['linger.ms'] = String(config.lingerMs)
    if (config.compression !== undefined) settings['compression.type'] = config.compression
    if (config.batchSize !== undefined) settings['batch.size'] = String(config.batchSize)
    if (config.bufferMemory !== undefined) settings['buffer.memory'] = String(config.bufferMemory)
    if (config.deliveryTimeout !== undefined) settings['delivery.timeout.ms'] = String(config.deliveryTimeout)
    return new Producer(this.#brokers, { ...settings, ...(config.config ?? {}) })
  }

  /** A consumer; it joins its group at the first `run`, `poll` or iteration. */
  consumer(config: ConsumerConfig = {}): Consumer {
    const settings: Record<string, string> = { ...this.#common }
    if (config.groupId !== undefined) settings['group.id'] = config.groupId
    if (config.groupInstanceId !== undefined) settings['group.instance.id'] = config.groupInstanceId
    if (config.sessionTimeout !== undefined) settings['session.timeout.ms'] = String(config.sessionTimeout)
    if (config.autoCommit !== undefined) settings['enable.auto.commit'] = String(config.autoCommit)
    if (config.autoCommitInterval !== undefined) {
      settings['auto.commit.interval.ms'] = String(config.autoCommitInterval)
    }
    if (config.maxPollRecords !== undefined) settings['max.poll.records'] = String(config.maxPollRecords)
    return new Consumer(this.#brokers, { ...settings, ...(config.config ?? {}) }, config.maxWaitTimeInMs ?? 1000)
  }

  /** An admin client. */
  admin(): Admin {
    return new Admin(this.#brokers, this.#common)
  }
}

/** Kafka's murmur2 key partitioning, exactly as every Weir client does it. */
export function partitionForKey(key: Bytes, partitionCount: number): number {
  return sync(() => native.partitionForKey(bytes(key)!, partitionCount))
}
