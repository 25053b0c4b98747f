//! A plugin that attacks its host, for the host's tests. It implements the
//! produce-interceptor world on the raw bindings (not the SDK's trait) so it
//! can also break the contract. `mode` setting:
//! - `spin`: loops forever in `on-produce`; `init-spin`: in `init`;
//! - `bomb`: allocates until memory runs out;
//! - `panic`: panics with a recognisable message;
//! - `garbage`: replaces a record but points its spans outside the arena;
//! - `miscount`: returns fewer verdicts than records;
//! - `flood`: replaces every value with 1 MiB;
//! - `refuse`: refuses its configuration;
//! - anything else: accepts everything.

use std::cell::RefCell;

use weir_plugin::hooks::bindings::produce_interceptor::exports::weir::plugin::produce_interceptor::{
    Action, Guest, Verdicts,
};
use weir_plugin::hooks::bindings::produce_interceptor::weir::plugin::types::{
    Batch, ErrorCode, PluginError, PluginInfo, TopicPartition,
};

thread_local! {
    static MODE: RefCell<String> = const { RefCell::new(String::new()) };
    static HOARD: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

struct Hostile;

fn spin() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = std::hint::black_box(counter.wrapping_add(1));
    }
}

impl Guest for Hostile {
    fn init(config: Vec<(String, String)>) -> Result<PluginInfo, PluginError> {
        let mode = config.iter().find(|(key, _)| key == "mode").map(|(_, value)| value.clone()).unwrap_or_default();
        // Installs the SDK's panic hook (panic text to the plugin log).
        let _ = weir_plugin::hooks::init_instance(Vec::new(), |_| Ok(()));
        match mode.as_str() {
            "init-spin" => spin(),
            "refuse" => {
                return Err(PluginError { code: ErrorCode::InvalidConfig, message: "refusing, as asked".to_owned() })
            }
            _ => {}
        }
        MODE.with(|stored| *stored.borrow_mut() = mode);
        Ok(PluginInfo { name: "hostile".to_owned(), version: env!("CARGO_PKG_VERSION").to_owned() })
    }

    fn on_produce(_target: TopicPartition, records: Batch) -> Result<Verdicts, PluginError> {
        let count = records.index.len() / weir_plugin::STRIDE;
        let accept = || Verdicts {
            actions: vec![Action::Accept; count],
            replacements: Batch { base_offset: -1, base_timestamp_ms: 0, arena: Vec::new(), index: Vec::new() },
            reasons: Vec::new(),
        };
        let mode = MODE.with(|mode| mode.borrow().clone());
        match mode.as_str() {
            "spin" => spin(),
            "bomb" => loop {
                HOARD.with(|hoard| hoard.borrow_mut().push(vec![7u8; 1 << 20]));
            },
            "panic" => panic!("hostile plugin panics on a batch of {count}"),
            "garbage" => {
                let mut verdicts = accept();
                verdicts.actions[0] = Action::Replace;
                verdicts.replacements.arena = b"tiny".to_vec();
                verdicts.replacements.index = vec![0, 4, 1_000_000, 64, 0, 0, 0, 0];
                Ok(verdicts)
            }
            "miscount" => {
                let mut verdicts = accept();
                verdicts.actions.pop();
                Ok(verdicts)
            }
            "flood" => {
                let mut verdicts = accept();
                let mut builder = weir_plugin::BatchBuilder::new();
                for action in &mut verdicts.actions {
                    *action = Action::Replace;
                    builder.push(None, Some(&vec![b'x'; 1 << 20]), &[], 0);
                }
                let (arena, index) = builder.into_parts();
                verdicts.replacements =
                    Batch { base_offset: -1, base_timestamp_ms: records.base_timestamp_ms, arena, index };
                Ok(verdicts)
            }
            _ => Ok(accept()),
        }
    }
}

weir_plugin::hooks::bindings::produce_interceptor::export_produce_interceptor!(
    Hostile with_types_in weir_plugin::hooks::bindings::produce_interceptor
);
