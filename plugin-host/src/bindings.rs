//! Host bindings of the four worlds in `wit/weir-plugin.wit`. The first
//! generates the shared `types` and `host` interfaces; the others reuse them,
//! so one Rust type stands for a batch whatever the world.

pub mod partitioner {
    wasmtime::component::bindgen!({
        world: "partitioner-plugin",
        path: "../wit",
    });
}

pub mod produce_interceptor {
    wasmtime::component::bindgen!({
        world: "produce-interceptor-plugin",
        path: "../wit",
        with: {
            "weir:plugin/types": super::partitioner::weir::plugin::types,
            "weir:plugin/host": super::partitioner::weir::plugin::host,
        },
    });
}

pub mod consume_interceptor {
    wasmtime::component::bindgen!({
        world: "consume-interceptor-plugin",
        path: "../wit",
        with: {
            "weir:plugin/types": super::partitioner::weir::plugin::types,
            "weir:plugin/host": super::partitioner::weir::plugin::host,
        },
    });
}

pub mod transform {
    wasmtime::component::bindgen!({
        world: "transform-plugin",
        path: "../wit",
        with: {
            "weir:plugin/types": super::partitioner::weir::plugin::types,
            "weir:plugin/host": super::partitioner::weir::plugin::host,
        },
    });
}

pub use partitioner::weir::plugin::host;
pub use partitioner::weir::plugin::types;
