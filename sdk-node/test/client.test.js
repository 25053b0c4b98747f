'use strict'
// The Node SDK against a real broker: round trips, keyed partitions, typed
// errors, groups, seeks and pauses, commits that take only handled messages,
// and transforms with a dead-letter topic.
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { after, before, test } = require('node:test')
const { inspect } = require('node:util')

const weirModule = require('..')
const {
  InvalidConfigError,
  MessageTooLargeError,
  UnknownTopicOrPartitionError,
  WeirError,
  partitionForKey,
} = weirModule
const { startBroker, waitFor } = require('./support')

const PLUGINS =
  process.env.WEIR_PLUGIN_DIR ?? path.join(__dirname, '..', '..', 'target', 'plugins', 'wasm32-wasip2', 'release')

let broker
before(async () => {
  broker = await startBroker()
})
after(async () => {
  await broker.stop()
})

/** Reads `count` messages of `topic` from the beginning, outside any group. */
async function readAll(topic, partitions, count) {
  const consumer = broker.weir.consumer()
  await consumer.assign(Array.from({ length: partitions }, (_, partition) => ({ topic, partition })))
  for (let partition = 0; partition < partitions; partition++) consumer.seek({ topic, partition, offset: 'earliest' })
  const messages = []
  await waitFor(`${count} messages of ${topic}`, async () => {
    messages.push(...(await consumer.poll()))
    return messages.length >= count ? true : undefined
  })
  await consumer.disconnect()
  return messages
}

test('a burst of sends past buffer.memory waits its turn: all land in call order, flush and disconnect wait for them', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'burst', numPartitions: 1 }] })
  // 256 KiB of buffer: 64 sends of 64 records of 1 KiB (4 MiB) cannot all be packed at once.
  const producer = broker.weir.producer({ acks: 1, bufferMemory: 256 * 1024 })
  const value = Buffer.alloc(1024, 7)
  const sends = []
  for (let send = 0; send < 64; send++) {
    const messages = Array.from({ length: 64 }, (_, each) => ({ key: `${send}:${each}`, value }))
    sends.push(producer.send({ topic: 'burst', messages }))
  }
  // flush resolves only once every send above is with the core and acknowledged.
  let flushed = false
  const flush = producer.flush().then(() => {
    flushed = true
  })
  const disconnect = producer.disconnect()
  await assert.rejects(producer.send({ topic: 'burst', messages: [{ value }] }), (error) => error.code === 8)
  const landed = (await Promise.all(sends)).flat()
  await flush
  await disconnect
  assert.ok(flushed)
  assert.equal(landed.length, 64 * 64)
  assert.deepEqual(
    landed.map((metadata) => metadata.offset),
    Array.from({ length: 64 * 64 }, (_, offset) => BigInt(offset)),
    'offsets follow call order',
  )
  const messages = await readAll('burst', 1, 64 * 64)
  assert.equal(messages.length, 64 * 64)
  assert.deepEqual(
    messages.map((message) => message.key.toString()),
    Array.from({ length: 64 * 64 }, (_, at) => `${Math.floor(at / 64)}:${at % 64}`),
  )
  assert.ok(messages.every((message) => message.value.equals(value)))
})

