"use strict";
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
var __createBinding = (this && this.__createBinding) || (Object.create ? (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    var desc = Object.getOwnPropertyDescriptor(m, k);
    if (!desc || ("get" in desc ? !m.__esModule : desc.writable || desc.configurable)) {
      desc = { enumerable: true, get: function() { return m[k]; } };
    }
    Object.defineProperty(o, k2, desc);
}) : (function(o, m, k, k2) {
    if (k2 === undefined) k2 = k;
    o[k2] = m[k];
}));
var __exportStar = (this && this.__exportStar) || function(m, exports) {
    for (var p in m) if (p !== "default" && !Object.prototype.hasOwnProperty.call(exports, p)) __createBinding(exports, m, p);
};
Object.defineProperty(exports, "__esModule", { value: true });
exports.Weir = exports.Admin = exports.Consumer = exports.Producer = void 0;
exports.partitionForKey = partitionForKey;
const events_1 = require("events");
const errors_1 = require("./errors");
__exportStar(require("./errors"), exports);
// eslint-disable-next-line @typescript-eslint/no-require-imports
const native = require('./native.js');
/** Turns an error from the native layer into its `WeirError` subclass. */
function weirError(error) {
    if (!(error instanceof Error)) {
        return new errors_1.WeirError(String(error), 1, false);
    }
    const match = /^\[weir:(\d+)\] ([\s\S]*)$/.exec(error.message);
    if (match === null) {
        return error;
    }
    const code = Number(match[1]);
    const entry = errors_1.ERROR_CLASSES.get(code);
    if (entry === undefined) {
        return new errors_1.WeirError(match[2], code, false);
    }
    const [Class, retriable] = entry;
    return new Class(match[2], code, retriable);
}
async function call(work) {
    try {
        return await work();
    }
    catch (error) {
        throw weirError(error);
    }
}
function sync(work) {
    try {
        return work();
    }
    catch (error) {
        throw weirError(error);
    }
}
function bytes(value) {
    if (value === null || value === undefined) {
        return undefined;
    }
    return typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
}
function offset(value) {
    if (typeof value === 'number' && !Number.isSafeInteger(value)) {
        throw new RangeError(`offset ${value} is not a safe integer; pass a bigint`);
    }
    return BigInt(value);
}
function commonSettings(config) {
    const settings = {};
    if (config.clientId !== undefined)
        settings['client.id'] = config.clientId;
    if (config.requestTimeout !== undefined)
        settings['request.timeout.ms'] = String(config.requestTimeout);
    if (config.connectionTimeout !== undefined) {
        settings['socket.connection.setup.timeout.ms'] = String(config.connectionTimeout);
    }
    return { ...settings, ...(config.config ?? {}) };
}
function outgoing(topic, message) {
    const headers = Object.entries(message.headers ?? {}).map(([key, value]) => ({ key, value: bytes(value) }));
    const timestamp = message.timestamp === undefined ? undefined : Number(message.timestamp);
    return {
        topic,
        key: bytes(message.key),
        value: bytes(message.value),
        headers,
        partition: message.partition,
        timestamp,
    };
}
/** Sends records; `send` resolves once they are acknowledged. */
class Producer {
    #native;
    /** @internal */
    constructor(brokers, settings) {
        this.#native = sync(() => new native.NativeProducer(brokers, settings));
    }
    /** Resolves at once: connections are made as sends need them. */
    async connect() { }
    /**
     * Sends `messages` to `topic`, queued behind earlier sends in call order;
     * one `RecordMetadata` per message, in order.
     */
    async send(record) {
        return this.sendBatch({ topicMessages: [record] });
    }
    /** Sends the messages of several topics in one call. */
    async sendBatch(batch) {
        const records = batch.topicMessages.flatMap(({ topic, messages }) => messages.map((m) => outgoing(topic, m)));
        const delivered = await call(() => this.#native.send(records));
        return delivered.map((landed) => ({
            topicName: landed.topic,
            partition: landed.partition,
            errorCode: 0,
            offset: landed.offset,
            timestamp: landed.timestamp,
        }));
    }
    /** Resolves once everything sent before it is acknowledged. */
    async flush() {
        await call(() => this.#native.flush());
    }
    /** Flushes, then refuses further sends. */
    async disconnect() {
        await call(() => this.#native.close());
    }
}
exports.Producer = Producer;
function escapeRegExp(text) {
    return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
function kafkaMessage(message) {
    const headers = {};
    for (const header of message.headers)
        headers[header.key] = header.value ?? null;
    return {
        key: message.key ?? null,
        value: message.value ?? null,
        headers,
        offset: message.offset,
        timestamp: message.timestamp,
    };
}
/**
 * Reads records, in a group (`subscribe`) or from chosen partitions
 * (`assign`): with `run({ eachMessage })`, `for await (const m of consumer)`,
 * or `poll()`. Events: `consumer.rebalance` (a `RebalanceEvent`) and
 * `consumer.crash` (a handler's error; the message is delivered again).
 */
class Consumer extends events_1.EventEmitter {
    events = { REBALANCE: 'consumer.rebalance', CRASH: 'consumer.crash' };
    #brokers;
    #settings;
    #maxWait;
    #native;
    #topics = [];
    #patterns = [];
    #fromBeginning;
    #joined = false;
    #running = false;
    #loop;
    /** @internal */
    constructor(brokers, settings, maxWait) {
        super();
        this.#brokers = brokers;
        this.#settings = settings;
        this.#maxWait = maxWait;
    }
    #consumer() {
        if (this.#native === undefined) {
            const settings = { ...this.#settings };
            if (this.#fromBeginning !== undefined && settings['auto.offset.reset'] === undefined) {
                settings['auto.offset.reset'] = this.#fromBeginning ? 'earliest' : 'latest';
            }
            this.#native = sync(() => new native.NativeConsumer(this.#brokers, settings));
        }
        return this.#native;
    }
    /** Resolves at once: connections are made as calls need them. */
    async connect() { }
    /**
     * Adds topics (names, or `RegExp`s matching whole names, now and as topics
     * come and go) to the group subscription, joined on the first `run`, `poll`
     * or iteration.
     */
    async subscribe(subscription) {
        if (this.#joined) {
            throw new errors_1.WeirError('subscribe before the consumer runs', 8, false);
        }
        const topics = [...(subscription.topics ?? []), ...(subscription.topic === undefined ? [] : [subscription.topic])];
        for (const topic of topics) {
            if (typeof topic === 'string')
                this.#topics.push(topic);
            else
                this.#patterns.push(topic.source);
        }
        if (subscription.fromBeginning !== undefined)
            this.#fromBeginning ??= subscription.fromBeginning;
    }
    /** Reads exactly these partitions, outside any group. */
    async assign(partitions) {
        this.#joined = true;
        await call(() => this.#consumer().assign(partitions));
    }
    async #join() {
        if (this.#joined)
            return;
        this.#joined = true;
        const consumer = this.#consumer();
        if (this.#patterns.length === 0) {
            await call(() => consumer.subscribe(this.#topics, null));
        }
        else {
            const pattern = [...this.#topics.map(escapeRegExp), ...this.#patterns].join('|');
            await call(() => consumer.subscribe([], `(?:${pattern})`));
        }
    }
    #emitRebalances() {
        for (const event of this.#consumer().rebalanceEvents()) {
            const rebalance = { type: event.kind, partitions: event.partitions };
            this.emit(this.events.REBALANCE, rebalance);
        }
    }
    /** Records that arrive within `maxWaitTimeInMs` (joining the group first if subscribed). */
    async poll(maxRecords = 500) {
        await this.#join();
        const consumer = this.#consumer();
        const messages = await call(() => consumer.poll(this.#maxWait, maxRecords));
        this.#emitRebalances();
        return messages.map((message) => ({ ...kafkaMessage(message), topic: message.topic, partition: message.partition }));
    }
    /**
     * Runs the handler over everything consumed until `stop()` or
     * `disconnect()`; resolves once running. A handler that throws is reported
     * as `consumer.crash` and its message is delivered again after a second.
     */
    async run(config) {
        if (this.#running)
            throw new errors_1.WeirError('the consumer is already running', 8, false);
        if ((config.eachMessage === undefined) === (config.eachBatch === undefined)) {
            throw new TypeError('run takes exactly one of eachMessage and eachBatch');
        }
        await this.#join();
        this.#running = true;
        this.#loop = this.#runLoop(config);
    }
    async #runLoop(config) {
        const concurrency = Math.max(1, config.partitionsConsumedConcurrently ?? 1);
        while (this.#running) {
            let messages;
            try {
                messages = await this.poll();
            }
            catch (error) {
                if (!this.#running)
                    return;
                this.emit(this.events.CRASH, error);
                await new Promise((resolve) => setTimeout(resolve, 1000));
                continue;
            }
            const batches = new Map();
            for (const message of messages) {
                const key = `${message.topic}\u0000${message.partition}`;
                let batch = batches.get(key);
                if (batch === undefined) {
                    const owner = [];
                    batch = {
                        topic: message.topic,
                        partition: message.partition,
                        messages: owner,
                        lastOffset: () => (owner.length === 0 ? -1n : owner[owner.length - 1].offset + 1n),
                    };
                    batches.set(key, batch);
                }
                const { topic: _topic, partition: _partition, ...kafka } = message;
                batch.messages.push(kafka);
            }
            const queue = [...batches.values()];
            const workers = Array.from({ length: Math.min(concurrency, queue.length) }, async () => {
                for (let batch = queue.shift(); batch !== undefined; batch = queue.shift()) {
                    await this.#handle(batch, config);
                }
            });
            await Promise.all(workers);
        }
    }
    async #handle(batch, config) {
        if (config.eachBatch !== undefined) {
            try {
                await config.eachBatch({ batch, isRunning: () => this.#running });
            }
            catch (error) {
                this.#redeliver(batch.topic, batch.partition, batch.messages[0]?.offset, error);
            }
            return;
        }
        for (const message of batch.messages) {
            if (!this.#running)
                return;
            try {
                await config.eachMessage({ topic: batch.topic, partition: batch.partition, message });
            }
            catch (error) {
                this.#redeliver(batch.topic, batch.partition, message.offset, error);
                return;
            }
        }
    }
    #redeliver(topic, partition, from, error) {
        this.emit(this.events.CRASH, error);
        if (from !== undefined) {
            this.seek({ topic, partition, offset: from });
        }
    }
    /** Stops `run` after the handlers in progress; the consumer stays in its group. */
    async stop() {
        this.#running = false;
        await this.#loop;
    }
    /** Messages one at a time, in order per partition, until the consumer is disconnected. */
    async *[Symbol.asyncIterator]() {
        await this.#join();
        while (!this.#closed) {
            for (const message of await this.poll()) {
                yield message;
            }
        }
    }
    #closed = false;
    /** Commits every owned partition's position, or exactly `offsets` (the next offsets to read). */
    async commitOffsets(offsets) {
        const entries = offsets?.map((entry) => ({ ...entry, offset: offset(entry.offset) }));
        await call(() => this.#consumer().commit(entries ?? null));
    }
    /** The group's committed offset of a partition (`null`: none). */
    async committed(topicPartition) {
        return call(() => this.#consumer().committed(topicPartition.topic, topicPartition.partition));
    }
    /** Moves a partition's position: an offset, or `'earliest'` / `'latest'`. */
    seek(target) {
        const where = target.offset === 'earliest' || target.offset === 'latest' ? target.offset : offset(target.offset);
        sync(() => this.#consumer().seek(target.topic, target.partition, where));
    }
    /** The partitions this consumer owns now. */
    assignment() {
        return this.#native === undefined ? [] : this.#native.assignment();
    }
    /** The next offset to read from a partition (`null`: not owned). */
    position(topicPartition) {
        return this.#native === undefined ? null : this.#native.position(topicPartition.topic, topicPartition.partition);
    }
    #each(topics, act) {
        const owned = this.assignment();
        for (const { topic, partitions } of topics) {
            const chosen = partitions ?? owned.filter((tp) => tp.topic === topic).map((tp) => tp.partition);
            for (const partition of chosen)
                act(topic, partition);
        }
    }
    /** Stops fetching these partitions (all of a topic's owned ones without `partitions`). */
    pause(topics) {
        this.#each(topics, (topic, partition) => this.#consumer().pause(topic, partition));
    }
    /** Fetches paused partitions again. */
    resume(topics) {
        this.#each(topics, (topic, partition) => this.#consumer().resume(topic, partition));
    }
    /** Stops, leaves the group (committing first with auto-commit) and closes. */
    async disconnect() {
        this.#closed = true;
        await this.stop();
        if (this.#native !== undefined)
            await call(() => this.#native.close());
    }
}
exports.Consumer = Consumer;
function transformStart(start) {
    if (start === undefined || start === 'earliest')
        return -2;
    if (start === 'latest')
        return -1;
    return Number(offset(start));
}
/** Topics, configs, groups, plugins and transforms. */
class Admin {
    #native;
    /** @internal */
    constructor(brokers) {
        this.#native = sync(() => new native.NativeAdmin(brokers));
    }
    async connect() { }
    async disconnect() { }
    /** Creates topics; resolves `false` if any already existed (kafkajs does the same). */
    async createTopics(options) {
        let created = true;
        for (const topic of options.topics) {
            const configs = Object.fromEntries((topic.configEntries ?? []).map(({ name, value }) => [name, value]));
            try {
                await call(() => this.#native.createTopic(topic.topic, topic.numPartitions ?? 1, topic.replicationFactor ?? -1, configs));
            }
            catch (error) {
                if (error instanceof errors_1.WeirError && error.code === 9)
                    created = false;
                else
                    throw error;
            }
        }
        return created;
    }
    async listTopics() {
        return call(() => this.#native.listTopics());
    }
    async deleteTopics(options) {
        for (const topic of options.topics)
            await call(() => this.#native.deleteTopic(topic));
    }
    /** Partitions (leader, replicas, in-sync replicas) and configs of a topic. */
    async describeTopic(topic) {
        return call(() => this.#native.describeTopic(topic));
    }
    /** kafkajs's shape: `{ topics: [{ name, partitions: [{ partitionId, leader, replicas, isr }] }] }`. */
    async fetchTopicMetadata(options) {
        const topics = [];
        for (const name of options.topics) {
            const description = await this.describeTopic(name);
            topics.push({
                name,
                partitions: description.partitions.map((p) => ({
                    partitionId: p.partition,
                    leader: p.leader,
                    replicas: p.replicas,
                    isr: p.isr,
                })),
            });
        }
        return { topics };
    }
    /** Each partition's log start (`low`) and high watermark (`high`). */
    async fetchTopicOffsets(topic) {
        const description = await this.describeTopic(topic);
        const offsets = [];
        for (const { partition } of description.partitions) {
            const [low, high] = await call(() => this.#native.watermarks(topic, partition));
            offsets.push({ partition, low, high });
        }
        return offsets;
    }
    /** A topic's configs (set ones and defaults). */
    async describeTopicConfigs(topic) {
        return (await this.describeTopic(topic)).configs;
    }
    /** Sets topic configs (an empty value removes one). */
    async alterTopicConfigs(topic, configs) {
        await call(() => this.#native.alterTopicConfig(topic, configs));
    }
    async listGroups() {
        const groups = await call(() => this.#native.listGroups());
        return { groups: groups.map((group) => ({ ...group, protocolType: 'consumer' })) };
    }
    async describeGroups(groupIds) {
        const groups = [];
        for (const groupId of groupIds)
            groups.push(await call(() => this.#native.describeGroup(groupId)));
        return { groups };
    }
    /** Per partition: committed offset, log end, lag and owner. */
    async groupLag(groupId) {
        return call(() => this.#native.groupLag(groupId));
    }
    /** Sets a group's committed offsets (the group must have no members). */
    async setOffsets(options) {
        const offsets = options.partitions.map(({ partition, offset: at }) => ({
            topic: options.topic,
            partition,
            offset: offset(at),
        }));
        await call(() => this.#native.resetOffsets(options.groupId, offsets));
    }
    /** Moves a group's offsets of `topic` to each partition's start (`earliest`) or end. */
    async resetOffsets(options) {
        const watermarks = await this.fetchTopicOffsets(options.topic);
        const partitions = watermarks.map(({ partition, low, high }) => ({
            partition,
            offset: options.earliest ? low : high,
        }));
        await this.setOffsets({ groupId: options.groupId, topic: options.topic, partitions });
    }
    async deleteGroups(groupIds) {
        for (const groupId of groupIds)
            await call(() => this.#native.deleteGroup(groupId));
    }
    /** Uploads a WebAssembly component as plugin `name` for `hook`. */
    async uploadPlugin(options) {
        return call(() => this.#native.uploadPlugin(options.name, options.hook, options.wasm));
    }
    async listPlugins() {
        return call(() => this.#native.listPlugins());
    }
    async deletePlugin(name) {
        await call(() => this.#native.deletePlugin(name));
    }
    async pluginLogs(name) {
        return call(() => this.#native.pluginLogs(name));
    }
    /** Attaches an interceptor to a topic. */
    async attachPlugin(options) {
        const { topic, hook, plugin, config, failurePolicy } = options;
        await call(() => this.#native.attachPlugin(topic, hook, plugin, config ?? {}, failurePolicy ?? null));
    }
    async detachPlugin(options) {
        await call(() => this.#native.detachPlugin(options.topic, options.hook, options.plugin));
    }
    /** Makes a partitioner plugin place the topic's records (in every client). */
    async setPartitioner(options) {
        await call(() => this.#native.attachPlugin(options.topic, 'partitioner', options.plugin, options.config ?? {}, null));
    }
    /** Deploys a transform plugin over `input`, writing to `outputs`. */
    async deployTransform(options) {
        const { name, plugin, input, outputs, from, config } = options;
        await call(() => this.#native.deployTransform(name, plugin, input, outputs, transformStart(from), config ?? {}));
    }
    async listTransforms() {
        return call(() => this.#native.listTransforms());
    }
    async pauseTransform(name) {
        await call(() => this.#native.controlTransform(name, 'pause', null));
    }
    async resumeTransform(name) {
        await call(() => this.#native.controlTransform(name, 'resume', null));
    }
    /** Processes the input again from `from` (a new run: outputs are emitted again). */
    async replayTransform(name, from) {
        await call(() => this.#native.controlTransform(name, 'replay', transformStart(from)));
    }
    async deleteTransform(name) {
        await call(() => this.#native.controlTransform(name, 'delete', null));
    }
}
exports.Admin = Admin;
/** The entry point: `new Weir({ brokers })`, then its producers, consumers and admin. */
class Weir {
    #brokers;
    #common;
    constructor(config) {
        if (!Array.isArray(config?.brokers) || config.brokers.length === 0) {
            throw new TypeError('brokers must list at least one host:port');
        }
        this.#brokers = [...config.brokers];
        this.#common = commonSettings(config);
    }
    producer(config = {}) {
        const settings = { ...this.#common };
        if (config.idempotent !== undefined)
            settings['enable.idempotence'] = String(config.idempotent);
        if (config.acks !== undefined)
            settings['acks'] = config.acks === -1 ? 'all' : String(config.acks);
        if (config.lingerMs !== undefined)
            settings['linger.ms'] = String(config.lingerMs);
        if (config.compression !== undefined)
            settings['compression.type'] = config.compression;
        if (config.batchSize !== undefined)
            settings['batch.size'] = String(config.batchSize);
        if (config.bufferMemory !== undefined)
            settings['buffer.memory'] = String(config.bufferMemory);
        if (config.deliveryTimeout !== undefined)
            settings['delivery.timeout.ms'] = String(config.deliveryTimeout);
        return new Producer(this.#brokers, { ...settings, ...(config.config ?? {}) });
    }
    consumer(config = {}) {
        const settings = { ...this.#common };
        if (config.groupId !== undefined)
            settings['group.id'] = config.groupId;
        if (config.groupInstanceId !== undefined)
            settings['group.instance.id'] = config.groupInstanceId;
        if (config.sessionTimeout !== undefined)
            settings['session.timeout.ms'] = String(config.sessionTimeout);
        if (config.autoCommit !== undefined)
            settings['enable.auto.commit'] = String(config.autoCommit);
        if (config.autoCommitInterval !== undefined) {
            settings['auto.commit.interval.ms'] = String(config.autoCommitInterval);
        }
        if (config.maxPollRecords !== undefined)
            settings['max.poll.records'] = String(config.maxPollRecords);
        return new Consumer(this.#brokers, { ...settings, ...(config.config ?? {}) }, config.maxWaitTimeInMs ?? 1000);
    }
    admin() {
        return new Admin(this.#brokers);
    }
}
exports.Weir = Weir;
/** Kafka's murmur2 key partitioning, exactly as every Weir client does it. */
function partitionForKey(key, partitionCount) {
    return sync(() => native.partitionForKey(bytes(key), partitionCount));
}
