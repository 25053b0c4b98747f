//! The results of one harness run: every measurement (JSON, the source of truth)
//! and the Markdown report made from it — medians over rounds, Weir ÷ peer and
//! Weir ÷ machine-limit ratios. `weir-bench report FILE.json` re-renders the
//! Markdown and plots from the JSON alone.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::driver::Durability;
use crate::limits::Limits;
use crate::workload::{Headline, Measurement, Settings, WorkloadId};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// `YYYY-MM-DD`, UTC.
    pub date: String,
    /// `full` (every default workload), `partial` (the workloads named) or `smoke`.
    pub mode: String,
    pub command: String,
    pub machine: Machine,
    /// Which CPUs ran the servers and which the load generator.
    pub pinning: String,
    pub limits: Limits,
    /// System → version string.
    pub versions: BTreeMap<String, String>,
    pub settings: Settings,
    pub rounds: u32,
    pub runs: Vec<Run>,
    /// Workloads left out, and why.
    pub not_run: Vec<(WorkloadId, String)>,
    /// What the reader must know about how a workload ran (shown above its tables).
    #[serde(default)]
    pub workload_notes: Vec<(WorkloadId, String)>,
}

/// The label suffix of a replicated-workload row whose topic has one replica
/// (`weir rf=1`: the same cluster, only the replication factor differs).
pub const RF1_SUFFIX: &str = " rf=1";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub memory_gib: f64,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|line| line.strip_prefix("model name").and_then(|rest| rest.split_once(':')))
            .map(|(_, model)| model.trim().to_owned())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find_map(|line| line.strip_prefix("MemTotal:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0.0);
        // SAFETY: sysconf has no preconditions. (Not available_parallelism: the
        // harness pins itself, which that would report.)
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        Machine {
            cpus,
            cpu_model,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned(),
            memory_gib: memory_kib / (1024.0 * 1024.0),
        }
    }
}

/// One workload at one durability against one system, in one round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub round: u32,
    pub workload: WorkloadId,
    pub durability: Durability,
    /// `weir`, `nats`, `kafka`, a Weir variant such as `weir + no-op interceptor`,
    /// or a replication-factor-1 row of the replicated workload (`weir rf=1`).
    pub system: String,
    pub measurement: Option<Measurement>,
    pub error: Option<String>,
}

/// Medians over the rounds of one (workload, durability, system).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub rounds: usize,
    pub mb_per_second: f64,
    pub mb_per_second_min: f64,
    pub mb_per_second_max: f64,
    pub records_per_second: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub cpu_seconds_per_gb: f64,
    pub generator_cpu_seconds_per_gb: f64,
    pub peak_rss_mib: f64,
    /// Some round did not keep up with the fixed rate: no ratio from it.
    pub overloaded: bool,
    pub notes: Vec<String>,
}

pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

pub type Key = (WorkloadId, Durability, String);

impl Report {
    /// The order systems appear in: Weir first, then its variants, then peers.
    pub fn systems(&self) -> Vec<String> {
        let mut systems: Vec<String> = Vec::new();
        for run in &self.runs {
            if !systems.contains(&run.system) {
                systems.push(run.system.clone());
            }
        }
        systems.sort_by_key(|system| (!system.starts_with("weir"), system != "weir", system.clone()));
        systems
    }

    pub fn summaries(&self) -> BTreeMap<Key, Summary> {
        let mut grouped: BTreeMap<Key, Vec<&Run>> = BTreeMap::new();
        for run in &self.runs {
            grouped.entry((run.workload, run.durability, run.system.clone())).or_default().push(run);
        }
        grouped.into_iter().map(|(key, runs)| (key, summarize(&runs))).collect()
    }
}

