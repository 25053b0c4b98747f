// A real `weir serve` process per test file (WEIR_BIN, default
// ../target/debug/weir), reached over the network like any user's.
'use strict'
const { spawn } = require('child_process')
const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')

const { Weir } = require('..')

const WEIR = process.env.WEIR_BIN ?? path.resolve(__dirname, '..', '..', 'target', 'debug', 'weir')
/** Generous: the test machine may be busy. */
const DEADLINE_MS = 120_000

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

/** Polls `check` until it returns a value other than undefined. */
async function waitFor(what, check) {
  const deadline = Date.now() + DEADLINE_MS
  for (;;) {
    let outcome
    try {
      outcome = await check()
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`${what}: ${error}`)
    }
    if (outcome !== undefined) return outcome
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

async function startBroker() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-node-'))
  const config = path.join(dir, 'weir.toml')
  fs.writeFileSync(config, '[plugins]\ncall_deadline_ms = 2000\n')
  const address = `127.0.0.1:${await freePort()}`
  const child = spawn(WEIR, ['serve', '--data-dir', path.join(dir, 'data'), '--listen', address, '--config', config], {
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  let exited = false
  child.on('exit', () => {
    exited = true
  })
  const admin = new Weir({ brokers: [address] }).admin()
  await waitFor('the broker to answer', async () => {
    if (exited) throw new Error('the broker exited')
    await admin.listTopics()
    return true
  })
  return {
    address,
    dir,
    weir: new Weir({ brokers: [address] }),
    async stop() {
      if (!exited) {
        const gone = new Promise((resolve) => child.on('exit', resolve))
        child.kill('SIGTERM')
        await gone
      }
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

module.exports = { startBroker, waitFor, WEIR }
