// Runs at `npm install`. A packed tarball (`npm pack`) carries the prebuilt
// addon and needs nothing else; a source checkout (`npm install ./sdk-node`)
// builds the addon with cargo from the repository around it.
'use strict'
const fs = require('fs')
const path = require('path')
const { spawnSync } = require('child_process')

const root = path.resolve(__dirname, '..')
const addon = path.join(root, 'weir.linux-x64-gnu.node')

const manifest = path.join(root, 'Cargo.toml')
// A source checkout always builds (an addon left by a debug build there is
// not what an install wants); a packed tarball has no sources, only its addon.
if (!fs.existsSync(manifest)) {
  if (fs.existsSync(addon)) process.exit(0)
  console.error('weir: this package has neither a prebuilt addon nor the sources to build one')
  process.exit(1)
}
if (process.platform !== 'linux' || process.arch !== 'x64') {
  console.error(`weir: no build for ${process.platform}-${process.arch}; only linux-x64 is built so far`)
  process.exit(1)
}
const target = process.env.CARGO_TARGET_DIR ?? path.join(root, 'target')
console.error('weir: building the native addon from source (cargo build --release); this takes a few minutes')
const build = spawnSync('cargo', ['build', '--release', '--manifest-path', manifest], {
  stdio: 'inherit',
  env: { ...process.env, CARGO_TARGET_DIR: target },
})
if (build.error) {
  console.error(`weir: cannot run cargo (${build.error.message}): install Rust from https://rustup.rs, or install a packed tarball`)
  process.exit(1)
}
if (build.status !== 0) {
  process.exit(build.status ?? 1)
}
fs.copyFileSync(path.join(target, 'release', 'libweir_node.so'), addon)