fn summarize(runs: &[&Run]) -> Summary {
    let measured: Vec<&Measurement> = runs.iter().filter_map(|run| run.measurement.as_ref()).collect();
    let collect = |field: fn(&Measurement) -> f64| -> Vec<f64> { measured.iter().map(|m| field(m)).collect() };
    let latency = |field: fn(&crate::workload::Percentiles) -> f64| -> Option<f64> {
        let mut values: Vec<f64> = measured.iter().filter_map(|m| m.latency_us.as_ref().map(field)).collect();
        (!values.is_empty()).then(|| median(&mut values))
    };
    let throughputs = collect(|m| m.mb_per_second);
    let notes: Vec<String> = runs
        .iter()
        .filter_map(|run| {
            let note = run.error.as_ref().or(run.measurement.as_ref().and_then(|m| m.note.as_ref()))?;
            Some(format!("round {}: {note}", run.round))
        })
        .collect();
    Summary {
        rounds: measured.len(),
        mb_per_second: median(&mut throughputs.clone()),
        mb_per_second_min: throughputs.iter().copied().fold(f64::INFINITY, f64::min),
        mb_per_second_max: throughputs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        records_per_second: median(&mut collect(|m| m.records_per_second)),
        p50_us: latency(|p| p.p50),
        p99_us: latency(|p| p.p99),
        p999_us: latency(|p| p.p999),
        cpu_seconds_per_gb: median(&mut collect(|m| m.cpu_seconds_per_gb)),
        generator_cpu_seconds_per_gb: median(&mut collect(|m| m.generator_cpu_seconds_per_gb)),
        overloaded: measured.iter().any(|m| m.overloaded),
        peak_rss_mib: collect(|m| m.server_peak_rss_bytes as f64 / (1024.0 * 1024.0)).into_iter().fold(0.0, f64::max),
        notes,
    }
}

impl Summary {
    pub fn headline(&self, headline: Headline) -> Option<f64> {
        match headline {
            Headline::Throughput => (self.rounds > 0).then_some(self.mb_per_second),
            Headline::LatencyP50 => self.p50_us,
        }
    }
}

fn figure(value: f64) -> String {
    if !value.is_finite() {
        "–".to_owned()
    } else if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn micros(value: Option<f64>) -> String {
    match value {
        None => "–".to_owned(),
        Some(us) if us >= 10_000.0 => format!("{:.0} ms", us / 1000.0),
        Some(us) if us >= 1000.0 => format!("{:.2} ms", us / 1000.0),
        Some(us) => format!("{us:.0} µs"),
    }
}

/// A ratio with two decimals, or as a fraction when that would print 0.0x.
fn ratio_text(ratio: f64) -> String {
    if ratio > 0.0 && ratio < 0.095 {
        format!("1/{:.0}", 1.0 / ratio)
    } else {
        format!("{ratio:.2}")
    }
}

/// Who leads, for a Weir ÷ peer ratio of `headline`.
fn verdict(ratio: f64, headline: Headline) -> &'static str {
    let weir_better = match headline {
        Headline::Throughput => ratio > 1.0,
        Headline::LatencyP50 => ratio < 1.0,
    };
    let close = (ratio - 1.0).abs() < 0.05;
    match (close, weir_better) {
        (true, _) => "even (within 5%)",
        (false, true) => "Weir leads",
        (false, false) => "Weir trails",
    }
}

/// What an RF=3 ÷ RF=1 throughput ratio says.
fn replication_verdict(ratio: f64) -> String {
    if ratio >= 1.0 {
        "RF=3 as fast as RF=1 or faster".to_owned()
    } else {
        format!("RF=3 keeps {:.0}% of RF=1's throughput", ratio * 100.0)
    }
}

