'use strict'
// Generated files are committed (an install from source needs no TypeScript):
// each must be what its generator writes now.
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')

const native = require('../native.js')
const errors = require('../scripts/gen-errors.js')
const esm = require('../scripts/gen-esm.js')

const PACKAGE = path.resolve(__dirname, '..')
const read = (name) => fs.readFileSync(path.join(PACKAGE, name), 'utf8')

test('errors.ts has one class per ErrorCode', () => {
  assert.equal(read('errors.ts'), errors.render(native.errorCodes()), 'run `npm run build:ts`')
})

test('index.mjs re-exports every export of index.js', () => {
  assert.equal(read('index.mjs'), esm.render(esm.names()), 'run `npm run build:ts`')
})

test('index.js, index.d.ts, errors.js and errors.d.ts are what tsc writes', () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-tsc-'))
  const tsc = require.resolve('typescript/bin/tsc')
  const compiled = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.json', '--outDir', out], {
    cwd: PACKAGE,
    encoding: 'utf8',
  })
  assert.equal(compiled.status, 0, compiled.stdout + compiled.stderr)
  for (const name of ['index.js', 'index.d.ts', 'errors.js', 'errors.d.ts']) {
    assert.equal(read(name), fs.readFileSync(path.join(out, name), 'utf8'), `${name}: run \`npm run build:ts\``)
  }
  fs.rmSync(out, { recursive: true, force: true })
})
