//! [`ProducerStates`]: one partition's idempotent-producer table, which turns a
//! retried batch into its original offsets instead of a duplicate.
//!
//! An idempotent producer stamps each batch with its producer id, epoch and the
//! sequence number of its first record (sequences count records per partition,
//! from 0, wrapping after `i32::MAX`). For every producer the table keeps its epoch
//! and its last [`CACHED_BATCHES_MAX`] appended batches (the Redpanda lesson: a
//! retry can arrive after newer batches were appended, so one is not enough).
//!
//! The check, for a batch `b` from producer `p`:
//! 1. `p` unknown → append (its state may have expired; Kafka does the same).
//! 2. `b.epoch < p.epoch` → `InvalidProducerEpoch`: a zombie producer is fenced.
//! 3. `b.epoch > p.epoch` → a new epoch; its first batch must start at sequence 0.
//! 4. `b` equals a cached batch (same first and last sequence) → duplicate: answer
//!    with that batch's offsets, append nothing.
//! 5. `b.base_sequence` = last sequence + 1 → append.
//! 6. otherwise → `OutOfOrderSequence` (a gap: a batch in between was lost) or
//!    `DuplicateSequence` (an old batch no longer cached).
//!
//! Owners check and record under the same lock as the append itself, so two
//! retries of one batch can never both append. The table is bounded by
//! `producer_count_max`: the producer idle longest is evicted first.

use std::collections::{HashMap, VecDeque};

/// Batches remembered per producer (Kafka and Redpanda use 5 too).
pub const CACHED_BATCHES_MAX: usize = 5;

/// The producer fields of one batch header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Records in the batch minus one (`last_offset_delta`).
    pub last_offset_delta: i32,
}

impl ProducerBatch {
    fn last_sequence(&self) -> i32 {
        next_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// Sequence `delta` records after `sequence`, wrapping like Kafka's.
fn next_sequence(sequence: i32, delta: i32) -> i32 {
    let next = sequence as i64 + delta as i64;
    (next % (i32::MAX as i64 + 1)) as i32
}

/// What to do with a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceCheck {
    /// New data: append it.
    Append,
    /// A retry of an appended batch: answer with these offsets.
    Duplicate { base_offset: u64, last_offset: u64 },
}

/// Why a batch is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id} epoch {epoch} is fenced by epoch {current_epoch}")]
    InvalidProducerEpoch { producer_id: i64, epoch: i16, current_epoch: i16 },
    #[error("producer {producer_id}: expected sequence {expected}, got {got}")]
    OutOfOrderSequence { producer_id: i64, expected: i32, got: i32 },
    #[error("producer {producer_id}: sequence {got} was appended long ago (next expected {expected})")]
    DuplicateSequence { producer_id: i64, expected: i32, got: i32 },
}

#[derive(Clone, Copy, Debug)]
struct CachedBatch {
    base_sequence: i32,
    last_sequence: i32,
    base_offset: u64,
    last_offset: u64,
}

#[derive(Debug)]
struct ProducerEntry {
    epoch: i16,
    /// Oldest first; at most [`CACHED_BATCHES_MAX`].
    batches: VecDeque<CachedBatch>,
    /// Bumped on every record; eviction removes the smallest.
    last_used: u64,
}

/// One partition's producer table. See the module docs.
#[derive(Debug)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    producer_count_max: usize,
    clock: u64,
}

impl ProducerStates {
    pub fn new(producer_count_max: usize) -> ProducerStates {
        ProducerStates { producers: HashMap::new(), producer_count_max: producer_count_max.max(1), clock: 0 }
    }

    /// Producers currently tracked.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Decides what to do with `batch` (see the module docs); changes nothing.
    pub fn check(&self, batch: &ProducerBatch) -> Result<SequenceCheck, SequenceError> {
        let Some(entry) = self.producers.get(&batch.producer_id) else { return Ok(SequenceCheck::Append) };
        let producer_id = batch.producer_id;
        if batch.producer_epoch < entry.epoch {
            return Err(SequenceError::InvalidProducerEpoch {
                producer_id,
                epoch: batch.producer_epoch,
                current_epoch: entry.epoch,
            });
        }
        if batch.producer_epoch > entry.epoch {
            return match batch.base_sequence {
                0 => Ok(SequenceCheck::Append),
                got => Err(SequenceError::OutOfOrderSequence { producer_id, expected: 0, got }),
            };
        }
        let last_sequence = batch.last_sequence();
        let cached = entry
            .batches
            .iter()
            .find(|cached| cached.base_sequence == batch.base_sequence && cached.last_sequence == last_sequence);
        if let Some(cached) = cached {
            return Ok(SequenceCheck::Duplicate { base_offset: cached.base_offset, last_offset: cached.last_offset });
        }
        let Some(newest) = entry.batches.back() else { return Ok(SequenceCheck::Append) };
        let expected = next_sequence(newest.last_sequence, 1);
        let got = batch.base_sequence;
        if got == expected {
            return Ok(SequenceCheck::Append);
        }
        // Sequences wrap: "behind" means less than half the sequence space back.
        let behind = (expected as i64 - got as i64).rem_euclid(i32::MAX as i64 + 1);
        if behind < 1 << 30 {
            Err(SequenceError::DuplicateSequence { producer_id, expected, got })
        } else {
            Err(SequenceError::OutOfOrderSequence { producer_id, expected, got })
        }
    }