/// The ratio lines of one (workload, durability): Weir ÷ each other system; a
/// Weir variant ÷ plain Weir; and for the replicated workload each system's
/// RF=3 ÷ its RF=1 on the same cluster.
pub fn ratios(
    report: &Report,
    summaries: &BTreeMap<Key, Summary>,
    workload: WorkloadId,
    durability: Durability,
) -> Vec<(String, f64, String)> {
    let headline = workload.headline();
    // A system that did not keep up with a fixed rate has no latency *at* that rate.
    let get = |system: &str| {
        summaries
            .get(&(workload, durability, system.to_owned()))
            .filter(|summary| !summary.overloaded)
            .and_then(|summary| summary.headline(headline))
    };
    let mut lines = Vec::new();
    let weir = get("weir");
    for system in report.systems() {
        if system == "weir" {
            continue;
        }
        let Some(other) = get(&system) else { continue };
        if let Some(base) = system.strip_suffix(RF1_SUFFIX) {
            if let Some(replicated) = get(base) {
                let ratio = replicated / other;
                lines.push((format!("{base} RF=3 ÷ {system}"), ratio, replication_verdict(ratio)));
            }
            continue;
        }
        let Some(weir) = weir else { continue };
        // For a Weir variant, the ratio is variant ÷ plain Weir.
        let (label, ratio) = if system.starts_with("weir") {
            (format!("{system} ÷ weir"), other / weir)
        } else {
            (format!("weir ÷ {system}"), weir / other)
        };
        lines.push((label, ratio, verdict(ratio, headline).to_owned()));
    }
    // Weir ÷ peers first, then the replication-factor lines.
    lines.sort_by_key(|(label, _, _)| label.contains("RF=3"));
    lines
}

/// Weir ÷ machine limit, for the workloads that have a natural ceiling.
pub fn limit_ratios(report: &Report, summaries: &BTreeMap<Key, Summary>) -> Vec<(String, f64)> {
    let limits = &report.limits;
    let weir = |workload, durability| summaries.get(&(workload, durability, "weir".to_owned()));
    let mut lines = Vec::new();
    let mut push = |label: &str, value: Option<f64>, limit: f64| {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            if limit > 0.0 {
                lines.push((label.to_owned(), value / limit));
            }
        }
    };
    use Durability::{Fsync, PageCache};
    use WorkloadId::*;
    let mb = |workload, durability| weir(workload, durability).filter(|s| s.rounds > 0).map(|s| s.mb_per_second);
    push("max ingest, page cache ÷ loopback TCP stream", mb(MaxIngest, PageCache), limits.loopback_mb_per_second);
    push(
        "max ingest, page cache ÷ buffered write + fsync",
        mb(MaxIngest, PageCache),
        limits.buffered_write_then_fsync_mb_per_second,
    );
    push("max ingest, fsync ÷ fdatasync per 256 KiB write", mb(MaxIngest, Fsync), limits.fdatasync_256k_mb_per_second);
    push(
        "durable ingest (8 producers) ÷ fdatasync per 256 KiB write",
        mb(DurableIngest, Fsync),
        limits.fdatasync_256k_mb_per_second,
    );
    push("small records, page cache ÷ loopback TCP stream", mb(SmallRecords, PageCache), limits.loopback_mb_per_second);
    push("catch-up read ÷ loopback TCP stream", mb(CatchUp, PageCache), limits.loopback_mb_per_second);
    let p50 = |workload, durability| weir(workload, durability).and_then(|s| s.p50_us);
    push(
        "round trip p50, page cache ÷ loopback round trip p50",
        p50(RoundTrip, PageCache),
        limits.loopback_round_trip_p50_us,
    );
    push("round trip p50, fsync ÷ one 4 KiB write + fdatasync p50", p50(RoundTrip, Fsync), limits.fdatasync_4k_p50_us);
    lines
}

