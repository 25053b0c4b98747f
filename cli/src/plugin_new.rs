//! `weir plugin new NAME --lang rust|python|js --hook HOOK`: writes a starter
//! project for one hook of the `weir:plugin` contract that builds as it is
//! (every record accepted or passed on unchanged), with the contract's WIT, the
//! guest helper of its language and a README saying how to build and upload.
//!
//! The helpers are the ones the repository's own plugins build with
//! (`plugins/sdk`, `plugins/python/weir_plugin.py`, `plugins/js/weir-plugin.js`),
//! embedded in the binary, so a starter matches the broker that made it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

const WIT: &str = include_str!("../../wit/weir-plugin.wit");
const PYTHON_HELPER: &str = include_str!("../../plugins/python/weir_plugin.py");
const JS_HELPER: &str = include_str!("../../plugins/js/weir-plugin.js");
const SDK_LIB: &str = include_str!("../../plugins/sdk/src/lib.rs");
const SDK_BATCH: &str = include_str!("../../plugins/sdk/src/batch.rs");
const SDK_HOOKS: &str = include_str!("../../plugins/sdk/src/hooks.rs");

/// The versions of the build tools the starters are tested with.
const COMPONENTIZE_PY: &str = "0.25.1";
const COMPONENTIZE_JS: &str = "0.23.0";
const PREVIEW2_SHIM: &str = "0.17.9";
const WIT_BINDGEN: &str = "0.61";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Hook {
    Partitioner,
    ProduceInterceptor,
    ConsumeInterceptor,
    Transform,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Partitioner => "partitioner",
            Hook::ProduceInterceptor => "produce-interceptor",
            Hook::ConsumeInterceptor => "consume-interceptor",
            Hook::Transform => "transform",
        }
    }

    fn world(self) -> String {
        format!("{}-plugin", self.name())
    }
}

/// Writes the starter into `dir` (which must not exist yet) and answers the
/// files written, relative to it.
pub fn write_starter(name: &str, lang: Lang, hook: Hook, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("plugin name {name:?}: use letters, digits, - and _ (it names the package and the .wasm)");
    }
    if dir.exists() {
        bail!("{} already exists: choose another --dir or remove it", dir.display());
    }
    let files = match lang {
        Lang::Rust => rust(name, hook),
        Lang::Python => python(name, hook),
        Lang::Js => js(name, hook),
    };
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(files.into_iter().map(|(path, _)| PathBuf::from(path)).collect())
}

fn readme(name: &str, hook: Hook, build: &str, wasm: &str) -> String {
    format!(
        "# {name}\n\n\
         A Weir {hook} plugin: a WebAssembly component of the `weir:plugin` contract\n\
         (`wit/weir-plugin.wit`, whose comments say what each call and verdict does).\n\
         As written it changes nothing; put your logic where the comments say.\n\n\
         Build:\n\n```sh\n{build}\n```\n\n\
         Upload and use it:\n\n```sh\n\
         weir plugin upload {wasm} --name {name}\n{use_it}\n```\n\n\
         Settings given at attach or deploy (`--config key=value`) reach `init`, and the\n\
         plugin's environment. The host takes the keys starting with `weir.` for itself:\n\
         `weir.call_deadline_ms` (CPU time per call, default 10), `weir.init_deadline_ms`\n\
         and `weir.memory_bytes_max` (default 64 MiB) set this plugin's limits. Its log:\n\
         `weir plugin logs {name}`.\n",
        hook = hook.name(),
        use_it = match hook {
            Hook::Partitioner => format!("weir topic set-partitioner TOPIC --plugin {name}"),
            Hook::ProduceInterceptor | Hook::ConsumeInterceptor =>
                format!("weir topic add-interceptor TOPIC --plugin {name}"),
            Hook::Transform =>
                format!("weir transform deploy {name} --plugin {name} --input IN_TOPIC --output OUT_TOPIC"),
        },
    )
}

