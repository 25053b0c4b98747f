'use strict'
// `npm pack` makes a tarball with the prebuilt addon that installs into an
// empty project on a machine with no Rust toolchain on its PATH; `npm install
// ./sdk-node` builds the addon from source with cargo.
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')

const PACKAGE = path.resolve(__dirname, '..')

/** `require('weir')` works in `project` with `env`. */
function assertLoads(project, env) {
  const loaded = spawnSync(
    process.execPath,
    ['-e', "const w = require('weir'); console.log(w.partitionForKey('a', 16), typeof w.Weir)"],
    { cwd: project, env, encoding: 'utf8' },
  )
  assert.equal(loaded.status, 0, loaded.stderr)
  assert.match(loaded.stdout, /^\d+ function\n$/)
}

test('the packed tarball installs and loads without cargo', () => {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-pack-'))
  const npmCli = fs.realpathSync(spawnSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).stdout.trim())
  const npm = (args, cwd, env) => {
    const ran = spawnSync(process.execPath, [npmCli, ...args], { cwd, env, encoding: 'utf8' })
    assert.equal(ran.status, 0, `npm ${args.join(' ')}: ${ran.stdout}${ran.stderr}`)
    return ran.stdout
  }
  const packed = JSON.parse(npm(['pack', '--json', '--pack-destination', work], PACKAGE, process.env))
  const files = packed[0].files.map((file) => file.path)
  assert.ok(files.includes('weir.linux-x64-gnu.node'), `the addon is in the tarball: ${files}`)
  assert.ok(!files.some((file) => file.endsWith('.rs')), 'no sources')

  // An empty project, and a PATH with node and sh alone on it: no cargo, no rustc.
  const project = path.join(work, 'app')
  fs.mkdirSync(project)
  fs.writeFileSync(path.join(project, 'package.json'), '{"name":"app","version":"1.0.0","private":true}\n')
  const bin = path.join(work, 'bin')
  fs.mkdirSync(bin)
  fs.symlinkSync(process.execPath, path.join(bin, 'node'))
  fs.symlinkSync('/bin/sh', path.join(bin, 'sh'))
  const env = {
    HOME: work,
    PATH: bin,
    npm_config_cache: path.join(work, 'cache'),
    npm_config_update_notifier: 'false',
  }
  assert.notEqual(spawnSync('sh', ['-c', 'command -v cargo'], { env }).status, 0, 'cargo is not on the PATH')
  npm(['install', '--no-audit', '--no-fund', '--offline', path.join(work, packed[0].filename)], project, env)
  assertLoads(project, env)
  fs.rmSync(work, { recursive: true, force: true })
})

test('npm install of the source directory builds the addon with cargo', () => {
  // The dev profile and the repository's shared target dir (what the test
  // command's napi build filled), so this costs a rebuild of the addon crate,
  // not of the client core; the release default differs only in the profile.
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'weir-source-'))
  const project = path.join(work, 'app')
  fs.mkdirSync(project)
  fs.writeFileSync(path.join(project, 'package.json'), '{"name":"app","version":"1.0.0","private":true}\n')
  const env = {
    ...process.env,
    CARGO_TARGET_DIR: path.resolve(PACKAGE, '..', 'target', 'sdk'),
    WEIR_CARGO_PROFILE: 'dev',
    npm_config_cache: path.join(work, 'cache'),
    npm_config_update_notifier: 'false',
  }
  const installed = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--offline', '--foreground-scripts', PACKAGE], {
    cwd: project,
    env,
    encoding: 'utf8',
  })
  assert.equal(installed.status, 0, `npm install ${PACKAGE}: ${installed.stdout}${installed.stderr}`)
  assert.match(installed.stderr + installed.stdout, /building the native addon from source/)
  assertLoads(project, env)
  fs.rmSync(work, { recursive: true, force: true })
})
