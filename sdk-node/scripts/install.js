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
// WEIR_CARGO_PROFILE=dev builds unoptimised, in a fraction of the time (for
// working on the SDK itself; the default, release, is what applications want).
const profile = process.env.WEIR_CARGO_PROFILE ?? 'release'
if (!/^[a-z][a-z0-9_-]*$/.test(profile)) {
  console.error(`weir: WEIR_CARGO_PROFILE=${profile} is not a cargo profile name`)
  process.exit(1)
}
console.error(`weir: building the native addon from source (cargo build --profile ${profile}); this takes a few minutes`)
// The target named explicitly, as `napi build --platform` names it, so both
// share one output directory (and what one built, the other reuses).
const triple = 'x86_64-unknown-linux-gnu'
const build = spawnSync('cargo', ['build', '--profile', profile, '--target', triple, '--manifest-path', manifest], {
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
// cargo writes the dev profile's output under `debug`.
fs.copyFileSync(path.join(target, triple, profile === 'dev' ? 'debug' : profile, 'libweir_node.so'), addon)
