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
import { EventEmitter } from 'events';
export * from './errors';
import type * as NativeTypes from './native';
export type { CommittedOffset, GroupDescription, GroupListing, GroupMember, PartitionDescription, PartitionLag, PluginDescription, PluginLogLine, TopicDescription, TransformPartition, TransformStatus, } from './native';
/** Bytes in: a `Buffer`, or a string (UTF-8). */
export type Bytes = Buffer | string;
/** An offset in: a `bigint`, or a number or decimal string that is an integer. */
export type OffsetLike = bigint | number | string;
/** Settings every client takes. */
export interface WeirConfig {
    /** `host:port` of one or more brokers (the rest are discovered). */
    brokers: string[];
    clientId?: string;
    /** Longest any request waits for its answer (ms). */
    requestTimeout?: number;
    /** Longest a connection takes to set up (ms). */
    connectionTimeout?: number;
    /**
     * Any other setting every client takes, by its Kafka name
     * (`retry.backoff.ms`, …); producer- or consumer-only settings go in
     * `producer({ config })` or `consumer({ config })`.
     */
    config?: Record<string, string>;
}
/** Producer settings; `config` takes any other by its Kafka name. */
export interface ProducerConfig {
    /** Idempotent sends: retries never duplicate or reorder (needs `acks: 'all'`). */
    idempotent?: boolean;
    /** `0`, `1`, or `-1` / `'all'` (the default). */
    acks?: 0 | 1 | -1 | 'all';
    /** How long a batch waits for more records (ms). */
    lingerMs?: number;
    compression?: 'none' | 'lz4' | 'zstd';
    /** Largest batch per partition (bytes). */
    batchSize?: number;
    /** Bytes of records buffered before sends wait. */
    bufferMemory?: number;
    /** Longest a record may take to be acknowledged, retries included (ms). */
    deliveryTimeout?: number;
    config?: Record<string, string>;
}
/** Consumer settings; `config` takes any other by its Kafka name. */
export interface ConsumerConfig {
    /** The consumer group; needed by `subscribe` (not by `assign`). */
    groupId?: string;
    /** A static member id: a restart within the session timeout keeps its partitions. */
    groupInstanceId?: string;
    sessionTimeout?: number;
    /** Commit positions in the background (default true). */
    autoCommit?: boolean;
    autoCommitInterval?: number;
    /** Most records one poll returns. */
    maxPollRecords?: number;
    /** How long a poll waits for records (ms, default 1000). */
    maxWaitTimeInMs?: number;
    config?: Record<string, string>;
}
/** A record to send. */
export interface Message {
    key?: Bytes | null;
    value: Bytes | null;
    /** A header per key; an array for a key repeated (in order), as kafkajs takes them. */
    headers?: Record<string, Bytes | null | undefined | (Bytes | null)[]>;
    /** A partition, or none for the topic's partitioner (its plugin, else murmur2 of the key). */
    partition?: number;
    /** Milliseconds since the epoch (default: now). */
    timestamp?: number | bigint | string;
}
/** What `send` takes. */
export interface ProducerRecord {
    topic: string;
    messages: Message[];
}
/** Where one sent message landed. */
export interface RecordMetadata {
    topicName: string;
    partition: number;
    errorCode: number;
    /** -1 with `acks: 0`. */
    offset: bigint;
    timestamp: bigint;
}
/** A record read by a consumer. */
export interface KafkaMessage {
    key: Buffer | null;
    value: Buffer | null;
    /** A header per key; an array for a key that repeats (in order). */
    headers: Record<string, Buffer | null | (Buffer | null)[]>;
    offset: bigint;
    /** Milliseconds since the epoch. */
    timestamp: bigint;
}
/** A topic and partition. */
export interface TopicPartition {
    topic: string;
    partition: number;
}
/** An offset to commit or seek to. */
export interface TopicPartitionOffset extends TopicPartition {
    offset: OffsetLike;
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
export declare class Producer {
    #private;
    /** @internal */
    constructor(brokers: string[], settings: Record<string, string>);
    /** Resolves at once: connections are made as sends need them. */
    connect(): Promise<void>;
    /**
     * Sends `messages` to `topic`, queued behind earlier sends in call order;
     * one `RecordMetadata` per message, in order.
     */
    send(record: ProducerRecord): Promise<RecordMetadata[]>;
    /** Sends the messages of several topics in one call. */
    sendBatch(batch: {
        topicMessages: ProducerRecord[];
    }): Promise<RecordMetadata[]>;
    /** Resolves once everything sent before it is acknowledged. */
    flush(): Promise<void>;
    /** Flushes, then refuses further sends. */
    disconnect(): Promise<void>;
}
/** What `subscribe` takes. */
export interface ConsumerSubscribeTopics {
    /** Names, or `RegExp`s matched anywhere in a name (as kafkajs does; flags `i`, `m`, `s` kept). */
    topics?: (string | RegExp)[];
    topic?: string | RegExp;
    /** With no committed offset, start at the earliest record (else at the end). */
    fromBeginning?: boolean;
}
/** One partition's records, for `eachBatch`. */
export interface Batch {
    topic: string;
    partition: number;
    messages: KafkaMessage[];
    isEmpty(): boolean;
    /** The first message's offset (`null` when empty). */
    firstOffset(): bigint | null;
    /** The last message's offset (`null` when empty), as kafkajs's `lastOffset`. */
    lastOffset(): bigint | null;
}
/** What `eachMessage` is called with. */
export interface EachMessagePayload {
    topic: string;
    partition: number;
    message: KafkaMessage;
    /** Pauses this partition: the rest of its batch is delivered after `resume`. */
    pause(): () => void;
}
/** What `eachBatch` is called with. */
export interface EachBatchPayload {
    batch: Batch;
    /** Marks the batch handled up to `offset` (what commits take). */
    resolveOffset(offset: OffsetLike): void;
    /** Resolves at once: the client core heartbeats on its own. */
    heartbeat(): Promise<void>;
    /** Commits what was resolved so far (with `autoCommit`). */
    commitOffsetsIfNecessary(): Promise<void>;
    /** Whether the consumer is still running (stop after `stop()`). */
    isRunning(): boolean;
    /** Whether this partition was taken away meanwhile. */
    isStale(): boolean;
    /** Pauses this partition: what was not resolved is delivered after `resume`. */
    pause(): () => void;
}
/** What `run` takes: one of the handlers. */
export interface ConsumerRunConfig {
    eachMessage?: (payload: EachMessagePayload) => Promise<void>;
    eachBatch?: (payload: EachBatchPayload) => Promise<void>;
    /** Resolve a batch's messages when `eachBatch` returns (default true). */
    eachBatchAutoResolve?: boolean;
    /** Partitions handled at once (messages of one partition stay in order). Default 1. */
    partitionsConsumedConcurrently?: number;
}
/** A rebalance: partitions this member got or gave up. */
export interface RebalanceEvent {
    type: 'assigned' | 'revoked';
    partitions: TopicPartition[];
}
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
export declare class Consumer extends EventEmitter {
    #private;
    readonly events: {
        readonly REBALANCE: "consumer.rebalance";
        readonly CRASH: "consumer.crash";
    };
    /** @internal */
    constructor(brokers: string[], settings: Record<string, string>, maxWait: number);
    /** Resolves at once: connections are made as calls need them. */
    connect(): Promise<void>;
    /**
     * Adds topics (names, or `RegExp`s, now and as topics come and go) to the
     * group subscription, joined on the first `run`, `poll` or iteration.
     */
    subscribe(subscription: ConsumerSubscribeTopics): Promise<void>;
    /** Reads exactly these partitions, outside any group. */
    assign(partitions: TopicPartition[]): Promise<void>;
    /**
     * Records that arrive within `maxWaitTimeInMs` (joining the group first if
     * subscribed), each counted as handled.
     */
    poll(maxRecords?: number): Promise<(KafkaMessage & TopicPartition)[]>;
    /**
     * Runs the handler over everything consumed until `stop()` or
     * `disconnect()`; resolves once running.
     */
    run(config: ConsumerRunConfig): Promise<void>;
    /**
     * Stops `run` after the handlers in progress (a waiting poll returns at
     * once); the consumer stays in its group. Called from inside a handler, it
     * does not wait for that handler.
     */
    stop(): Promise<void>;
    /**
     * Messages one at a time, in order per partition, until the consumer is
     * disconnected or the loop ends (what was fetched and not handed out is
     * delivered again).
     */
    [Symbol.asyncIterator](): AsyncGenerator<KafkaMessage & TopicPartition>;
    /** Commits what was handled on every owned partition, or exactly `offsets` (the next offsets to read). */
    commitOffsets(offsets?: TopicPartitionOffset[]): Promise<void>;
    /** The group's committed offset of a partition (`null`: none). */
    committed(topicPartition: TopicPartition): Promise<bigint | null>;
    /** Moves a partition's position: an offset, or `'earliest'` / `'latest'`. */
    seek(target: TopicPartition & {
        offset: OffsetLike | 'earliest' | 'latest';
    }): void;
    /** The partitions this consumer owns now. */
    assignment(): TopicPartition[];
    /** The next offset to read from a partition (`null`: not owned). */
    position(topicPartition: TopicPartition): bigint | null;
    /** Stops delivering these partitions (all of a topic's owned ones without `partitions`). */
    pause(topics: {
        topic: string;
        partitions?: number[];
    }[]): void;
    /** Delivers paused partitions again. */
    resume(topics: {
        topic: string;
        partitions?: number[];
    }[]): void;
    /** Stops, leaves the group (committing what was handled, with `autoCommit`) and closes. */
    disconnect(): Promise<void>;
}
/** A topic to create. */
export interface ITopicConfig {
    topic: string;
    numPartitions?: number;
    /** -1 (the default): the broker's default. */
    replicationFactor?: number;
    configEntries?: {
        name: string;
        value: string;
    }[];
}
/** Where to start a transform, or replay it from. */
export type TransformStart = 'earliest' | 'latest' | OffsetLike;
/** Topics, configs, groups, plugins and transforms. */
export declare class Admin {
    #private;
    /** @internal */
    constructor(brokers: string[], settings: Record<string, string>);
    /** Resolves at once: connections are made as calls need them. */
    connect(): Promise<void>;
    /** Resolves at once: the admin client's connections close when it is collected. */
    disconnect(): Promise<void>;
    /** Creates topics; resolves `false` if any already existed (kafkajs does the same). */
    createTopics(options: {
        topics: ITopicConfig[];
    }): Promise<boolean>;
    /** Every topic's name (internal ones too). */
    listTopics(): Promise<string[]>;
    /** Deletes topics and their data. */
    deleteTopics(options: {
        topics: string[];
    }): Promise<void>;
    /** Partitions (leader, replicas, in-sync replicas) and configs of a topic. */
    describeTopic(topic: string): Promise<NativeTypes.TopicDescription>;
    /** kafkajs's shape: `{ topics: [{ name, partitions: [{ partitionId, leader, replicas, isr }] }] }`. */
    fetchTopicMetadata(options: {
        topics: string[];
    }): Promise<{
        topics: {
            name: string;
            partitions: {
                partitionId: number;
                leader: number;
                replicas: number[];
                isr: number[];
            }[];
        }[];
    }>;
    /** Each partition's log start (`low`) and high watermark (`high`). */
    fetchTopicOffsets(topic: string): Promise<{
        partition: number;
        low: bigint;
        high: bigint;
    }[]>;
    /** A topic's configs (set ones and defaults). */
    describeTopicConfigs(topic: string): Promise<Record<string, string>>;
    /** Sets topic configs (an empty value removes one). */
    alterTopicConfigs(topic: string, configs: Record<string, string>): Promise<void>;
    /** Every consumer group: id, state and member count. */
    listGroups(): Promise<{
        groups: {
            protocolType: string;
            groupId: string;
            state: string;
            members: number;
        }[];
    }>;
    /** Groups in full: members, what they own, committed offsets. */
    describeGroups(groupIds: string[]): Promise<{
        groups: NativeTypes.GroupDescription[];
    }>;
    /** Per partition: committed offset, log end, lag and owner. */
    groupLag(groupId: string): Promise<NativeTypes.PartitionLag[]>;
    /** Sets a group's committed offsets (the group must have no members). */
    setOffsets(options: {
        groupId: string;
        topic: string;
        partitions: {
            partition: number;
            offset: OffsetLike;
        }[];
    }): Promise<void>;
    /** Moves a group's offsets of `topic` to each partition's start (`earliest`) or end. */
    resetOffsets(options: {
        groupId: string;
        topic: string;
        earliest?: boolean;
    }): Promise<void>;
    /** Deletes groups and their committed offsets (each must have no members). */
    deleteGroups(groupIds: string[]): Promise<void>;
    /**
     * Uploads a WebAssembly component as plugin `name` for `hook`. The broker
     * compiles it in the background: the answer's `state` may be `compiling`
     * (`listPlugins` shows when it is `ready` or `failed`); attaching or
     * deploying the plugin waits for the compile.
     */
    uploadPlugin(options: {
        name: string;
        hook: 'partitioner' | 'produce-interceptor' | 'consume-interceptor' | 'transform';
        wasm: Buffer;
    }): Promise<NativeTypes.PluginDescription>;
    /** Every stored plugin, with its counters. */
    listPlugins(): Promise<NativeTypes.PluginDescription[]>;
    /** Deletes a plugin no topic or transform uses. */
    deletePlugin(name: string): Promise<void>;
    /** A plugin's recent log lines. */
    pluginLogs(name: string): Promise<NativeTypes.PluginLogLine[]>;
    /** Attaches an interceptor to a topic. */
    attachPlugin(options: {
        topic: string;
        hook: 'produce-interceptor' | 'consume-interceptor';
        plugin: string;
        config?: Record<string, string>;
        failurePolicy?: 'fail-closed' | 'fail-open';
    }): Promise<void>;
    /** Detaches a plugin from a topic. */
    detachPlugin(options: {
        topic: string;
        hook: string;
        plugin: string;
    }): Promise<void>;
    /** Makes a partitioner plugin place the topic's records (in every client). */
    setPartitioner(options: {
        topic: string;
        plugin: string;
        config?: Record<string, string>;
    }): Promise<void>;
    /** Deploys a transform plugin over `input`, writing to `outputs`. */
    deployTransform(options: {
        name: string;
        plugin: string;
        input: string;
        outputs: string[];
        from?: TransformStart;
        config?: Record<string, string>;
        /** Where records the plugin fails on for good go (otherwise they hold their partition). */
        deadLetterTopic?: string;
    }): Promise<void>;
    /** Every deployed transform, with its progress per input partition. */
    listTransforms(): Promise<NativeTypes.TransformStatus[]>;
    /** Holds a transform's input back. */
    pauseTransform(name: string): Promise<void>;
    /** Lets a paused transform catch up. */
    resumeTransform(name: string): Promise<void>;
    /** Processes the input again from `from` (a new run: outputs are emitted again). */
    replayTransform(name: string, from: TransformStart): Promise<void>;
    /** Stops and deletes a transform (its outputs stay). */
    deleteTransform(name: string): Promise<void>;
}
/** The entry point: `new Weir({ brokers })`, then its producers, consumers and admin. */
export declare class Weir {
    #private;
    /** Checks `brokers`; clients connect when they first need to. */
    constructor(config: WeirConfig);
    /** A producer; its settings are checked now (`InvalidConfigError`). */
    producer(config?: ProducerConfig): Producer;
    /** A consumer; it joins its group at the first `run`, `poll` or iteration. */
    consumer(config?: ConsumerConfig): Consumer;
    /** An admin client. */
    admin(): Admin;
}
/** Kafka's murmur2 key partitioning, exactly as every Weir client does it. */
export declare function partitionForKey(key: Bytes, partitionCount: number): number;