fn rust(name: &str, hook: Hook) -> Vec<(String, String)> {
    let crate_name = name.replace('-', "_");
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         [lib]\ncrate-type = [\"cdylib\"]\n\n\
         [dependencies]\nweir-plugin = {{ path = \"weir-plugin\" }}\n\n\
         [profile.release]\nopt-level = 3\nlto = true\ncodegen-units = 1\npanic = \"abort\"\nstrip = true\n\n\
         [workspace]\nmembers = [\".\", \"weir-plugin\"]\n"
    );
    let sdk_manifest = format!(
        "[package]\nname = \"weir-plugin\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\
         description = \"The Weir plugin SDK for Rust (a copy: `weir plugin new` wrote it)\"\n\n\
         [dependencies]\nwit-bindgen = {{ version = \"{WIT_BINDGEN}\", default-features = false, \
         features = [\"macros\", \"realloc\"] }}\n"
    );
    let (imports, body) = match hook {
        Hook::Partitioner => (
            "Config, Error, Partitioner, Record",
            "impl Partitioner for Plugin {\n    \
                 fn init(_config: &Config) -> Result<Self, Error> {\n        Ok(Plugin)\n    }\n\n    \
                 /// Some(partition) to choose, None for Kafka's murmur2 of the key.\n    \
                 fn partition(&mut self, _topic: &str, _partition_count: u32, _record: &Record<'_>) -> Result<Option<u32>, Error> {\n        \
                     Ok(None)\n    }\n}\n\nweir_plugin::partitioner!(Plugin);\n",
        ),
        Hook::ProduceInterceptor => (
            "Config, Error, ProduceInterceptor, ProduceVerdict, Record, TopicPartition",
            "impl ProduceInterceptor for Plugin {\n    \
                 fn init(_config: &Config) -> Result<Self, Error> {\n        Ok(Plugin)\n    }\n\n    \
                 /// Accept, ReplaceValue(..) or Reject(reason) (which refuses the whole batch).\n    \
                 fn on_produce(&mut self, _target: &TopicPartition, _record: &Record<'_>) -> Result<ProduceVerdict, Error> {\n        \
                     Ok(ProduceVerdict::Accept)\n    }\n}\n\nweir_plugin::produce_interceptor!(Plugin);\n",
        ),
        Hook::ConsumeInterceptor => (
            "Config, ConsumeInterceptor, ConsumeVerdict, Error, Record, TopicPartition",
            "impl ConsumeInterceptor for Plugin {\n    \
                 fn init(_config: &Config) -> Result<Self, Error> {\n        Ok(Plugin)\n    }\n\n    \
                 /// Accept, ReplaceValue(..) or Drop (the consumer sees an offset gap).\n    \
                 fn on_consume(\n        &mut self,\n        _source: &TopicPartition,\n        _group: Option<&str>,\n        _record: &Record<'_>,\n    ) -> Result<ConsumeVerdict, Error> {\n        \
                     Ok(ConsumeVerdict::Accept)\n    }\n}\n\nweir_plugin::consume_interceptor!(Plugin);\n",
        ),
        Hook::Transform => (
            "Config, Error, Output, Record, TopicPartition, Transform",
            "impl Transform for Plugin {\n    \
                 fn init(_config: &Config) -> Result<Self, Error> {\n        Ok(Plugin)\n    }\n\n    \
                 /// Emit zero or more records per input record, each to an output topic (0..8).\n    \
                 fn process(&mut self, _input: &TopicPartition, record: &Record<'_>, output: &mut Output) -> Result<(), Error> {\n        \
                     output.forward(0, record);\n        Ok(())\n    }\n}\n\nweir_plugin::transform!(Plugin);\n",
        ),
    };
    let lib = format!(
        "//! {name}: a Weir {hook} plugin.\n\nuse weir_plugin::{{{imports}}};\n\nstruct Plugin;\n\n{body}",
        hook = hook.name()
    );
    let build = "rustup target add wasm32-wasip2\ncargo build --target wasm32-wasip2 --release";
    let wasm = format!("target/wasm32-wasip2/release/{crate_name}.wasm");
    vec![
        ("Cargo.toml".to_owned(), manifest),
        ("src/lib.rs".to_owned(), lib),
        ("README.md".to_owned(), readme(name, hook, build, &wasm)),
        ("wit/weir-plugin.wit".to_owned(), WIT.to_owned()),
        ("weir-plugin/Cargo.toml".to_owned(), sdk_manifest),
        // The SDK reads the WIT from the project's wit/ (the repository's is two levels up).
        ("weir-plugin/src/lib.rs".to_owned(), SDK_LIB.to_owned()),
        ("weir-plugin/src/batch.rs".to_owned(), SDK_BATCH.to_owned()),
        ("weir-plugin/src/hooks.rs".to_owned(), SDK_HOOKS.replace("path: \"../../wit\"", "path: \"../wit\"")),
    ]
}