test('a round trip keeps keys, values, headers, null keys and offsets as bigint', async () => {
  const admin = broker.weir.admin()
  assert.equal(await admin.createTopics({ topics: [{ topic: 'trip', numPartitions: 1 }] }), true)
  assert.equal(await admin.createTopics({ topics: [{ topic: 'trip' }] }), false, 'already there')
  const producer = broker.weir.producer({ idempotent: true, lingerMs: 5 })
  await producer.connect()
  const sent = await producer.send({
    topic: 'trip',
    messages: [
      { key: 'k1', value: 'hello', headers: { source: 'test', empty: null } },
      { key: null, value: Buffer.from([0, 1, 2, 255]) },
      { key: Buffer.from('k3'), value: null },
    ],
  })
  assert.deepEqual(
    sent.map((landed) => [landed.topicName, landed.partition, landed.offset]),
    [
      ['trip', 0, 0n],
      ['trip', 0, 1n],
      ['trip', 0, 2n],
    ],
  )
  assert.equal(typeof sent[0].timestamp, 'bigint')
  // Offsets and timestamps are read on access; printing and JSON see every field.
  assert.match(inspect(sent[1]), /offset: 1n,\s+timestamp: \d+n/)
  assert.deepEqual(Object.keys(sent[1].toJSON()), ['topicName', 'partition', 'errorCode', 'offset', 'timestamp'])
  assert.throws(() => JSON.stringify(sent), /BigInt/, 'a bigint is refused, as for a plain object')
  await producer.disconnect()

  const read = await readAll('trip', 1, 3)
  assert.deepEqual(
    read.map((m) => [m.offset, m.key?.toString() ?? null, m.value?.toString('hex') ?? null]),
    [
      [0n, 'k1', Buffer.from('hello').toString('hex')],
      [1n, null, '000102ff'],
      [2n, 'k3', null],
    ],
  )
  assert.deepEqual(read[0].headers, { source: Buffer.from('test'), empty: null })
})

test('consumed messages are views into the fetched bytes that outlive their consumer and later polls', async () => {
  // Values are not copied out of the client core's fetch buffers: each message
  // keeps its buffer alive. Read 3,000 records in many polls (small fetches,
  // so several buffers per poll and several polls per buffer), plain and lz4,
  // drop the consumer, collect, and check every message still holds its bytes.
  const admin = broker.weir.admin()
  for (const [topic, compression] of [
    ['views-plain', undefined],
    ['views-lz4', 'lz4'],
  ]) {
    await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] })
    const producer = broker.weir.producer({ compression })
    const value = (index) => Buffer.from(`value-${index}-`.repeat(1 + (index % 7)))
    for (let chunk = 0; chunk < 3; chunk++) {
      const messages = Array.from({ length: 1000 }, (_, each) => {
        const index = chunk * 1000 + each
        return { key: `k${index}`, value: value(index), headers: { index: String(index) } }
      })
      await producer.send({ topic, messages })
    }
    await producer.disconnect()
    const consumer = broker.weir.consumer({ maxPollRecords: 70, config: { 'max.partition.fetch.bytes': '20000' } })
    await consumer.assign([0, 1].map((partition) => ({ topic, partition })))
    for (const partition of [0, 1]) consumer.seek({ topic, partition, offset: 'earliest' })
    const read = []
    await waitFor(`3000 messages of ${topic}`, async () => {
      read.push(...(await consumer.poll()))
      return read.length >= 3000 ? true : undefined
    })
    await consumer.disconnect()
    if (typeof global.gc === 'function') global.gc()
    assert.equal(read.length, 3000)
    read[0].value.fill(0) // a message's bytes are its own: no other message changes
    for (const message of read.slice(1)) {
      const index = Number(message.headers.index.toString())
      assert.equal(message.key.toString(), `k${index}`, topic)
      assert.deepEqual(message.value, value(index), topic)
    }
  }
})

test('keyed records land where partitionForKey says, in every client', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'keyed', numPartitions: 8 }] })
  const producer = broker.weir.producer()
  const keys = Array.from({ length: 40 }, (_, n) => `user-${n}`)
  const sent = await producer.send({ topic: 'keyed', messages: keys.map((key) => ({ key, value: 'v' })) })
  for (const [index, landed] of sent.entries()) {
    assert.equal(landed.partition, partitionForKey(keys[index], 8), keys[index])
  }
  // Kafka's murmur2 (the Java client's DefaultPartitioner) for known keys.
  assert.deepEqual(
    ['a', 'b', 'orders-42'].map((key) => partitionForKey(key, 16)),
    ['a', 'b', 'orders-42'].map((key) => partitionForKey(Buffer.from(key), 16)),
  )
  await producer.disconnect()
})

