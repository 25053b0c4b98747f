//! PNG plots of a [`Report`]: throughput bars per workload (log scale, every
//! system side by side) and latency CDFs of the latency workloads (percentile on
//! a "nines" axis, latency on a log axis). Text uses an embedded DejaVu Sans, so
//! no system fonts are needed.

use std::path::Path;
use std::sync::Once;

use anyhow::Context;
use plotters::prelude::*;

use crate::driver::Durability;
use crate::report::Report;
use crate::workload::{Headline, ScaleAxis, WorkloadId};

const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

fn register_font() {
    static FONT: Once = Once::new();
    FONT.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_err() {
            eprintln!("warning: the embedded font did not load; plots will have no text");
        }
    });
}

fn color_of(systems: &[String], system: &str) -> RGBColor {
    COLORS[systems.iter().position(|s| s == system).unwrap_or(0) % COLORS.len()]
}

/// Draws every plot into `dir`, named `<prefix>-*.png`; returns the file names.
pub fn draw_all(report: &Report, dir: &Path, prefix: &str) -> anyhow::Result<Vec<String>> {
    register_font();
    let mut files = Vec::new();
    let name = format!("{prefix}-throughput.png");
    if throughput(report, &dir.join(&name))? {
        files.push(name);
    }
    for axis in ScaleAxis::BOTH {
        let name = format!("{prefix}-scale-{}.png", axis.slug());
        if scale_curve(report, axis, &dir.join(&name))? {
            files.push(name);
        }
    }
    for workload in [WorkloadId::FixedRate, WorkloadId::RoundTrip] {
        for durability in workload.durabilities() {
            let name = format!("{prefix}-latency-{}-{}.png", workload.slug(), durability_slug(*durability));
            if latency_cdf(report, workload, *durability, &dir.join(&name))? {
                files.push(name);
            }
        }
    }
    Ok(files)
}

fn durability_slug(durability: Durability) -> &'static str {
    match durability {
        Durability::PageCache => "page-cache",
        Durability::Fsync => "fsync",
    }
}

/// Grouped bars: one group per (throughput workload, durability), one bar per system.
fn throughput(report: &Report, path: &Path) -> anyhow::Result<bool> {
    let summaries = report.summaries();
    let systems = report.systems();
    let mut groups: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    // The scale points have plots of their own (max ingest stays here too).
    let bars = WorkloadId::ALL.into_iter().filter(|w| !WorkloadId::SCALE.contains(w));
    for workload in bars.filter(|w| w.headline() == Headline::Throughput) {
        for durability in workload.durabilities() {
            let bars: Vec<(String, f64)> = systems
                .iter()
                .filter_map(|system| {
                    let summary = summaries.get(&(workload, *durability, system.clone()))?;
                    (summary.rounds > 0 && summary.mb_per_second > 0.0).then(|| (system.clone(), summary.mb_per_second))
                })
                .collect();
            if !bars.is_empty() {
                groups.push((format!("{}. {} ({})", workload.number(), workload.slug(), durability.label()), bars));
            }
        }
    }
    if groups.is_empty() {
        return Ok(false);
    }
    let highest = groups.iter().flat_map(|(_, bars)| bars.iter().map(|(_, v)| *v)).fold(1.0, f64::max);
    let lowest = groups.iter().flat_map(|(_, bars)| bars.iter().map(|(_, v)| *v)).fold(highest, f64::min);
    let root = BitMapBackend::new(path, (1400, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    // Headroom above the tallest bar for the legend.
    let y_range = (lowest / 2.0).max(0.01)..highest * 12.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Throughput, MB/s (log scale) — {}", report.date), ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(90)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..groups.len() as f64, y_range.clone().log_scale())?;
    let labels: Vec<String> = groups.iter().map(|(label, _)| label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let index = x.floor() as usize;
            if (x - index as f64 - 0.5).abs() < 0.01 {
                labels.get(index).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 13))
        .y_desc("MB/s")
        .draw()?;
    for (index, (_, bars)) in groups.iter().enumerate() {
        let width = 0.8 / bars.len() as f64;
        for (slot, (system, value)) in bars.iter().enumerate() {
            let left = index as f64 + 0.1 + slot as f64 * width;
            let color = color_of(&systems, system);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(left, y_range.start), (left + width * 0.9, *value)],
                color.filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{value:.0}"),
                (left, *value * 1.15),
                ("sans-serif", 12),
            )))?;
        }
    }
    for system in &systems {
        let color = color_of(&systems, system);
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(system.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present().with_context(|| format!("write {}", path.display()))?;
    Ok(true)
}

/// Throughput (solid) and send→ack p99 (dashed, right log axis) of every system
/// along one scale axis, from max ingest and the scale points that ran; false
/// when no system has two points on it.
fn scale_curve(report: &Report, axis: ScaleAxis, path: &Path) -> anyhow::Result<bool> {
    let summaries = report.summaries();
    let systems = report.systems();
    // Per system: (x, MB/s, p99 µs) in x order.
    type Curve = (String, Vec<(f64, f64, f64)>);
    let mut curves: Vec<Curve> = Vec::new();
    for system in &systems {
        let mut points: Vec<(f64, f64, f64)> = WorkloadId::ALL
            .into_iter()
            .filter_map(|workload| {
                let (_, x) = workload.scale_point()?.into_iter().find(|(on, _)| *on == axis)?;
                let summary = summaries.get(&(workload, Durability::PageCache, system.clone()))?;
                (summary.rounds > 0 && summary.mb_per_second > 0.0)
                    .then(|| (f64::from(x), summary.mb_per_second, summary.p99_us.unwrap_or(0.0)))
            })
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if points.len() >= 2 {
            curves.push((system.clone(), points));
        }
    }
    if curves.is_empty() {
        return Ok(false);
    }
    let all = || curves.iter().flat_map(|(_, points)| points.iter());
    let (x_low, x_high) = all().fold((f64::MAX, 1.0f64), |(low, high), point| (low.min(point.0), high.max(point.0)));
    let mb_high = all().fold(1.0f64, |high, point| high.max(point.1));
    let p99_high = all().fold(1.0f64, |high, point| high.max(point.2));
    let p99_low = all().map(|point| point.2).filter(|p99| *p99 > 0.0).fold(p99_high, f64::min);
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Max ingest (page cache, 1 KiB) by {} — {}", axis.label(), report.date), ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .right_y_label_area_size(80)
        .build_cartesian_2d((x_low / 1.5..x_high * 1.5).log_scale(), 0f64..mb_high * 1.25)?
        .set_secondary_coord((x_low / 1.5..x_high * 1.5).log_scale(), (p99_low / 2.0..p99_high * 2.0).log_scale());
    chart
        .configure_mesh()
        .x_desc(axis.label())
        .y_desc("MB/s (solid)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("send→ack p99, µs (dashed, log scale)")
        .y_label_formatter(&|us| format!("{us:.0}"))
        .draw()?;
    for (system, points) in &curves {
        let color = color_of(&systems, system);
        chart
            .draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.1)), color.stroke_width(3)))?
            .label(system.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(3)));
        chart.draw_series(points.iter().map(|p| Circle::new((p.0, p.1), 4, color.filled())))?;
        chart.draw_secondary_series(DashedLineSeries::new(
            points.iter().map(|p| (p.0, p.2)),
            6,
            4,
            color.stroke_width(2),
        ))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present().with_context(|| format!("write {}", path.display()))?;
    Ok(true)
}