fn python(name: &str, hook: Hook) -> Vec<(String, String)> {
    let (class, imports, body) = match hook {
        Hook::Partitioner => (
            "Partitioner",
            "",
            "    def partition(self, topic, partition_count, records):\n        \
                 # One entry per record: a partition, or weir_plugin.NULL for Kafka's murmur2 of the key.\n        \
                 return [weir_plugin.NULL for _ in weir_plugin.records(records)]\n",
        ),
        Hook::ProduceInterceptor => (
            "ProduceInterceptor",
            "from wit_world.exports.produce_interceptor import Action, Verdicts\n",
            "    def on_produce(self, target, records):\n        \
                 # One action per record: ACCEPT, REPLACE (push the new record to `replacements`)\n        \
                 # or REJECT (append a reason: the whole batch is refused).\n        \
                 actions = [Action.ACCEPT for _ in weir_plugin.records(records)]\n        \
                 replacements = weir_plugin.BatchBuilder()\n        \
                 return Verdicts(actions, replacements.build(records), [])\n",
        ),
        Hook::ConsumeInterceptor => (
            "ConsumeInterceptor",
            "from wit_world.exports.consume_interceptor import Action, Verdicts\n",
            "    def on_consume(self, source, group, records):\n        \
                 # One action per record: ACCEPT, REPLACE (push the new record to `replacements`)\n        \
                 # or DROP (the consumer sees an offset gap).\n        \
                 actions = [Action.ACCEPT for _ in weir_plugin.records(records)]\n        \
                 replacements = weir_plugin.BatchBuilder()\n        \
                 return Verdicts(actions, replacements.build(records))\n",
        ),
        Hook::Transform => (
            "Transform",
            "from wit_world.exports.transform import Output\n",
            "    def process(self, input, records):\n        \
                 # Zero or more records per input record, each to an output topic (0..8).\n        \
                 output = weir_plugin.BatchBuilder()\n        \
                 for record in weir_plugin.records(records):\n            \
                     output.push_with_value(record, record.value)\n        \
                 return Output(output.build(records), bytes(output.count))\n",
        ),
    };
    let app = format!(
        "\"\"\"{name}: a Weir {hook} plugin (componentize-py).\n\n\
         State lives in module globals: the object a call runs on is not the one\n\
         `init` ran on.\n\"\"\"\n\n\
         from wit_world import exports\n{imports}\
         from wit_world.imports import host\n\
         from wit_world.imports.types import PluginInfo\n\n\
         import weir_plugin\n\n\n\
         class {class}(exports.{class}):\n    \
             def init(self, config):\n        \
                 # config: [(key, value)]; raise weir_plugin.fail(ErrorCode.INVALID_CONFIG, ...) to refuse it.\n        \
                 host.log(host.Level.INFO, f\"{name}: started with {{config}}\")\n        \
                 return PluginInfo(name=\"{name}\", version=\"0.1.0\")\n\n{body}",
        hook = hook.name()
    );
    let build = format!(
        "python3 -m venv .venv && .venv/bin/pip install componentize-py=={COMPONENTIZE_PY}\n\
         .venv/bin/componentize-py -d wit -w {world} componentize app -o {name}.wasm",
        world = hook.world()
    );
    vec![
        ("app.py".to_owned(), app),
        ("weir_plugin.py".to_owned(), PYTHON_HELPER.to_owned()),
        ("README.md".to_owned(), readme(name, hook, &build, &format!("{name}.wasm"))),
        ("wit/weir-plugin.wit".to_owned(), WIT.to_owned()),
    ]
}

