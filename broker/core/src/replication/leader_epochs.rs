//! [`LeaderEpochCache`]: which leader epoch wrote which offsets of a replica's
//! log (KIP-101/279), and how a follower finds where its log and its leader's
//! agree ([`Divergence`]).
//!
//! Every batch carries the epoch of the leader that appended it. The cache keeps,
//! per epoch, the offset of its first batch; the *end offset* of an epoch is the
//! start of the next one (or the log end for the latest). A replica that becomes
//! a follower asks its leader for the end offset of its own latest epoch and
//! truncates to where both logs still agree — never to its own high watermark,
//! which may be stale (Kafka 0.8's lost writes).
//!
//! Invariants (kept by [`LeaderEpochCache::assign`], which refuses anything
//! else): epochs strictly increase along the log, and so do their start offsets.

/// No epoch: the answer for an epoch older than every one a log holds.
pub const UNDEFINED_EPOCH: i32 = -1;

/// One epoch and the offset of its first batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: u64,
}

/// See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

/// A batch whose epoch or offset goes backwards: a bug, or a damaged log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("leader epoch {epoch} at offset {offset} does not follow epoch {latest} from offset {latest_start}")]
pub struct EpochOrderError {
    pub epoch: i32,
    pub offset: u64,
    pub latest: i32,
    pub latest_start: u64,
}

impl LeaderEpochCache {
    /// A cache of these entries (a checkpoint read back); they must increase.
    pub fn from_entries(entries: Vec<EpochEntry>) -> Result<LeaderEpochCache, EpochOrderError> {
        let mut cache = LeaderEpochCache::default();
        for entry in entries {
            cache.assign(entry.epoch, entry.start_offset)?;
        }
        Ok(cache)
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The epoch of the last batch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|entry| entry.epoch)
    }

    /// Records that a batch of `epoch` starts at `offset` (every append calls
    /// it, and a new leader for its epoch at its log end); returns whether
    /// `epoch` is new to the log. A newer epoch at the start offset of the
    /// latest replaces it: that epoch wrote nothing.
    pub fn assign(&mut self, epoch: i32, offset: u64) -> Result<bool, EpochOrderError> {
        let Some(latest) = self.entries.last_mut() else {
            self.entries.push(EpochEntry { epoch, start_offset: offset });
            return Ok(true);
        };
        if latest.epoch == epoch && offset >= latest.start_offset {
            return Ok(false);
        }
        if latest.epoch > epoch || latest.start_offset > offset {
            return Err(EpochOrderError { epoch, offset, latest: latest.epoch, latest_start: latest.start_offset });
        }
        if latest.start_offset == offset {
            latest.epoch = epoch;
        } else {
            self.entries.push(EpochEntry { epoch, start_offset: offset });
        }
        Ok(true)
    }

    /// KIP-279's lookup: the largest epoch this log holds that is at most
    /// `requested`, and its end offset (the next epoch's start, or
    /// `log_end_offset` for the latest). `None` when every epoch here is newer
    /// than `requested` (or the log has none).
    pub fn end_offset_for(&self, requested: i32, log_end_offset: u64) -> Option<(i32, u64)> {
        let position = self.entries.partition_point(|entry| entry.epoch <= requested);
        let found = self.entries.get(position.checked_sub(1)?)?;
        let end = self.entries.get(position).map_or(log_end_offset, |next| next.start_offset);
        Some((found.epoch, end.min(log_end_offset)))
    }

    /// The log was truncated to end at `end_offset`: epochs that start at or
    /// after it are gone.
    pub fn truncate_from_end(&mut self, end_offset: u64) {
        self.entries.retain(|entry| entry.start_offset < end_offset);
    }

    /// The log now starts at `start_offset` (retention, or a follower that
    /// restarted its log at the leader's start): epochs wholly before it are
    /// gone and the one it falls in starts there.
    pub fn truncate_from_start(&mut self, start_offset: u64) {
        let first_kept = self.entries.partition_point(|entry| entry.start_offset <= start_offset);
        if first_kept > 0 {
            self.entries.drain(..first_kept - 1);
            self.entries[0].start_offset = start_offset;
        }
    }

    /// The checkpoint file's bytes: a version line, the entry count, one
    /// `epoch start_offset` line per entry, and a CRC-32 of the lines before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!("0\n{}\n", self.entries.len());
        for entry in &self.entries {
            text.push_str(&format!("{} {}\n", entry.epoch, entry.start_offset));
        }
        let crc = crc32fast::hash(text.as_bytes());
        text.push_str(&format!("crc {crc:08x}\n"));
        text.into_bytes()
    }

    /// Reads [`LeaderEpochCache::encode`]'s bytes back; any damage is an error.
    pub fn decode(bytes: &[u8]) -> Result<LeaderEpochCache, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
        let body_end = text.rfind("crc ").ok_or("no CRC line")?;
        let (body, crc_line) = text.split_at(body_end);
        let stored = u32::from_str_radix(crc_line.trim_start_matches("crc ").trim_end(), 16)
            .map_err(|_| "a malformed CRC line".to_owned())?;
        if crc32fast::hash(body.as_bytes()) != stored {
            return Err("CRC mismatch".to_owned());
        }
        let mut lines = body.lines();
        if lines.next() != Some("0") {
            return Err("unknown version".to_owned());
        }
        let count: usize = lines.next().and_then(|line| line.parse().ok()).ok_or("no entry count")?;
        let entries = lines
            .map(|line| {
                let (epoch, offset) = line.split_once(' ').ok_or_else(|| format!("entry {line:?}"))?;
                let epoch = epoch.parse().map_err(|_| format!("epoch {epoch:?}"))?;
                let start_offset = offset.parse().map_err(|_| format!("offset {offset:?}"))?;
                Ok(EpochEntry { epoch, start_offset })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if entries.len() != count {
            return Err(format!("{} entries, {count} announced", entries.len()));
        }
        LeaderEpochCache::from_entries(entries).map_err(|error| error.to_string())
    }
}

