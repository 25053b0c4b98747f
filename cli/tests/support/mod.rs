//! What the CLI's test files share: starting a real `weir serve`.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

/// Starts `weir serve --listen 127.0.0.1:0` with `args` (in `dir`, when given),
/// and waits for the log line saying where it listens. Returns the child, that
/// address, and the rest of its log (keep reading it, or the broker blocks on a
/// full pipe).
pub fn serve(args: &[&OsStr], dir: Option<&Path>) -> (Child, String, Lines<BufReader<ChildStdout>>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command
        .env("RUST_LOG", "info")
        .env_remove("WEIR_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("weir serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("the log is text");
        if let Some((_, address)) = line.split_once("listening address=") {
            return (child, address.trim().to_owned(), lines);
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the broker never said where it listens:\n{}", seen.join("\n"));
}