fn js(name: &str, hook: Hook) -> Vec<(String, String)> {
    let (export, imports, body) = match hook {
        Hook::Partitioner => (
            "partitioner",
            "NULL, records",
            "  // One entry per record: a partition, or NULL for Kafka's murmur2 of the key.\n  \
               partition(topic, partitionCount, batch) {\n    \
                 return Uint32Array.from(records(batch), () => NULL);\n  },\n",
        ),
        Hook::ProduceInterceptor => (
            "produceInterceptor",
            "BatchBuilder, records",
            "  // One action per record: 'accept', 'replace' (push the new record to `replacements`)\n  \
               // or 'reject' (add a reason: the whole batch is refused).\n  \
               onProduce(target, batch) {\n    \
                 const actions = Array.from(records(batch), () => 'accept');\n    \
                 return { actions, replacements: new BatchBuilder().build(batch), reasons: [] };\n  },\n",
        ),
        Hook::ConsumeInterceptor => (
            "consumeInterceptor",
            "BatchBuilder, records",
            "  // One action per record: 'accept', 'replace' (push the new record to `replacements`)\n  \
               // or 'drop' (the consumer sees an offset gap).\n  \
               onConsume(source, group, batch) {\n    \
                 const actions = Array.from(records(batch), () => 'accept');\n    \
                 return { actions, replacements: new BatchBuilder().build(batch) };\n  },\n",
        ),
        Hook::Transform => (
            "transform",
            "BatchBuilder, records",
            "  // Zero or more records per input record, each to an output topic (0..8).\n  \
               process(input, batch) {\n    \
                 const out = new BatchBuilder();\n    \
                 for (const record of records(batch)) out.pushWithValue(record, record.value);\n    \
                 return { records: out.build(batch), topicIndex: new Uint8Array(out.count) };\n  },\n",
        ),
    };
    let source = format!(
        "// {name}: a Weir {hook} plugin (componentize-js).\n\n\
         import {{ log }} from 'weir:plugin/host@0.1.0';\n\
         import {{ {imports} }} from './weir-plugin.js';\n\n\
         export const {export} = {{\n  \
           // config: [key, value][]; throw fail('invalid-config', ...) to refuse it.\n  \
           init(config) {{\n    \
             log('info', `{name}: started with ${{JSON.stringify(config)}}`);\n    \
             return {{ name: '{name}', version: '0.1.0' }};\n  }},\n\n{body}}};\n",
        hook = hook.name()
    );
    let package = format!(
        "{{\n  \"name\": \"{name}\",\n  \"private\": true,\n  \"type\": \"module\",\n  \
         \"scripts\": {{\n    \"build\": \"componentize-js --wit wit --world-name {world} -d http fetch-event -o {name}.wasm plugin.js\"\n  }},\n  \
         \"devDependencies\": {{\n    \"@bytecodealliance/componentize-js\": \"{COMPONENTIZE_JS}\",\n    \
         \"@bytecodealliance/preview2-shim\": \"{PREVIEW2_SHIM}\"\n  }}\n}}\n",
        world = hook.world()
    );
    vec![
        ("plugin.js".to_owned(), source),
        ("weir-plugin.js".to_owned(), JS_HELPER.to_owned()),
        ("package.json".to_owned(), package),
        ("README.md".to_owned(), readme(name, hook, "npm install\nnpm run build", &format!("{name}.wasm"))),
        ("wit/weir-plugin.wit".to_owned(), WIT.to_owned()),
    ]
}
