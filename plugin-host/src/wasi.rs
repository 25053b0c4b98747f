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

use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::PluginLog;

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
