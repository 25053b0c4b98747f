'use strict'
/**
 * The Node SDK's throughput next to the Rust client's on the same Weir broker,
 * and next to kafkajs on Kafka, in one run. A benchmark, not a test.
 *
 *     scripts/bench-node.sh [--records 200000] [--rounds 3] [--chunk 500]
 *
 * (the script builds the release binaries and addon, installs the peers and
 * kafkajs, then runs this file). This file starts `weir-bench serve`, which
 * starts a Weir broker and a single-node Kafka pinned to the lower half of the
 * CPUs, and pins itself (and so every client it runs) to the upper half.
 *
 * Each round, on fresh one-partition topics (Weir: flush.policy=interval, the
 * page-cache durability Kafka has by default), the system order alternating:
 *   produce  1 KiB records, acks=1, `--chunk` records per `send`, every send
 *            issued at once and awaited together: the Node SDK to Weir, `weir
 *            bench produce` (the Rust client) to Weir, kafkajs to Kafka;
 *   consume  the Rust-produced topic from offset 0: the Node SDK's
 *            `assign` + `poll` next to `weir bench consume`; then, as a
 *            kafkajs user writes it (`subscribe({ fromBeginning })` + `run({
 *            eachBatch })` in a fresh group), the Node SDK on the Node-produced
 *            Weir topic next to kafkajs on the Kafka topic.
 * Each measured workload starts on a collected heap (`--expose-gc`).
 * Prints each round, then medians: throughput ratios (MB/s) and client CPU
 * ratios (the other client's CPU-seconds / the Node process's for the same
 * bytes; above 1 = Node spends less).
 */

const { spawn, execFileSync, spawnSync } = require('node:child_process')
const path = require('node:path')
const readline = require('node:readline')

const ROOT = path.resolve(__dirname, '..', '..')
const { Weir } = require('..')

const RECORD_BYTES = 1024
const MB = 1e6

