#!/usr/bin/env bash
# Builds the plugin SDK and the first-party plugins (plugins/) as WebAssembly
# components into target/plugins/wasm32-wasip2/release/*.wasm — what the
# plugin tests load — after checking their formatting and lints and running the
# SDK's own unit tests on the host. Then the Python and JavaScript example
# plugins (plugins/python, plugins/js) with componentize-py and componentize-js,
# installed into target/plugins/python-venv and plugins/js/node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v rustup >/dev/null && ! rustup target list --installed | grep -q '^wasm32-wasip2$'; then
  rustup target add wasm32-wasip2
fi
export CARGO_TARGET_DIR="$PWD/target/plugins"
manifest=plugins/Cargo.toml
cargo fmt --manifest-path "$manifest" --all -- --check
cargo clippy --manifest-path "$manifest" --locked --target wasm32-wasip2 --release -- -D warnings
cargo test --manifest-path "$manifest" --locked -p weir-plugin --lib
cargo build --manifest-path "$manifest" --locked --target wasm32-wasip2 --release
out="$PWD/target/plugins/wasm32-wasip2/release"

# Python: the example's module beside the guest helper (weir_plugin.py), as
# `weir plugin new --lang python` lays a project out.
venv=target/plugins/python-venv
[ -x "$venv/bin/componentize-py" ] \
  || { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check componentize-py==0.25.1; }
python_plugin() { # hook-world examples|fixtures module output
  "$venv/bin/componentize-py" -d wit/weir-plugin.wit -w "$1" componentize "$3" \
    -p plugins/python -p "plugins/python/$2/$3" -o "$out/$4.wasm" >/dev/null
}
python_plugin consume-interceptor-plugin examples upper py_upper
python_plugin produce-interceptor-plugin fixtures noop py_noop

# JavaScript: componentize-js bundles a file and what it imports beside it, so
# each example is staged next to a copy of the guest helper (weir-plugin.js).
# `-d http fetch-event`: plugins get no wasi:http.
[ -d plugins/js/node_modules/@bytecodealliance/componentize-js ] \
  || (cd plugins/js && npm ci --no-audit --no-fund --loglevel=error)
javascript_plugin() { # hook-world examples|fixtures name output
  local stage=target/plugins/js/$3
  rm -rf "$stage" && mkdir -p "$stage"
  cp plugins/js/weir-plugin.js plugins/js/"$2/$3"/*.js "$stage/"
  node plugins/js/node_modules/@bytecodealliance/componentize-js/src/cli.js --wit wit/weir-plugin.wit \
    --world-name "$1" -d http fetch-event -o "$out/$4.wasm" "$stage/$3.js" >/dev/null
}
javascript_plugin transform-plugin examples reverse js_reverse
javascript_plugin produce-interceptor-plugin fixtures noop js_noop

ls -1 "$out"/*.wasm
