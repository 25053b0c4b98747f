'use strict'
// A consumer group split across two Node processes, with rebalance events;
// eachBatch with manual commits; offsets past 2^53.
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const readline = require('node:readline')
const { after, before, test } = require('node:test')

const { startBroker, waitFor } = require('./support')

let broker
before(async () => {
  broker = await startBroker()
})
after(async () => {
  await broker.stop()
})

/** A member in its own process: prints each rebalance and each value as a JSON line. */
function member(address) {
  const script = `const { Weir } = require('.')
const consumer = new Weir({ brokers: ['${address}'] }).consumer({ groupId: 'split', autoCommit: false })
consumer.on(consumer.events.REBALANCE, (event) =>
  console.log(JSON.stringify({ rebalance: event.type, partitions: event.partitions.map((p) => p.partition) })))
process.on('SIGTERM', async () => { await consumer.disconnect(); process.exit(0) })
;(async () => {
  await consumer.subscribe({ topic: 'split', fromBeginning: true })
  await consumer.run({
    eachBatch: async ({ batch }) => {
      for (const message of batch.messages) console.log(JSON.stringify({ value: message.value.toString() }))
      await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: batch.lastOffset() + 1n }])
    },
  })
})()`
  const child = spawn(process.execPath, ['-e', script], {
    cwd: path.resolve(__dirname, '..'),
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const lines = []
  readline.createInterface({ input: child.stdout }).on('line', (line) => lines.push(JSON.parse(line)))
  return { child, lines }
}

test('a group splits across two processes, with rebalance events and eachBatch commits', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'split', numPartitions: 4 }] })
  const producer = broker.weir.producer()
  await producer.send({ topic: 'split', messages: Array.from({ length: 100 }, (_, n) => ({ key: `k${n}`, value: String(n) })) })

  const members = []
  after(() => members.forEach(({ child }) => child.exitCode === null && child.kill('SIGKILL')))
  const first = member(broker.address)
  members.push(first)
  await waitFor('the first member owning all four partitions', async () => {
    const owned = first.lines.filter((line) => line.rebalance === 'assigned').flatMap((line) => line.partitions)
    return new Set(owned).size === 4 ? true : undefined
  })
  const second = member(broker.address)
  members.push(second)
  await waitFor('the second member owning two partitions', async () => {
    const owned = second.lines.filter((line) => line.rebalance === 'assigned').flatMap((line) => line.partitions)
    return new Set(owned).size === 2 ? true : undefined
  })
  assert.ok(first.lines.some((line) => line.rebalance === 'revoked'), 'the first member gave two partitions up')
  await producer.send({ topic: 'split', messages: Array.from({ length: 100 }, (_, n) => ({ key: `k${n}`, value: String(100 + n) })) })
  const values = () => new Set([...first.lines, ...second.lines].filter((l) => l.value !== undefined).map((l) => l.value))
  await waitFor('all 200 values read', async () => (values().size === 200 ? true : undefined))
  await waitFor('the group caught up', async () => {
    const lag = await admin.groupLag('split')
    return lag.length === 4 && lag.every((partition) => partition.lag === 0n) ? true : undefined
  })
  for (const { child } of [first, second]) {
    const exited = new Promise((resolve) => child.on('exit', resolve))
    child.kill('SIGTERM')
    assert.equal(await exited, 0)
  }
  await producer.disconnect()
})

test('offsets past 2^53 round-trip exactly through a commit', async () => {
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: 'big', numPartitions: 1 }] })
  const consumer = broker.weir.consumer({ groupId: 'big-offsets' })
  await consumer.assign([{ topic: 'big', partition: 0 }])
  const huge = 2n ** 60n + 7n
  await consumer.commitOffsets([{ topic: 'big', partition: 0, offset: huge }])
  assert.equal(await consumer.committed({ topic: 'big', partition: 0 }), huge)
  const described = await admin.describeGroups(['big-offsets'])
  assert.equal(described.groups[0].offsets[0].offset, huge)
  await consumer.disconnect()
})

test('a broker that is down is a retriable NetworkError', async () => {
  const { Weir, NetworkError } = require('..')
  const nobody = new Weir({ brokers: ['127.0.0.1:1'], requestTimeout: 2000, connectionTimeout: 1000 })
  await assert.rejects(nobody.admin().listTopics(), (error) => error instanceof NetworkError && error.retriable)
})