function parseArgs(argv) {
  const args = {
    records: 200_000,
    rounds: 3,
    chunk: 500,
    weir: path.join(ROOT, 'target/release/weir'),
    weirBench: path.join(ROOT, 'target/release/weir-bench'),
    kafka: true,
  }
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`)
      return argv[++i]
    }
    if (flag === '--records') args.records = Number(value())
    else if (flag === '--rounds') args.rounds = Number(value())
    else if (flag === '--chunk') args.chunk = Number(value())
    else if (flag === '--weir') args.weir = value()
    else if (flag === '--weir-bench') args.weirBench = value()
    else if (flag === '--no-kafka') args.kafka = false
    else throw new Error(`unknown flag ${flag} (--records N, --rounds N, --chunk N, --weir BIN, --weir-bench BIN, --no-kafka)`)
  }
  for (const name of ['records', 'rounds', 'chunk']) {
    if (!Number.isInteger(args[name]) || args[name] < 1) throw new Error(`--${name} must be a positive integer`)
  }
  return args
}

/** Starts `weir-bench serve`; resolves to its addresses and the process. */
async function startServers(args) {
  const systems = args.kafka ? 'weir,kafka' : 'weir'
  const child = spawn(args.weirBench, ['serve', '--systems', systems, '--weir-bin', args.weir], {
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)))
  const lines = readline.createInterface({ input: child.stdout })
  const first = await Promise.race([
    new Promise((resolve) => lines.once('line', resolve)),
    exited.then((status) => {
      throw new Error(`weir-bench serve exited (${status}) before its servers were ready`)
    }),
  ])
  return { addresses: JSON.parse(first), stop: () => (child.stdin.end(), exited) }
}

function cpuSeconds(since) {
  const used = process.cpuUsage(since)
  return (used.user + used.system) / 1e6
}

/**
 * (MB/s, CPU seconds of this process) of `workload`, which returns bytes
 * moved. The heap is collected first when the bench runs with `--expose-gc`
 * (as scripts/bench-node.sh runs it), so no workload pays for the garbage of
 * the one before (each `weir bench` run starts in a fresh process). A workload
 * may call `begin()` once its setup is done to start the clock there, as
 * `weir bench consume` starts its clock after assigning and seeking.
 */
async function measured(workload) {
  if (typeof global.gc === 'function') global.gc()
  let cpu = process.cpuUsage()
  let started = process.hrtime.bigint()
  const begin = () => {
    cpu = process.cpuUsage()
    started = process.hrtime.bigint()
  }
  const bytes = await workload(begin)
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  return { mbPerSecond: bytes / seconds / MB, cpuSeconds: cpuSeconds(cpu) }
}

/** `weir bench WORKLOAD` (the Rust client): its MB/s and the CPU seconds of its process. */
function rustBench(args, brokers, workload, topic, extra = []) {
  const done = spawnSync(
    args.weir,
    ['bench', workload, '--topic', topic, '--loopback-bytes', '0', '--format', 'json', '--brokers', brokers, ...extra],
    { encoding: 'utf8' },
  )
  if (done.status !== 0) throw new Error(`weir bench ${workload} failed: ${done.stderr}`)
  const report = JSON.parse(done.stdout)
  return { mbPerSecond: report.mb_per_second, cpuSeconds: report.cpu_seconds }
}

/**
 * kafkajs-shaped produce: every `send` of `chunk` messages issued at once,
 * awaited together. `acks` goes in the send for kafkajs and is ignored by Weir
 * (its producer was built with `acks: 1`).
 */
async function produce(producer, topic, records, chunk) {
  const value = Buffer.alloc(RECORD_BYTES, 'a')
  const sends = []
  for (let sent = 0; sent < records; sent += chunk) {
    const messages = Array.from({ length: Math.min(chunk, records - sent) }, () => ({ value }))
    sends.push(producer.send({ topic, acks: 1, messages }))
  }
  await Promise.all(sends)
  return records * RECORD_BYTES
}

/** kafkajs-shaped group consume from the beginning until `expected` records arrived. */
async function groupConsume(consumer, topic, expected) {
  let count = 0
  let bytes = 0
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await new Promise((resolve, reject) => {
    consumer
      .run({
        eachBatch: async ({ batch }) => {
          for (const message of batch.messages) bytes += message.value.length
          count += batch.messages.length
          if (count >= expected) resolve()
        },
      })
      .catch(reject)
  })
  await consumer.disconnect()
  return bytes
}

/**
 * The Node SDK's closest match to `weir bench consume`: assign, seek, then
 * (the clock starting there, as that command's does) poll.
 */
async function pollConsume(weir, topic, expected, begin) {
  const consumer = weir.consumer({ maxWaitTimeInMs: 10_000 })
  await consumer.assign([{ topic, partition: 0 }])
  consumer.seek({ topic, partition: 0, offset: 'earliest' })
  begin()
  let count = 0
  let bytes = 0
  while (count < expected) {
    const messages = await consumer.poll(10_000)
    if (messages.length === 0) throw new Error('no records for 10 s')
    count += messages.length
    for (const message of messages) bytes += message.value.length
  }
  await consumer.disconnect()
  return bytes
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

function describe(figure) {
  return `${figure.mbPerSecond.toFixed(0)} MB/s ${figure.cpuSeconds.toFixed(2)} cpu-s`
}

async function main() {
  const args = parseArgs(process.argv.slice(2))
  const kafkajs = args.kafka ? require('kafkajs') : null
  const servers = await startServers(args)
  try {
    const cpus = servers.addresses.load_generator_cpus
    if (cpus.length > 0) {
      // -a: every thread this process has; the addon's and libuv's later ones inherit it.
      execFileSync('taskset', ['-a', '-cp', cpus.join(','), String(process.pid)], { stdio: 'ignore' })
    }
    console.log(`weir at ${servers.addresses.weir}${args.kafka ? `, kafka at ${servers.addresses.kafka}` : ''}; ` +
      `clients on CPU ${cpus.length ? cpus.join(',') : 'any'}`)
    await rounds(args, servers.addresses, kafkajs)
  } finally {
    await servers.stop()
  }
}

async function rounds(args, addresses, kafkajs) {
  const weir = new Weir({ brokers: [addresses.weir], clientId: 'bench-node' })
  const admin = weir.admin()
  const kafka = kafkajs
    ? new kafkajs.Kafka({ brokers: [addresses.kafka], clientId: 'bench-kafkajs', logLevel: kafkajs.logLevel.NOTHING })
    : null
  const kafkaAdmin = kafka ? kafka.admin() : null
  if (kafkaAdmin) await kafkaAdmin.connect()
  const ratios = {}
  const record = (name, kind, mine, theirs) => {
    ;(ratios[`${name} throughput (${kind} MB/s)`] ??= []).push(mine.mbPerSecond / theirs.mbPerSecond)
    ;(ratios[`${name} cpu (${kind.split(' / ').reverse().join(' / ')} cpu-s)`] ??= []).push(
      theirs.cpuSeconds / mine.cpuSeconds,
    )
  }
  for (let round = 0; round < args.rounds; round++) {
    const id = `${process.pid}-${round}`
    const nodeTopic = `node-bench-${id}`
    const rustTopic = `rust-bench-${id}`
    const kafkaTopic = `kafkajs-bench-${id}`
    await admin.createTopics({
      topics: [nodeTopic, rustTopic].map((topic) => ({
        topic,
        numPartitions: 1,
        configEntries: [{ name: 'flush.policy', value: 'interval' }],
      })),
    })
    if (kafkaAdmin) {
      await kafkaAdmin.createTopics({
        topics: [{ topic: kafkaTopic, numPartitions: 1, replicationFactor: 1 }],
        waitForLeaders: true,
      })
    }
    const producer = weir.producer({ acks: 1 })
    const kafkaProducer = kafka ? kafka.producer({ createPartitioner: kafkajs.Partitioners.DefaultPartitioner }) : null
    if (kafkaProducer) await kafkaProducer.connect()
    const runs = {
      nodeProduce: () => measured(() => produce(producer, nodeTopic, args.records, args.chunk)),
      rustProduce: async () =>
        rustBench(args, addresses.weir, 'produce', rustTopic, ['--records', String(args.records), '--acks', '1']),
      kafkajsProduce: () => measured(() => produce(kafkaProducer, kafkaTopic, args.records, args.chunk)),
      nodeConsume: () => measured((begin) => pollConsume(weir, rustTopic, args.records, begin)),
      rustConsume: async () => rustBench(args, addresses.weir, 'consume', rustTopic),
      nodeGroupConsume: () =>
        measured(() => groupConsume(weir.consumer({ groupId: `bench-${id}` }), nodeTopic, args.records)),
      kafkajsGroupConsume: () =>
        measured(() => groupConsume(kafka.consumer({ groupId: `bench-${id}` }), kafkaTopic, args.records)),
    }
    // Alternate who goes first, so neither always meets a warmer page cache.
    const order = [
      ['nodeProduce', 'rustProduce', 'kafkajsProduce'],
      ['nodeConsume', 'rustConsume'],
      ['nodeGroupConsume', 'kafkajsGroupConsume'],
    ]
    const figures = {}
    for (const group of order) {
      const names = round % 2 === 0 ? group : [...group].reverse()
      for (const name of names) {
        if (!kafka && name.startsWith('kafkajs')) continue
        figures[name] = await runs[name]()
      }
    }
    await producer.disconnect()
    if (kafkaProducer) await kafkaProducer.disconnect()
    const line = [
      `round ${round + 1}:`,
      `produce node ${describe(figures.nodeProduce)}, rust ${describe(figures.rustProduce)}` +
        (kafka ? `, kafkajs ${describe(figures.kafkajsProduce)};` : ';'),
      `consume node ${describe(figures.nodeConsume)}, rust ${describe(figures.rustConsume)};`,
      `group consume node ${describe(figures.nodeGroupConsume)}` +
        (kafka ? `, kafkajs ${describe(figures.kafkajsGroupConsume)}` : ''),
    ]
    console.log(line.join(' '))
    record('produce', 'node / rust', figures.nodeProduce, figures.rustProduce)
    record('consume', 'node / rust', figures.nodeConsume, figures.rustConsume)
    if (kafka) {
      record('produce', 'node on weir / kafkajs on kafka', figures.nodeProduce, figures.kafkajsProduce)
      record('group consume', 'node on weir / kafkajs on kafka', figures.nodeGroupConsume, figures.kafkajsGroupConsume)
      await kafkaAdmin.deleteTopics({ topics: [kafkaTopic] })
    }
    await admin.deleteTopics({ topics: [nodeTopic, rustTopic] })
  }
  for (const [name, values] of Object.entries(ratios)) {
    console.log(`${name}: median ${median(values).toFixed(2)} (rounds ${values.map((v) => v.toFixed(2)).join(' / ')})`)
  }
  if (kafkaAdmin) await kafkaAdmin.disconnect()
  await admin.disconnect()
}

main().catch((error) => {
  console.error(error)
  process.exitCode = 1
})