/// "Nines" of a quantile: 0.9 → 1, 0.99 → 2, 0.999 → 3.
fn nines(quantile: f64) -> f64 {
    -(1.0 - quantile).log10()
}

/// Latency distribution of every system for one workload and durability, merged
/// over rounds by taking the median latency at each quantile.
fn latency_cdf(report: &Report, workload: WorkloadId, durability: Durability, path: &Path) -> anyhow::Result<bool> {
    let systems = report.systems();
    let mut curves: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for system in &systems {
        let cdfs: Vec<&Vec<(f64, u64)>> = report
            .runs
            .iter()
            .filter(|run| run.workload == workload && run.durability == durability && &run.system == system)
            .filter_map(|run| run.measurement.as_ref().map(|m| &m.latency_cdf))
            .filter(|cdf| !cdf.is_empty())
            .collect();
        let Some(first) = cdfs.first() else { continue };
        let points = first
            .iter()
            .enumerate()
            .filter(|(_, (quantile, _))| *quantile < 1.0)
            .map(|(index, (quantile, _))| {
                let mut values: Vec<f64> =
                    cdfs.iter().filter_map(|cdf| cdf.get(index)).map(|(_, us)| *us as f64).collect();
                (nines(*quantile), crate::report::median(&mut values).max(1.0))
            })
            .collect();
        curves.push((system.clone(), points));
    }
    if curves.is_empty() {
        return Ok(false);
    }
    let all = curves.iter().flat_map(|(_, points)| points.iter().map(|(_, us)| *us));
    let (low, high) = all.fold((f64::INFINITY, 1.0f64), |(low, high), us| (low.min(us), high.max(us)));
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let latency_kind = if workload == WorkloadId::FixedRate { "end-to-end" } else { "produce -> ack" };
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}. {} ({}), {latency_kind} latency — {}",
                workload.number(),
                workload.slug(),
                durability.label(),
                report.date
            ),
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..4.0, ((low / 1.5).max(1.0)..high * 1.5).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_label_formatter(&|x| match x.round() as i32 {
            0 => "0%".into(),
            1 => "90%".into(),
            2 => "99%".into(),
            3 => "99.9%".into(),
            _ => "99.99%".into(),
        })
        .x_desc("percentile")
        .y_desc("latency, µs (log scale)")
        .y_label_formatter(&|us| if *us >= 1000.0 { format!("{:.0} ms", us / 1000.0) } else { format!("{us:.0} µs") })
        .draw()?;
    for (system, points) in curves {
        let color = color_of(&systems, &system);
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(3)))?
            .label(system)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present().with_context(|| format!("write {}", path.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_axis() {
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(nines(0.0), 0.0);
    }
}