pub fn render_markdown(report: &Report, plot_files: &[String]) -> String {
    let summaries = report.summaries();
    let mut out = String::new();
    let _ = writeln!(out, "# Weir vs NATS JetStream vs Apache Kafka — {} ({} run)\n", report.date, report.mode);
    let _ = writeln!(
        out,
        "Produced by `{}`: every system on the same machine in the same run, workloads interleaved \
         (system order rotates each round), {} round(s); figures are medians over rounds, ranges in \
         brackets. Measurement window {:.1} s after {:.1} s of warm-up; at most {} unacknowledged \
         per max-rate workload, shared by its producers.\n",
        report.command,
        report.rounds,
        report.settings.duration.as_secs_f64(),
        report.settings.warmup.as_secs_f64(),
        in_flight(&report.settings)
    );
    let machine = &report.machine;
    let _ = writeln!(
        out,
        "Machine: {} CPU(s), {}, {:.0} GiB, Linux {}. Pinning: {}.\n",
        machine.cpus, machine.cpu_model, machine.memory_gib, machine.kernel, report.pinning
    );
    let _ = writeln!(
        out,
        "Versions: {}.\n",
        report.versions.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    );
    out.push_str(DURABILITY_NOTE);
    render_limits(&mut out, &report.limits);
    for workload in WorkloadId::ALL {
        render_workload(&mut out, report, &summaries, workload);
    }
    let _ = writeln!(out, "## Weir ÷ machine limit\n");
    let _ = writeln!(out, "| figure | ratio |\n|---|---|");
    for (label, ratio) in limit_ratios(report, &summaries) {
        let _ = writeln!(out, "| {label} | {ratio:.3} |");
    }
    out.push('\n');
    if !plot_files.is_empty() {
        let _ = writeln!(out, "## Plots\n");
        for file in plot_files {
            let _ = writeln!(out, "![{file}]({file})\n");
        }
    }
    out
}

/// What a max-rate workload keeps in flight, in words.
fn in_flight(settings: &Settings) -> String {
    match settings.inflight_max {
        Some(records) => format!("{records} records"),
        None => {
            let records = |bytes: usize| settings.records_in_flight(bytes);
            let total = settings.inflight_bytes_max;
            let total = match total % (1 << 20) {
                0 => format!("{} MiB", total >> 20),
                _ => format!("{total} bytes"),
            };
            format!("{total} of records ({} of 1 KiB, {} of 100 B)", records(1024), records(100))
        }
    }
}

const DURABILITY_NOTE: &str = "Durability is matched and labelled on every row: **page cache** = acknowledged once the \
write reached the OS (Weir `flush.policy=interval`, Kafka's default, NATS's default `sync_interval` of 2 min); \
**fsync** = acknowledged after fdatasync (Weir `flush.policy=always` with group commit, Kafka topic \
`flush.messages=1`, a NATS server with `sync_interval: always`). Producers: Weir and Kafka `acks=1` without \
idempotence for page cache, `acks=all` with idempotence for fsync (one broker: all = the leader), linger 5 ms \
(0 at a fixed rate and for round trips), 1 MiB batches, no compression; NATS publishes asynchronously and awaits \
each PubAck. Requests in flight: Weir one per partition, Kafka 5 per connection (the Java client's default), NATS up to \
the records in flight. Server CPU is the server process's user + system time inside the measurement window per GB moved; load generator CPU \
is the harness process's (the system's client library plus the harness) in the same window. Peak RSS is the server's \
highest resident set over the rounds (Kafka's includes the 1 GiB heap it is started with, `-Xms1g`). At a fixed rate a \
system that does not keep up is marked and gets no ratio (its latency is queueing). The machine limits are measured \
before pinning, with both CPUs.\n\n";

fn render_limits(out: &mut String, limits: &Limits) {
    let _ = writeln!(out, "## Machine limits (measured at the start of this run)\n");
    let _ = writeln!(out, "| resource | measured |\n|---|---|");
    let rows = [
        ("sequential buffered write then fsync", format!("{:.0} MB/s", limits.buffered_write_then_fsync_mb_per_second)),
        ("direct-I/O sequential write", format!("{:.0} MB/s", limits.direct_write_mb_per_second)),
        (
            "fdatasync after each 4 KiB write",
            format!("{:.0} /s (p50 {})", limits.fdatasync_4k_per_second, micros(Some(limits.fdatasync_4k_p50_us))),
        ),
        ("fdatasync after each 256 KiB write", format!("{:.0} MB/s", limits.fdatasync_256k_mb_per_second)),
        ("memcpy", format!("{:.0} MB/s", limits.memcpy_mb_per_second)),
        ("loopback TCP, one stream", format!("{:.0} MB/s", limits.loopback_mb_per_second)),
        ("loopback round trip p50", micros(Some(limits.loopback_round_trip_p50_us))),
    ];
    for (resource, value) in rows {
        let _ = writeln!(out, "| {resource} | {value} |");
    }
    out.push('\n');
}