    /// Records an appended batch (after [`ProducerStates::check`] said `Append`, or
    /// while replaying the log).
    pub fn record(&mut self, batch: &ProducerBatch, base_offset: u64, last_offset: u64) {
        self.clock += 1;
        if !self.producers.contains_key(&batch.producer_id) && self.producers.len() >= self.producer_count_max {
            self.evict_idlest();
        }
        let entry = self.producers.entry(batch.producer_id).or_insert_with(|| ProducerEntry {
            epoch: batch.producer_epoch,
            batches: VecDeque::with_capacity(CACHED_BATCHES_MAX),
            last_used: 0,
        });
        if batch.producer_epoch != entry.epoch {
            entry.epoch = batch.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == CACHED_BATCHES_MAX {
            entry.batches.pop_front();
        }
        entry.batches.push_back(CachedBatch {
            base_sequence: batch.base_sequence,
            last_sequence: batch.last_sequence(),
            base_offset,
            last_offset,
        });
        entry.last_used = self.clock;
    }

    fn evict_idlest(&mut self) {
        let idlest = self.producers.iter().min_by_key(|(_, entry)| entry.last_used).map(|(id, _)| *id);
        if let Some(producer_id) = idlest {
            self.producers.remove(&producer_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(producer_epoch: i16, base_sequence: i32, record_count: i32) -> ProducerBatch {
        ProducerBatch { producer_id: 7, producer_epoch, base_sequence, last_offset_delta: record_count - 1 }
    }

    /// Checks then records like an owner would; returns the check's outcome.
    fn offer(
        states: &mut ProducerStates,
        batch: ProducerBatch,
        next_offset: &mut u64,
    ) -> Result<SequenceCheck, SequenceError> {
        let check = states.check(&batch)?;
        if check == SequenceCheck::Append {
            let base_offset = *next_offset;
            *next_offset += batch.last_offset_delta as u64 + 1;
            states.record(&batch, base_offset, *next_offset - 1);
        }
        Ok(check)
    }

    #[test]
    fn retries_of_any_cached_batch_get_their_original_offsets() {
        let mut states = ProducerStates::new(16);
        let mut next_offset = 100;
        for sequence in (0..50).step_by(10) {
            assert_eq!(offer(&mut states, batch(0, sequence, 10), &mut next_offset), Ok(SequenceCheck::Append));
        }
        assert_eq!(next_offset, 150);
        assert_eq!(
            offer(&mut states, batch(0, 0, 10), &mut next_offset),
            Ok(SequenceCheck::Duplicate { base_offset: 100, last_offset: 109 })
        );
        assert_eq!(
            offer(&mut states, batch(0, 40, 10), &mut next_offset),
            Ok(SequenceCheck::Duplicate { base_offset: 140, last_offset: 149 })
        );
        assert_eq!(next_offset, 150, "duplicates append nothing");
        // One more batch pushes the oldest out of the cache.
        offer(&mut states, batch(0, 50, 10), &mut next_offset).unwrap();
        assert_eq!(
            offer(&mut states, batch(0, 0, 10), &mut next_offset),
            Err(SequenceError::DuplicateSequence { producer_id: 7, expected: 60, got: 0 })
        );
    }

    #[test]
    fn gaps_are_out_of_order_and_old_epochs_are_fenced() {
        let mut states = ProducerStates::new(16);
        let mut next_offset = 0;
        offer(&mut states, batch(3, 0, 5), &mut next_offset).unwrap();
        assert_eq!(
            offer(&mut states, batch(3, 6, 1), &mut next_offset),
            Err(SequenceError::OutOfOrderSequence { producer_id: 7, expected: 5, got: 6 })
        );
        assert_eq!(
            offer(&mut states, batch(2, 5, 1), &mut next_offset),
            Err(SequenceError::InvalidProducerEpoch { producer_id: 7, epoch: 2, current_epoch: 3 })
        );
        assert_eq!(
            offer(&mut states, batch(4, 5, 1), &mut next_offset),
            Err(SequenceError::OutOfOrderSequence { producer_id: 7, expected: 0, got: 5 })
        );
        assert_eq!(offer(&mut states, batch(4, 0, 1), &mut next_offset), Ok(SequenceCheck::Append));
        assert_eq!(next_offset, 6);
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        let mut states = ProducerStates::new(16);
        let mut next_offset = 0;
        offer(&mut states, batch(0, i32::MAX - 1, 2), &mut next_offset).unwrap();
        assert_eq!(offer(&mut states, batch(0, 0, 3), &mut next_offset), Ok(SequenceCheck::Append));
        assert_eq!(
            offer(&mut states, batch(0, i32::MAX - 1, 2), &mut next_offset),
            Ok(SequenceCheck::Duplicate { base_offset: 0, last_offset: 1 })
        );
    }

    #[test]
    fn the_idlest_producer_is_evicted_at_the_bound() {
        let mut states = ProducerStates::new(2);
        for producer_id in [1, 2, 1, 3] {
            let batch = ProducerBatch { producer_id, producer_epoch: 0, base_sequence: 0, last_offset_delta: 0 };
            states.record(&batch, 0, 0);
        }
        assert_eq!(states.len(), 2);
        let unknown = ProducerBatch { producer_id: 2, producer_epoch: 0, base_sequence: 9, last_offset_delta: 0 };
        assert_eq!(states.check(&unknown), Ok(SequenceCheck::Append), "producer 2 was evicted, so it is unknown");
    }
}