/// The next step of a follower finding where its log diverges from its
/// leader's: ask the leader for the end offset of an epoch, or truncate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Divergence {
    /// Ask the leader `end_offset_for(epoch)`.
    Ask(i32),
    /// Truncate the log to end at this offset, then fetch from there.
    TruncateTo(u64),
}

impl Divergence {
    /// The first step of a replica that becomes a follower: ask about its latest
    /// epoch. A log without epochs keeps nothing (every append records its
    /// epoch, so only an empty log has none).
    pub fn start(follower: &LeaderEpochCache) -> Divergence {
        match follower.latest_epoch() {
            Some(epoch) => Divergence::Ask(epoch),
            None => Divergence::TruncateTo(0),
        }
    }

    /// The step after the leader answered `answer` to `Ask(asked)`:
    /// - the leader has that very epoch: both logs agree up to the smaller of
    ///   its end on each side;
    /// - the leader's largest epoch at most `asked` is older (`answered`): if
    ///   the follower holds `answered` too, they agree up to the smaller end;
    ///   if not, ask again about the follower's largest epoch before it;
    /// - the leader has no epoch that old: nothing here is the leader's, so
    ///   truncate everything.
    ///
    /// Each new question names a smaller epoch, so this ends.
    pub fn next(
        follower: &LeaderEpochCache,
        follower_log_end: u64,
        asked: i32,
        answer: Option<(i32, u64)>,
    ) -> Divergence {
        let Some((answered, leader_end)) = answer else { return Divergence::TruncateTo(0) };
        // A leader never answers a newer epoch than asked; if one did, take it
        // as the epoch asked (every question still names a smaller epoch).
        if answered >= asked {
            let own_end = follower.end_offset_for(asked, follower_log_end).map_or(0, |(_, end)| end);
            return Divergence::TruncateTo(leader_end.min(own_end));
        }
        // Here `answered < asked`, so a further question names a smaller epoch.
        match follower.end_offset_for(answered, follower_log_end) {
            Some((epoch, own_end)) if epoch == answered => Divergence::TruncateTo(leader_end.min(own_end)),
            Some((epoch, _)) => Divergence::Ask(epoch),
            None => Divergence::TruncateTo(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, u64)]) -> LeaderEpochCache {
        let entries = entries.iter().map(|&(epoch, start_offset)| EpochEntry { epoch, start_offset }).collect();
        LeaderEpochCache::from_entries(entries).unwrap()
    }

