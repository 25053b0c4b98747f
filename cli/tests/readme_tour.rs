//! The README's five-minute tour and its plugin examples, run top to bottom as a
//! newcomer types them, so their order and outputs cannot drift from the product.
//!
//! A broker is started in a fresh directory with the default data directory
//! (`./weir-data`), and every command of the sections below runs there through
//! `bash`, with `weir` on the `PATH` and `WEIR_BROKERS` set:
//! - `console` blocks: each `$ ` line (with `\` continuations) is a command; the
//!   lines up to the next one are its expected output, where `…` matches any text
//!   (a line of its own `…`, any lines) and, for `consume`, line order is free
//!   (partitions interleave);
//! - `sh` blocks: every command must succeed, unless its comment says it fails
//!   (`# error: …`); the README's set-up lines (building, starting the broker,
//!   `export`) are skipped — the test did that.
//!
//! Adapted for a test machine, visibly: idle timeouts of `consume` are raised (a
//! loaded machine may take more than a second for a first fetch) and `bench`
//! writes 2,000 records instead of 200,000. The plugin section runs only when the
//! plugins are built (`scripts/build-plugins.sh`, as the test command does).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// One command of the README and what it must print.
#[derive(Debug)]
struct Step {
    command: String,
    /// `None`: any output, as long as the exit status is what `must_fail` says.
    expected: Option<Vec<String>>,
    must_fail: bool,
}

fn readme() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::read_to_string(root.join("README.md")).unwrap()
}

/// The text between `## {title}` and the next `## ` heading.
fn section<'a>(readme: &'a str, title: &str) -> &'a str {
    let start = readme.find(&format!("\n## {title}\n")).unwrap_or_else(|| panic!("README has no section {title}"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |end| end + 3);
    &rest[..end]
}

/// The steps of every `console` and `sh` block in `text`, in order.
fn steps(text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let kind = match line.trim() {
            "```console" => "console",
            "```sh" => "sh",
            _ => continue,
        };
        let block: Vec<&str> = lines.by_ref().take_while(|line| line.trim() != "```").collect();
        match kind {
            "console" => steps.extend(console_steps(&block)),
            _ => steps.extend(sh_steps(&block)),
        }
    }
    steps
}

fn console_steps(block: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in block {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step { command: command.to_owned(), expected: Some(Vec::new()), must_fail: false });
            continued = command.ends_with('\\');
        } else if continued {
            let step = steps.last_mut().expect("a continuation follows a command");
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(step) = steps.last_mut() {
            step.expected.as_mut().expect("console steps expect output").push((*line).to_owned());
        }
    }
    steps
}

fn sh_steps(block: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in block {
        if continued {
            let step = steps.last_mut().expect("a continuation follows a command");
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (command, comment) = match trimmed.split_once(" # ") {
            Some((command, comment)) => (command.trim_end(), comment.trim()),
            None => (trimmed, ""),
        };
        let setup =
            ["cargo ", "./target/release/weir serve", "export "].iter().any(|set_up| command.starts_with(set_up));
        if setup {
            continue;
        }
        continued = command.ends_with('\\');
        steps.push(Step { command: command.to_owned(), expected: None, must_fail: comment.starts_with("error") });
    }
    steps
}

/// The command as the test runs it (see the module docs).
fn adapted(command: &str) -> String {
    command.replace("--timeout-ms 1000", "--timeout-ms 10000").replace("--records 200000", "--records 2000")
}

/// Whether `actual` matches `expected`, where `…` stands for any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let mut parts = expected.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = actual.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (index, part) in parts.iter().enumerate() {
        if index + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(found) => rest = &rest[found + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

fn output_matches(command: &str, expected: &[String], actual: &str) -> bool {
    let mut expected: Vec<&str> = expected.iter().map(String::as_str).filter(|line| !line.is_empty()).collect();
    let mut actual: Vec<&str> = actual.lines().collect();
    if let Some(gap) = expected.iter().position(|line| *line == "…") {
        // A line of its own `…` stands for any lines.
        let (before, after) = (&expected[..gap], &expected[gap + 1..]);
        return actual.len() >= before.len() + after.len()
            && before.iter().zip(&actual).all(|(expected, actual)| line_matches(expected, actual))
            && after.iter().rev().zip(actual.iter().rev()).all(|(expected, actual)| line_matches(expected, actual));
    }
    if expected.len() != actual.len() {
        return false;
    }
    if command.contains("weir consume") {
        expected.sort_unstable();
        actual.sort_unstable();
        // Sorting puts `…` lines anywhere: match each expected line to a distinct actual one.
        let mut unused: Vec<&str> = actual.clone();
        return expected.iter().all(|line| match unused.iter().position(|candidate| line_matches(line, candidate)) {
            Some(index) => {
                unused.remove(index);
                true
            }
            None => false,
        });
    }
    expected.iter().zip(&actual).all(|(expected, actual)| line_matches(expected, actual))
}

/// `weir serve` in `dir` with its defaults (data in `./weir-data`), on a free port.
struct Broker {
    child: Child,
    address: String,
}

impl Broker {
    fn start(dir: &Path) -> Broker {
        let (child, address, lines) = support::serve(&[], Some(dir));
        // Keep reading its log so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Broker { child, address }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_steps(dir: &Path, broker: &Broker, steps: &[Step]) {
    let bin_dir: PathBuf = Path::new(env!("CARGO_BIN_EXE_weir")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    for step in steps {
        let command = adapted(&step.command);
        let output = Command::new("bash")
            .args(["-c", &command])
            .current_dir(dir)
            .env("PATH", &path)
            .env("WEIR_BROKERS", &broker.address)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            !output.status.success(),
            step.must_fail,
            "README: `{command}`\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        if let Some(expected) = &step.expected {
            let expected: Vec<String> =
                expected.iter().map(|line| line.replace("produce 200000 x", "produce 2000 x")).collect();
            let expected = &expected;
            assert!(
                output_matches(&command, expected, &stdout),
                "README: `{command}` printed\n{stdout}\nwhere the README shows\n{}",
                expected.join("\n")
            );
        }
    }
}

#[test]
fn the_readme_tour_runs_as_written() {
    let readme = readme();
    let tour = steps(section(&readme, "A five-minute tour"));
    assert!(tour.len() > 15, "the tour was found: {tour:?}");
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    run_steps(temp.path(), &broker, &tour);

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let plugins = root.join("target/plugins/wasm32-wasip2/release");
    if !plugins.join("route_transform.wasm").exists() {
        eprintln!("plugins not built (scripts/build-plugins.sh): the README's plugin examples were skipped");
        return;
    }
    std::os::unix::fs::symlink(root.join("target"), temp.path().join("target")).unwrap();
    let plugin_steps = steps(section(&readme, "Plugins"));
    assert!(plugin_steps.len() > 10, "the plugin examples were found: {plugin_steps:?}");
    run_steps(temp.path(), &broker, &plugin_steps);
}

#[test]
fn matching_understands_ellipses() {
    assert!(line_matches("produce … x 1024 B, max rate: … MB/s", "produce 2000 x 1024 B, max rate: 12.5 MB/s"));
    assert!(!line_matches("total lag: 2", "total lag: 3"));
    assert!(line_matches("a…", "abc") && line_matches("…c", "abc") && !line_matches("a…d", "abc"));
}