test('errors are WeirError subclasses with code and retriable', async () => {
  const admin = broker.weir.admin()
  await assert.rejects(admin.describeTopic('no-such-topic'), (error) => {
    assert.ok(error instanceof UnknownTopicOrPartitionError && error instanceof WeirError, String(error))
    assert.equal(error.code, 3)
    assert.equal(error.retriable, true)
    assert.equal(error.name, 'UnknownTopicOrPartitionError')
    return true
  })
  assert.throws(() => broker.weir.producer({ config: { 'no.such.setting': '1' } }), InvalidConfigError)
  await admin.createTopics({ topics: [{ topic: 'small', configEntries: [{ name: 'max.message.bytes', value: '1024' }] }] })
  const producer = broker.weir.producer()
  await assert.rejects(
    producer.send({ topic: 'small', messages: [{ value: Buffer.alloc(4096) }] }),
    (error) => error instanceof MessageTooLargeError && error.retriable === false,
  )
  // The producer keeps working after a refusal.
  const [landed] = await producer.send({ topic: 'small', messages: [{ value: 'fits' }] })
  assert.equal(landed.offset, 0n)
  await producer.disconnect()
})

test('a group splits partitions between members, commits, and a new member resumes from the commit', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'work', numPartitions: 4 }] })
  const producer = broker.weir.producer()
  await producer.send({
    topic: 'work',
    messages: Array.from({ length: 200 }, (_, n) => ({ key: `k${n}`, value: String(n) })),
  })

  const seen = new Map()
  const members = [0, 1].map(() => broker.weir.consumer({ groupId: 'workers', autoCommit: false }))
  const rebalances = []
  // No handler finishes before the second member owns partitions: else a fast
  // first member reads all 200 messages before the second has joined.
  let bothOwn
  const bothOwning = new Promise((resolve) => {
    bothOwn = resolve
  })
  for (const [index, member] of members.entries()) {
    member.on(member.events.REBALANCE, (event) => {
      rebalances.push([index, event.type])
      if (index === 1 && event.type === 'assigned' && event.partitions.length > 0) bothOwn()
    })
    await member.subscribe({ topics: ['work'], fromBeginning: true })
    await member.run({
      partitionsConsumedConcurrently: 2,
      eachMessage: async ({ topic, partition, message }) => {
        await bothOwning
        seen.set(message.value.toString(), index)
        await member.commitOffsets([{ topic, partition, offset: message.offset + 1n }])
      },
    })
  }
  await waitFor('every message once, by both members', async () =>
    seen.size === 200 && new Set(seen.values()).size === 2 ? true : undefined,
  )
  const owned = members.map((member) => member.assignment().length)
  assert.deepEqual(owned.sort(), [2, 2], 'two partitions each')
  assert.ok(rebalances.some(([, type]) => type === 'assigned'))
  // The last commits land after the last handlers saw their messages.
  await waitFor('the group caught up', async () => {
    const lag = await admin.groupLag('workers')
    return lag.reduce((total, partition) => total + partition.lag, 0n) === 0n ? true : undefined
  })
  for (const member of members) await member.disconnect()

  // A new member of the group starts where the commits left off.
  await producer.send({ topic: 'work', messages: [{ key: 'late', value: 'late' }] })
  const next = broker.weir.consumer({ groupId: 'workers' })
  await next.subscribe({ topic: 'work' })
  const got = []
  for await (const message of next) {
    got.push(message.value.toString())
    break
  }
  assert.deepEqual(got, ['late'])
  const described = await admin.describeGroups(['workers'])
  assert.equal(described.groups[0].groupId, 'workers')
  await next.disconnect()
  await producer.disconnect()
})