    #[test]
    fn lookups_answer_the_largest_epoch_at_most_the_one_asked_and_where_it_ends() {
        let epochs = cache(&[(1, 0), (3, 10), (4, 25)]);
        assert_eq!(epochs.end_offset_for(4, 30), Some((4, 30)));
        assert_eq!(epochs.end_offset_for(9, 30), Some((4, 30)));
        assert_eq!(epochs.end_offset_for(3, 30), Some((3, 25)));
        assert_eq!(epochs.end_offset_for(2, 30), Some((1, 10)));
        assert_eq!(epochs.end_offset_for(0, 30), None);
        assert_eq!(LeaderEpochCache::default().end_offset_for(5, 0), None);
    }

    #[test]
    fn epochs_and_offsets_only_grow() {
        let mut epochs = cache(&[(2, 5)]);
        assert_eq!(epochs.assign(2, 9), Ok(false));
        assert_eq!(epochs.assign(3, 9), Ok(true));
        assert!(epochs.assign(1, 20).is_err(), "an older epoch after a newer one");
        assert!(epochs.assign(4, 8).is_err(), "a new epoch cannot start before the previous one");
        assert_eq!(epochs.assign(4, 9), Ok(true), "epoch 3 wrote nothing: 4 replaces it");
        assert_eq!(epochs, cache(&[(2, 5), (4, 9)]));
    }

    #[test]
    fn truncation_from_either_end_keeps_the_epochs_of_what_remains() {
        let mut epochs = cache(&[(1, 0), (3, 10), (4, 25)]);
        epochs.truncate_from_end(25);
        assert_eq!(epochs, cache(&[(1, 0), (3, 10)]));
        epochs.truncate_from_start(12);
        assert_eq!(epochs, cache(&[(3, 12)]));
        epochs.truncate_from_start(5);
        assert_eq!(epochs, cache(&[(3, 12)]), "nothing before the start moves");
    }

    #[test]
    fn a_checkpoint_reads_back_and_damage_is_refused() {
        let epochs = cache(&[(1, 0), (3, 10), (4, 25)]);
        let bytes = epochs.encode();
        assert_eq!(LeaderEpochCache::decode(&bytes), Ok(epochs));
        let mut damaged = bytes.clone();
        damaged[4] ^= 1;
        assert!(LeaderEpochCache::decode(&damaged).is_err());
        assert!(LeaderEpochCache::decode(b"").is_err());
    }

    /// The divergence search, run to its end against a leader's cache.
    fn truncation_point(
        follower: &LeaderEpochCache,
        follower_end: u64,
        leader: &LeaderEpochCache,
        leader_end: u64,
    ) -> u64 {
        let mut step = Divergence::start(follower);
        loop {
            match step {
                Divergence::TruncateTo(offset) => return offset,
                Divergence::Ask(epoch) => {
                    step = Divergence::next(follower, follower_end, epoch, leader.end_offset_for(epoch, leader_end));
                }
            }
        }
    }

    #[test]
    fn a_follower_truncates_to_where_its_log_and_the_leaders_agree() {
        let leader = cache(&[(1, 0), (2, 10), (4, 20)]);
        // Same epochs, follower behind: nothing to cut.
        assert_eq!(truncation_point(&cache(&[(1, 0), (2, 10)]), 15, &leader, 30), 15);
        // The follower wrote past the leader in epoch 2 (unacknowledged): cut at 20.
        assert_eq!(truncation_point(&cache(&[(1, 0), (2, 10)]), 24, &leader, 30), 20);
        // The follower led epoch 3, which the leader never saw: cut where 2 ended.
        assert_eq!(truncation_point(&cache(&[(1, 0), (2, 10), (3, 18)]), 22, &leader, 30), 18);
        // Epoch 3 unknown to the leader and 2 unknown to the follower.
        assert_eq!(truncation_point(&cache(&[(1, 0), (3, 12)]), 14, &leader, 30), 10);
        // Nothing in common.
        assert_eq!(truncation_point(&cache(&[(0, 0)]), 5, &leader, 30), 0);
        assert_eq!(truncation_point(&LeaderEpochCache::default(), 0, &leader, 30), 0);
    }
}
