'use strict'
// Process lifecycle: programs exit cleanly with clients open or calls in
// flight, and long polls leave the event loop and the libuv threadpool free.
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { after, before, test } = require('node:test')

const { startBroker } = require('./support')

let broker
before(async () => {
  broker = await startBroker()
  await broker.weir.admin().createTopics({ topics: [{ topic: 'life', numPartitions: 2 }] })
})
after(async () => {
  await broker.stop()
})

const PACKAGE = path.resolve(__dirname, '..')

/** Runs a short program; resolves with its exit code and stderr. */
function run(script) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script], { cwd: PACKAGE, stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('exit', (code, signal) => resolve({ code, signal, stderr }))
  })
}

test('200 programs that end with clients open and calls in flight, or after disconnect, exit cleanly', async () => {
  const open = `const { Weir } = require('.')
const weir = new Weir({ brokers: ['${broker.address}'] })
;(async () => {
  const producer = weir.producer()
  await producer.send({ topic: 'life', messages: [{ key: 'k', value: 'v' }] })
  const consumer = weir.consumer({ groupId: 'life', maxWaitTimeInMs: 200 })
  await consumer.subscribe({ topic: 'life', fromBeginning: true })
  await consumer.poll()
  await weir.admin().listTopics()
  // Operations still in flight, and no disconnect: the process must still
  // end, and end cleanly.
  producer.send({ topic: 'life', messages: [{ key: 'k', value: 'in flight' }] })
  consumer.poll()
})()`
  const inFlight = /\n {2}\/\/ Operations still[\s\S]*consumer\.poll\(\)\n/
  assert.match(open, inFlight)
  const closed = open.replace(inFlight, '\n  await producer.disconnect()\n  await consumer.disconnect()\n')
  const runs = Number(process.env.WEIR_NODE_EXIT_RUNS ?? 200)
  for (let index = 0; index < runs; index++) {
    const outcome = await run(index % 2 === 0 ? open : closed)
    assert.deepEqual([outcome.code, outcome.signal], [0, null], `run ${index}: ${outcome.stderr}`)
  }
})

test('long polls run on the client runtime: the event loop and the libuv threadpool stay free', async () => {
  const consumers = Array.from({ length: 8 }, () => broker.weir.consumer({ maxWaitTimeInMs: 60_000 }))
  const [, { high }] = await broker.weir.admin().fetchTopicOffsets('life')
  let settled = 0
  const polls = consumers.map(async (consumer) => {
    await consumer.assign([{ topic: 'life', partition: 1 }])
    consumer.seek({ topic: 'life', partition: 1, offset: high })
    const messages = await consumer.poll()
    settled += 1
    return messages
  })
  // More polls in flight than the threadpool has threads (4), yet a file
  // read (threadpool work) and a timer both finish while they all wait.
  await new Promise((resolve) => setTimeout(resolve, 50))
  await fs.promises.readFile(__filename)
  assert.equal(settled, 0, 'the polls are still waiting for records')
  await broker.weir.producer().send({ topic: 'life', messages: [{ value: 'wake', partition: 1 }] })
  const answers = await Promise.all(polls)
  assert.ok(answers.every((messages) => messages.length === 1 && messages[0].value.toString() === 'wake'))
  for (const consumer of consumers) await consumer.disconnect()
})