test('seek, pause and resume move and hold a partition', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'moves', numPartitions: 1 }] })
  const producer = broker.weir.producer()
  await producer.send({ topic: 'moves', messages: Array.from({ length: 10 }, (_, n) => ({ value: String(n) })) })
  const consumer = broker.weir.consumer()
  await consumer.assign([{ topic: 'moves', partition: 0 }])
  consumer.seek({ topic: 'moves', partition: 0, offset: 7n })
  const tail = await waitFor('records after the seek', async () => {
    const messages = await consumer.poll()
    return messages.length > 0 ? messages : undefined
  })
  assert.deepEqual(
    tail.map((m) => m.value.toString()),
    ['7', '8', '9'],
  )
  assert.equal(consumer.position({ topic: 'moves', partition: 0 }), 10n)
  consumer.pause([{ topic: 'moves' }])
  await producer.send({ topic: 'moves', messages: [{ value: 'held' }] })
  assert.deepEqual(await consumer.poll(), [], 'a paused partition returns nothing')
  consumer.resume([{ topic: 'moves' }])
  const resumed = await waitFor('the held record', async () => {
    const messages = await consumer.poll()
    return messages.length > 0 ? messages : undefined
  })
  assert.equal(resumed[0].value.toString(), 'held')
  assert.throws(() => consumer.seek({ topic: 'moves', partition: 0, offset: 2 ** 60 }), RangeError)
  await consumer.disconnect()
  await producer.disconnect()
})

test('the ES module entry point exports the same API', () => {
  const script = `import { Weir, partitionForKey, UnknownTopicOrPartitionError, default as weir } from 'weir'
if (typeof Weir !== 'function' || weir.Weir !== Weir) process.exit(2)
if (!(new UnknownTopicOrPartitionError('x', 3, true) instanceof weir.WeirError)) process.exit(3)
console.log(partitionForKey('a', 16))`
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: path.join(__dirname, '..'),
    encoding: 'utf8',
  })
  assert.equal(run.status, 0, run.stderr)
  assert.equal(Number(run.stdout.trim()), partitionForKey('a', 16))
})

test('commits take only handled messages: after stop, a break, or a failing handler', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'handled', numPartitions: 1 }] })
  const producer = broker.weir.producer()
  await producer.send({ topic: 'handled', messages: Array.from({ length: 20 }, (_, n) => ({ value: String(n) })) })
  await producer.disconnect()
  const committed = async (groupId) => {
    const { groups } = await admin.describeGroups([groupId])
    return groups[0].offsets[0]?.offset ?? null
  }

  // run: three handled, then disconnect (auto-commit) — three committed, not the whole fetch.
  const runner = broker.weir.consumer({ groupId: 'handled-run' })
  await runner.subscribe({ topic: 'handled', fromBeginning: true })
  let third
  const atThird = new Promise((resolve) => (third = resolve))
  let release
  const gate = new Promise((resolve) => (release = resolve))
  await runner.run({
    eachMessage: async ({ message }) => {
      if (message.offset === 2n) {
        third()
        await gate // stop() is asked for while the third message is in hand
      }
    },
  })
  await atThird
  const stopped = runner.stop()
  release()
  await stopped
  await runner.disconnect()
  assert.equal(await committed('handled-run'), 3n)

  // for await: the first message, the second in hand when the loop throws —
  // one committed; the next member starts at the second.
  const iterator = broker.weir.consumer({ groupId: 'handled-iterate' })
  await iterator.subscribe({ topic: 'handled', fromBeginning: true })
  await assert.rejects(
    (async () => {
      for await (const message of iterator) {
        if (message.offset === 1n) throw new Error('failed on the second')
      }
    })(),
    /failed on the second/,
  )
  await iterator.disconnect()
  assert.equal(await committed('handled-iterate'), 1n)
  await assert.rejects(iterator.poll(), (error) => error.code === 8, 'a disconnected consumer refuses calls')

  // stop() from inside a handler returns; a seek inside a handler moves the
  // partition (the rest of the batch is not given back over it).
  const seeker = broker.weir.consumer({ groupId: 'handled-seek' })
  await seeker.subscribe({ topic: 'handled', fromBeginning: true })
  const visited = []
  let done
  const finished = new Promise((resolve) => (done = resolve))
  await seeker.run({
    eachMessage: async ({ topic, partition, message }) => {
      visited.push(message.offset)
      if (message.offset === 2n) seeker.seek({ topic, partition, offset: 15n })
      if (message.offset === 19n) {
        await seeker.stop()
        done()
      }
    },
  })
  await finished
  assert.deepEqual(visited, [0n, 1n, 2n, 15n, 16n, 17n, 18n, 19n])
  await seeker.disconnect()
  assert.equal(await committed('handled-seek'), 20n)

  // A handler that fails once: reported, the message delivered again, no message lost.
  const flaky = broker.weir.consumer({ groupId: 'handled-flaky' })
  const crashes = []
  flaky.on(flaky.events.CRASH, (error) => crashes.push(error.message))
  await flaky.subscribe({ topic: 'handled', fromBeginning: true })
  const seen = []
  let failed = false
  await flaky.run({
    eachMessage: async ({ message }) => {
      if (message.offset === 5n && !failed) {
        failed = true
        throw new Error('not now')
      }
      seen.push(message.offset)
    },
  })
  await waitFor('every message handled once', async () => (seen.length === 20 ? true : undefined))
  assert.deepEqual(seen, Array.from({ length: 20 }, (_, n) => BigInt(n)))
  assert.deepEqual(crashes, ['not now'])
  await flaky.disconnect()
  assert.equal(await committed('handled-flaky'), 20n)
})

