//! `weir repair PARTITION_DIR [--truncate]`: the operator's path back for a
//! partition that recovery fenced as corrupt.
//!
//! Without `--truncate` it reads every segment of the partition batch by batch
//! (a line per segment as it goes), prints the first damage — segment, byte,
//! reason, and the offset below which every record is intact — writes nothing,
//! and exits 1 when it found damage (0 when the log is whole).
//!
//! With `--truncate` it takes the data directory's lock (so the broker must be
//! stopped), then cuts the log at the last valid batch before the damage: the cut
//! bytes go to `<segment>.log.torn-at-<position>`, later segments are renamed to
//! `<segment>.log.removed-by-repair`, nothing is deleted. The next `weir serve`
//! opens the partition with every record before the damage; new records then
//! take the offsets after it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use broker::data_dir_lock::DataDirLock;
use broker::log_dir::parse_partition_dir;
use broker::FileStorage;
use broker_core::log::repair::{inspect, truncate_at_damage, Damage, SegmentSummary};

#[derive(clap::Args, Debug)]
pub struct RepairArgs {
    /// A partition directory, e.g. weir-data/orders-0.
    partition_dir: PathBuf,
    /// Cut the log at its first damage (the broker must be stopped; cut bytes are kept aside).
    #[arg(long)]
    truncate: bool,
}

pub fn run(args: &RepairArgs) -> anyhow::Result<()> {
    let dir = &args.partition_dir;
    let named_like_one = dir.file_name().and_then(|name| name.to_str()).and_then(parse_partition_dir).is_some();
    anyhow::ensure!(
        dir.is_dir() && named_like_one,
        "{} is not a partition directory (expected DATA_DIR/TOPIC-PARTITION, e.g. weir-data/orders-0)",
        dir.display()
    );
    if args.truncate {
        truncate(dir)
    } else {
        diagnose(dir)
    }
}

fn diagnose(dir: &Path) -> anyhow::Result<()> {
    let inspection = inspect(&FileStorage, dir, print_segment).with_context(|| format!("reading {}", dir.display()))?;
    let Some(damage) = inspection.damage else {
        let end = inspection.segments.last().map_or(0, |segment| segment.next_offset);
        println!("no damage: {} segment(s), every batch valid, log end offset {end}", inspection.segments.len());
        return Ok(());
    };
    print_damage(&damage);
    if !inspection.segments_after_damage.is_empty() {
        println!("{} later segment(s) would be moved aside", inspection.segments_after_damage.len());
    }
    anyhow::bail!(
        "{} is damaged; with the broker stopped, `weir repair {} --truncate` cuts it at offset {} (the cut bytes are kept aside)",
        dir.display(),
        dir.display(),
        damage.offset
    )
}

fn truncate(dir: &Path) -> anyhow::Result<()> {
    let data_dir = dir.canonicalize()?.parent().map(Path::to_path_buf).context("a partition directory has a parent")?;
    let _lock = DataDirLock::acquire(&data_dir)?;
    let repair = truncate_at_damage(&FileStorage, dir).with_context(|| format!("repairing {}", dir.display()))?;
    let Some(repair) = repair else {
        println!("no damage found: nothing to cut");
        return Ok(());
    };
    print_damage(&repair.damage);
    if let Some(tail) = &repair.truncated_tail {
        println!(
            "cut {} byte(s) of segment {}; they are in {}",
            tail.bytes,
            tail.segment_base_offset,
            tail.moved_to.display()
        );
    }
    for (base_offset, path) in &repair.segments_moved {
        println!("moved segment {base_offset} aside to {}", path.display());
    }
    println!("the partition now ends at offset {}; start the broker to bring it back online", repair.damage.offset);
    Ok(())
}

fn print_segment(segment: &SegmentSummary) {
    let status = if segment.valid_bytes == segment.size_bytes { "ok" } else { "DAMAGED" };
    println!(
        "segment {:020}: {} bytes, offsets {}..{}, {status}",
        segment.base_offset, segment.size_bytes, segment.base_offset, segment.next_offset
    );
}

fn print_damage(damage: &Damage) {
    println!(
        "damage in segment {} at byte {}: {}\nevery record below offset {} is intact",
        damage.segment_base_offset, damage.position, damage.reason, damage.offset
    );
}
