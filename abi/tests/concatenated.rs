//! Walking buffers of concatenated batches with `BatchIter` and
//! `BatchView::split_first`, as segment scans and fetches do.
//!
//! Role: checks that batches are peeled off in order, that a truncated tail
//! surfaces as `Truncated` exactly once, and that stamping batches in a
//! buffer keeps every one valid.

use abi::{set_base_offset, set_partition_leader_epoch, BatchBuilder, BatchError, BatchIter, BatchView};

/// A valid batch of `count` records, the first at `base_timestamp`.
fn batch(base_timestamp: i64, count: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(base_timestamp).producer(7, 1, 0);
    for i in 0..count {
        let value = format!("value-{i}");
        builder.push(base_timestamp + 1, None, Some(value.as_bytes()), &[]);
    }
    builder.encode()
}

fn three_batches() -> (Vec<u8>, Vec<usize>) {
    let batches = [batch(100, 1), batch(200, 3), batch(300, 2)];
    let sizes = batches.iter().map(Vec::len).collect();
    (batches.concat(), sizes)
}

#[test]
fn iterates_three_batches_in_order() {
    let (bytes, sizes) = three_batches();
    let views: Vec<BatchView<'_>> = BatchIter::new(&bytes).collect::<Result<_, _>>().expect("three valid batches");
    assert_eq!(views.len(), 3);
    let seen: Vec<(usize, i64, i32)> =
        views.iter().map(|view| (view.size_bytes(), view.base_timestamp(), view.records_count())).collect();
    assert_eq!(seen, [(sizes[0], 100, 1), (sizes[1], 200, 3), (sizes[2], 300, 2)]);
    assert!(views.iter().all(|view| view.validate().is_ok()));
}

#[test]
fn truncated_tail_yields_truncated_once() {
    let (mut bytes, _) = three_batches();
    let tail = batch(400, 2);
    bytes.extend_from_slice(&tail[..30]);
    let mut iter = BatchIter::new(&bytes);
    for _ in 0..3 {
        assert!(matches!(iter.next(), Some(Ok(_))));
    }
    assert_eq!(
        iter.next().map(|item| item.map(|_| ())),
        Some(Err(BatchError::Truncated { needed: tail.len(), available: 30 }))
    );
    assert!(iter.next().is_none());
    assert_eq!(iter.remaining(), &tail[..30]);
}

#[test]
fn split_first_returns_the_rest() {
    let (bytes, sizes) = three_batches();
    let (first, rest) = BatchView::split_first(&bytes).expect("first batch is whole");
    assert_eq!(first.as_bytes(), &bytes[..sizes[0]]);
    assert_eq!(rest, &bytes[sizes[0]..]);
}

#[test]
fn assigning_offsets_in_place_keeps_every_batch_valid() {
    let (mut bytes, sizes) = three_batches();
    let mut start = 0;
    let mut next_offset = 1_000;
    for size in sizes {
        let slot = &mut bytes[start..start + size];
        set_base_offset(slot, next_offset);
        set_partition_leader_epoch(slot, 5);
        let view = BatchView::new(slot).expect("stamped header is intact");
        assert_eq!(view.validate(), Ok(()));
        next_offset = view.last_offset() + 1;
        start += size;
    }
    let last_offsets: Vec<i64> = BatchIter::new(&bytes)
        .map(|item| item.map(|view| view.last_offset()))
        .collect::<Result<_, _>>()
        .expect("stamped batches are whole");
    assert_eq!(last_offsets, [1_000, 1_003, 1_005]);
}
