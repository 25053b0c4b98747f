'use strict'
// The conformance suite every SDK runs (conformance/vectors.json, written from
// the Rust client core by client/tests/conformance.rs): the same vectors and
// scenarios as the Rust and Python suites, through the Node SDK.
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { after, before, test } = require('node:test')

const weir = require('..')
const { startBroker, waitFor } = require('./support')

const ROOT = path.resolve(__dirname, '..', '..')
const VECTORS = JSON.parse(fs.readFileSync(path.join(ROOT, 'conformance', 'vectors.json'), 'utf8'))
const PLUGINS = process.env.WEIR_PLUGIN_DIR ?? path.join(ROOT, 'target', 'plugins', 'wasm32-wasip2', 'release')
const unhex = (text) => (text === null ? null : Buffer.from(text, 'hex'))

let broker
before(async () => {
  broker = await startBroker()
})
after(async () => {
  await broker.stop()
})

test("keys land on Kafka's murmur2 partitions", () => {
  for (const vector of [...VECTORS.murmur2, ...VECTORS.kafka_murmur2]) {
    assert.equal(weir.partitionForKey(unhex(vector.key), vector.partitions), vector.partition, JSON.stringify(vector))
  }
})

test('every error code is a WeirError subclass with its retriability', () => {
  for (const entry of VECTORS.errors) {
    const name = entry.name.endsWith('Error') ? entry.name : `${entry.name}Error`
    const [Class, retriable] = weir.ERROR_CLASSES.get(entry.code)
    assert.equal(Class, weir[name], name)
    assert.equal(retriable, entry.retriable, name)
    assert.ok(new Class('message', entry.code, retriable) instanceof weir.WeirError)
  }
  assert.equal(weir.ERROR_CLASSES.size, VECTORS.errors.length)
})

/** A vector's headers as a kafkajs-style object (repeated keys as arrays). */
function headerObject(headers) {
  const object = {}
  for (const [key, value] of headers) {
    const bytes = unhex(value)
    if (!(key in object)) object[key] = bytes
    else if (Array.isArray(object[key])) object[key].push(bytes)
    else object[key] = [object[key], bytes]
  }
  return object
}

test('records round-trip with their keys, values, headers and partitions', async () => {
  const trip = VECTORS.round_trip
  const admin = broker.weir.admin()
  await admin.createTopics({ topics: [{ topic: trip.topic, numPartitions: trip.partitions }] })
  const producer = broker.weir.producer()
  for (const [index, record] of trip.records.entries()) {
    const message = {
      key: unhex(record.key),
      value: unhex(record.value),
      headers: headerObject(record.headers),
      partition: record.partition ?? undefined,
    }
    const [landed] = await producer.send({ topic: trip.topic, messages: [message] })
    assert.equal(landed.partition, record.expected_partition, `record ${index}`)
  }
  await producer.disconnect()
  const consumer = broker.weir.consumer()
  const partitions = Array.from({ length: trip.partitions }, (_, partition) => ({ topic: trip.topic, partition }))
  await consumer.assign(partitions)
  for (const partition of partitions) consumer.seek({ ...partition, offset: 'earliest' })
  const read = []
  await waitFor('every record back', async () => {
    read.push(...(await consumer.poll()))
    return read.length >= trip.records.length ? true : undefined
  })
  await consumer.disconnect()
  read.sort((a, b) => a.partition - b.partition || Number(a.offset - b.offset))
  const expected = [...trip.records].sort((a, b) => a.expected_partition - b.expected_partition)
  assert.equal(read.length, expected.length)
  for (const [index, want] of expected.entries()) {
    const got = read[index]
    assert.equal(got.partition, want.expected_partition)
    assert.deepEqual(got.key, unhex(want.key))
    assert.deepEqual(got.value, unhex(want.value))
    assert.deepEqual(got.headers, headerObject(want.headers))
  }
})

test('a partitioner plugin places records as from Rust', async () => {
  const placed = VECTORS.partitioner
  const admin = broker.weir.admin()
  const wasm = fs.readFileSync(path.join(PLUGINS, `${placed.plugin}.wasm`))
  await admin.uploadPlugin({ name: placed.plugin, hook: 'partitioner', wasm })
  await admin.createTopics({ topics: [{ topic: placed.topic, numPartitions: placed.partitions }] })
  await admin.setPartitioner({ topic: placed.topic, plugin: placed.plugin, config: placed.config })
  const [listed] = (await admin.listPlugins()).filter((plugin) => plugin.name === placed.plugin)
  assert.deepEqual([listed.state, listed.stateReason], ['ready', ''], 'setting a partitioner waits for its compile')
  const producer = broker.weir.producer()
  for (const placement of placed.placements) {
    const [landed] = await producer.send({ topic: placed.topic, messages: [{ key: placement.key, value: 'v' }] })
    assert.equal(landed.partition, placement.partition, placement.key)
  }
  await producer.disconnect()
})