test('a seek made while a poll waits moves the partition, losing nothing', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'sought', numPartitions: 1 }] })
  const producer = broker.weir.producer()
  await producer.send({ topic: 'sought', messages: Array.from({ length: 10 }, (_, n) => ({ value: String(n) })) })
  const consumer = broker.weir.consumer({ maxWaitTimeInMs: 60_000 })
  await consumer.assign([{ topic: 'sought', partition: 0 }])
  consumer.seek({ topic: 'sought', partition: 0, offset: 10n })
  const seen = []
  await consumer.run({ eachMessage: async ({ message }) => seen.push(message.offset) })
  // The loop waits at the end of the log; the seek lands during that poll.
  consumer.seek({ topic: 'sought', partition: 0, offset: 4n })
  await waitFor('records from the seek target', async () => (seen.length >= 6 ? true : undefined))
  assert.deepEqual(seen, [4n, 5n, 6n, 7n, 8n, 9n])
  await consumer.disconnect()
  await producer.disconnect()
})

test('a transform sends the records its plugin fails on to its dead-letter topic', async () => {
  const admin = broker.weir.admin()
  const topics = ['dl-raw', 'dl-clean', 'dl-letters']
  await admin.createTopics({ topics: topics.map((topic) => ({ topic, numPartitions: 1 })) })
  const wasm = fs.readFileSync(path.join(PLUGINS, 'identity_transform.wasm'))
  const uploaded = await admin.uploadPlugin({ name: 'picky', hook: 'transform', wasm })
  assert.ok(['compiling', 'ready'].includes(uploaded.state), uploaded.state)
  const producer = broker.weir.producer()
  await producer.connect()
  await producer.send({ topic: 'dl-raw', messages: ['ok-1', 'bad', 'ok-2'].map((value) => ({ value })) })
  await producer.disconnect()
  await admin.deployTransform({
    name: 'picky',
    plugin: 'picky',
    input: 'dl-raw',
    outputs: ['dl-clean'],
    from: 'earliest',
    config: { fail_on: 'bad' },
    deadLetterTopic: 'dl-letters',
  })
  const clean = await readAll('dl-clean', 1, 2)
  assert.deepEqual(
    clean.map((message) => message.value.toString()),
    ['ok-1', 'ok-2'],
  )
  const [letter] = await readAll('dl-letters', 1, 1)
  assert.equal(letter.value.toString(), 'bad')
  assert.equal(letter.headers['weir.dlq.offset'].toString(), '1')
  const status = await waitFor('the dead letter counted', async () => {
    const [picky] = (await admin.listTransforms()).filter((transform) => transform.name === 'picky')
    return picky.partitions[0].deadLettered === 1 ? picky : undefined
  })
  assert.equal(status.deadLetterTopic, 'dl-letters')
  assert.deepEqual([status.partitions[0].processed, status.partitions[0].emitted], [3, 2])
  await admin.deleteTransform('picky')
  await admin.disconnect()
})