fn render_workload(out: &mut String, report: &Report, summaries: &BTreeMap<Key, Summary>, workload: WorkloadId) {
    let _ = writeln!(out, "## {}. {}\n", workload.number(), workload.title());
    if let Some((_, why)) = report.not_run.iter().find(|(id, _)| *id == workload) {
        let _ = writeln!(out, "Not run: {why}\n");
        return;
    }
    for (_, note) in report.workload_notes.iter().filter(|(id, _)| *id == workload) {
        let _ = writeln!(out, "{note}\n");
    }
    for durability in workload.durabilities() {
        let rows: Vec<(&String, &Summary)> = report
            .systems()
            .into_iter()
            .filter_map(|system| {
                summaries
                    .get_key_value(&(workload, *durability, system))
                    .map(|((_, _, system), summary)| (system, summary))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let latency_kind = report
            .runs
            .iter()
            .filter(|run| run.workload == workload && run.durability == *durability)
            .find_map(|run| run.measurement.as_ref().and_then(|m| m.latency_kind.clone()))
            .unwrap_or_else(|| "latency".to_owned());
        let _ = writeln!(out, "### {}\n", durability.label());
        let _ = writeln!(
            out,
            "| system | MB/s [range] | records/s | {latency_kind} p50 | p99 | p99.9 | server CPU-s/GB | load generator CPU-s/GB | peak RSS | notes |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
        for (system, summary) in rows {
            let range = if summary.rounds > 1 {
                format!(" [{}–{}]", figure(summary.mb_per_second_min), figure(summary.mb_per_second_max))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "| {system} | {}{range} | {} | {} | {} | {} | {} | {} | {:.0} MiB | {} |",
                figure(summary.mb_per_second),
                figure(summary.records_per_second),
                micros(summary.p50_us),
                micros(summary.p99_us),
                micros(summary.p999_us),
                figure(summary.cpu_seconds_per_gb),
                figure(summary.generator_cpu_seconds_per_gb),
                summary.peak_rss_mib,
                summary.notes.join("; ")
            );
        }
        let lines = ratios(report, summaries, workload, *durability);
        if !lines.is_empty() {
            let what = match workload.headline() {
                Headline::Throughput => "MB/s, higher is better",
                Headline::LatencyP50 => "p50 latency, lower is better",
            };
            out.push('\n');
            for (label, ratio, verdict) in lines {
                let _ = writeln!(out, "- {label} = **{}** ({what}): {verdict}", ratio_text(ratio));
            }
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Percentiles;

    fn run(system: &str, round: u32, mb_per_second: f64, p50: f64) -> Run {
        Run {
            round,
            workload: WorkloadId::MaxIngest,
            durability: Durability::PageCache,
            system: system.to_owned(),
            measurement: Some(Measurement {
                mb_per_second,
                latency_us: Some(Percentiles { p50, ..Percentiles::default() }),
                ..Measurement::default()
            }),
            error: None,
        }
    }

    fn report(runs: Vec<Run>) -> Report {
        Report {
            date: "2026-12-01".into(),
            mode: "smoke".into(),
            command: "weir-bench run --smoke".into(),
            machine: Machine::default(),
            pinning: "none".into(),
            limits: Limits { loopback_mb_per_second: 1000.0, ..Limits::default() },
            versions: BTreeMap::new(),
            settings: Settings {
                warmup: std::time::Duration::ZERO,
                duration: std::time::Duration::from_secs(1),
                fixed_rate: 1.0,
                catch_up_bytes: 1,
                durable_producers: 1,
                inflight_bytes_max: crate::workload::INFLIGHT_BYTES_MAX,
                inflight_max: None,
            },
            rounds: 3,
            runs,
            not_run: vec![(WorkloadId::FixedRate, "no time".into())],
            workload_notes: vec![(WorkloadId::MaxIngest, "one broker each".into())],
        }
    }

    #[test]
    fn medians_and_ratios_over_rounds() {
        let report = report(vec![
            run("kafka", 1, 100.0, 900.0),
            run("weir", 1, 300.0, 300.0),
            run("kafka", 2, 200.0, 800.0),
            run("weir", 2, 100.0, 400.0),
            run("weir", 3, 200.0, 500.0),
            run("kafka", 3, 150.0, 700.0),
        ]);
        assert_eq!(report.systems(), ["weir", "kafka"]);
        let summaries = report.summaries();
        let weir = &summaries[&(WorkloadId::MaxIngest, Durability::PageCache, "weir".to_owned())];
        assert_eq!((weir.mb_per_second, weir.mb_per_second_min, weir.mb_per_second_max), (200.0, 100.0, 300.0));
        assert_eq!(weir.p50_us, Some(400.0));
        let lines = ratios(&report, &summaries, WorkloadId::MaxIngest, Durability::PageCache);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].0, "weir ÷ kafka");
        assert!((lines[0].1 - 200.0 / 150.0).abs() < 1e-9);
        assert_eq!(lines[0].2, "Weir leads");
        let limits = limit_ratios(&report, &summaries);
        assert_eq!(limits[0], ("max ingest, page cache ÷ loopback TCP stream".to_owned(), 0.2));
        let markdown = render_markdown(&report, &[]);
        assert!(markdown.contains("| weir | 200 [100–300] |"), "{markdown}");
        assert!(markdown.contains("Not run: no time"), "{markdown}");
        assert!(markdown.contains("one broker each\n"), "{markdown}");
    }

    #[test]
    fn replication_factor_ratios_pair_each_system_with_its_rf1_row() {
        let replicated = |system: &str, round, mb_per_second| Run {
            workload: WorkloadId::Replicated,
            durability: Durability::Fsync,
            ..run(system, round, mb_per_second, 1000.0)
        };
        let report = report(vec![
            replicated("kafka rf=1", 1, 100.0),
            replicated("weir rf=1", 1, 200.0),
            replicated("weir", 1, 150.0),
            replicated("kafka", 1, 50.0),
        ]);
        assert_eq!(report.systems(), ["weir", "weir rf=1", "kafka", "kafka rf=1"]);
        let summaries = report.summaries();
        let lines = ratios(&report, &summaries, WorkloadId::Replicated, Durability::Fsync);
        let labels: Vec<&str> = lines.iter().map(|(label, _, _)| label.as_str()).collect();
        assert_eq!(labels, ["weir ÷ kafka", "weir RF=3 ÷ weir rf=1", "kafka RF=3 ÷ kafka rf=1"]);
        assert!((lines[0].1 - 3.0).abs() < 1e-9);
        assert!((lines[1].1 - 0.75).abs() < 1e-9);
        assert_eq!(lines[1].2, "RF=3 keeps 75% of RF=1's throughput");
        assert!((lines[2].1 - 0.5).abs() < 1e-9);
        // No ratio of a system against another's RF=1 row.
        assert!(!labels.iter().any(|label| label.contains("weir ÷ kafka rf=1")));
    }

    #[test]
    fn an_overloaded_system_gets_no_ratio() {
        let mut kafka = run("kafka", 1, 10.0, 900.0);
        kafka.measurement.as_mut().expect("measured").overloaded = true;
        let report = report(vec![run("weir", 1, 20.0, 300.0), kafka]);
        let summaries = report.summaries();
        assert!(ratios(&report, &summaries, WorkloadId::MaxIngest, Durability::PageCache).is_empty());
    }

    #[test]
    fn latency_verdicts_prefer_lower() {
        assert_eq!(verdict(0.5, Headline::LatencyP50), "Weir leads");
        assert_eq!(verdict(2.0, Headline::LatencyP50), "Weir trails");
        assert_eq!(verdict(1.02, Headline::Throughput), "even (within 5%)");
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), 2.5);
        assert_eq!(ratio_text(1.234), "1.23");
        assert_eq!(ratio_text(0.02), "1/50");
    }
}
