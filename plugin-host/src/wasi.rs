//! The WASI 0.2 context a plugin runs in: enough of a system for the
//! interpreters componentize-py and componentize-js embed, and nothing that
//! reaches outside the instance.
//!
//! - No files (no preopened directories), no sockets (TCP, UDP and name lookup
//!   all refused), stdin closed, no arguments.
//! - The environment holds exactly the attachment's or deployment's
//!   configuration pairs (the same ones `init` receives), nothing of the host.
//! - Clocks and randomness are the host's, except the insecure seed (what
//!   hash tables seed from), fixed so that a plugin's hashing is the same in
//!   every instance.
//! - stdout and stderr go to the plugin's log, a line per entry (`info` and
//!   `warn`), bounded like every other log entry.
//! - Nothing waits: `wasi:io/poll` answers every pollable ready at once (a
//!   sleep returns at once; a plugin that spins on the clock runs out of its
//!   CPU budget), and the blocking stream calls are defined again without
//!   wasmtime-wasi's detour through a Tokio runtime (`in_tokio`), which would
//!   block a plugin past every deadline (the epoch only interrupts running
//!   wasm) and panics on a Tokio worker thread — where producers run
//!   partitioners.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi_io::bindings::wasi::io::streams::StreamError as WitStreamError;
use wasmtime_wasi_io::poll::DynPollable;
use wasmtime_wasi_io::streams::{DynInputStream, DynOutputStream};

use crate::{PluginLog, State};

/// The WASI 0.2 version wasmtime-wasi 48 defines (imports of any 0.2.x match it).
const IO_POLL: &str = "wasi:io/poll@0.2.12";
const IO_STREAMS: &str = "wasi:io/streams@0.2.12";

/// Adds WASI 0.2 to `linker`: wasmtime-wasi's synchronous bindings, with
/// every call that could wait defined again so that none does.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    linker.allow_shadowing(true);
    let mut poll = linker.instance(IO_POLL)?;
    poll.func_wrap("poll", |_, (pollables,): (Vec<Resource<DynPollable>>,)| {
        Ok(((0..pollables.len() as u32).collect::<Vec<u32>>(),))
    })?;
    poll.func_wrap("[method]pollable.ready", |_, (_,): (Resource<DynPollable>,)| Ok((true,)))?;
    poll.func_wrap("[method]pollable.block", |_, (_,): (Resource<DynPollable>,)| Ok(()))?;

    let mut streams = linker.instance(IO_STREAMS)?;
    // Output streams are stdout and stderr (see `LogStream`): writes never wait.
    streams.resource("output-stream", ResourceType::host::<DynOutputStream>(), |mut store, rep| {
        store.data_mut().table.delete(Resource::<DynOutputStream>::new_own(rep))?;
        Ok(())
    })?;
    streams.func_wrap(
        "[method]output-stream.blocking-write-and-flush",
        |mut store, (stream, bytes): (Resource<DynOutputStream>, Vec<u8>)| {
            let stream = store.data_mut().table.get_mut(&stream)?;
            Ok((written(stream.write(bytes.into()))?,))
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-write-zeroes-and-flush",
        |mut store, (stream, len): (Resource<DynOutputStream>, u64)| {
            let stream = store.data_mut().table.get_mut(&stream)?;
            Ok((written(stream.write_zeroes(len as usize))?,))
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-flush",
        |mut store, (stream,): (Resource<DynOutputStream>,)| {
            let stream = store.data_mut().table.get_mut(&stream)?;
            Ok((written(stream.flush())?,))
        },
    )?;
    // The only input stream is stdin, closed.
    streams.resource("input-stream", ResourceType::host::<DynInputStream>(), |mut store, rep| {
        store.data_mut().table.delete(Resource::<DynInputStream>::new_own(rep))?;
        Ok(())
    })?;
    streams.func_wrap("[method]input-stream.blocking-read", |_, (_, _): (Resource<DynInputStream>, u64)| {
        Ok((Err::<Vec<u8>, _>(WitStreamError::Closed),))
    })?;
    streams.func_wrap("[method]input-stream.blocking-skip", |_, (_, _): (Resource<DynInputStream>, u64)| {
        Ok((Err::<u64, _>(WitStreamError::Closed),))
    })?;
    streams.func_wrap(
        "[method]output-stream.blocking-splice",
        |_, (_, _, _): (Resource<DynOutputStream>, Resource<DynInputStream>, u64)| {
            Ok((Err::<u64, _>(WitStreamError::Closed),))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// A write's outcome as the contract's `stream-error` (a trap stays a trap).
fn written(outcome: wasmtime_wasi_io::streams::StreamResult<()>) -> wasmtime::Result<Result<(), WitStreamError>> {
    match outcome {
        Ok(()) => Ok(Ok(())),
        Err(wasmtime_wasi_io::streams::StreamError::Trap(error)) => Err(error),
        Err(_) => Ok(Err(WitStreamError::Closed)),
    }
}

/// The fixed `wasi:random/insecure-seed` value.
const INSECURE_SEED: u128 = 0x5765_6972_u128 << 64 | 0x706c_7567;

/// Bytes of output a stream takes before its line is cut into an entry
/// anyway (a plugin printing without newlines still ends up in the log).
const LINE_BYTES_MAX: usize = 4096;

/// A plugin instance's WASI context.
pub(crate) fn context(config: &[(String, String)], log: &Arc<PluginLog>) -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    builder
        .envs(config)
        .stdout(LogOutput { log: log.clone(), level: "info" })
        .stderr(LogOutput { log: log.clone(), level: "warn" })
        .insecure_random_seed(INSECURE_SEED)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    builder.build()
}

/// Resources (streams, pollables) one instance may hold at once: a plugin
/// that makes them and never drops them traps instead of growing the host.
const RESOURCES_MAX: usize = 4096;

/// An instance's resource table.
pub(crate) fn table() -> wasmtime::component::ResourceTable {
    let mut table = wasmtime::component::ResourceTable::new();
    table.set_max_capacity(RESOURCES_MAX);
    table
}

/// stdout or stderr of a plugin: lines into its log.
struct LogOutput {
    log: Arc<PluginLog>,
    level: &'static str,
}

impl IsTerminal for LogOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(LogStream { log: self.log.clone(), level: self.level, line: Vec::new() })
    }

    /// Only WASI 0.3 streams use this, and plugins get WASI 0.2: discard.
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(tokio::io::sink())
    }
}

struct LogStream {
    log: Arc<PluginLog>,
    level: &'static str,
    /// The unfinished line.
    line: Vec<u8>,
}

impl LogStream {
    fn push_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if !text.is_empty() {
            self.log.push(self.level, text.to_owned());
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    /// Always ready: writes go to memory.
    async fn ready(&mut self) {}
}

impl OutputStream for LogStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        for chunk in bytes.split_inclusive(|byte| *byte == b'\n') {
            self.line.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") || self.line.len() >= LINE_BYTES_MAX {
                self.push_line();
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(LINE_BYTES_MAX)
    }
}

impl Drop for LogStream {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.push_line();
        }
    }
}
