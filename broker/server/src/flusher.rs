//! [`Flusher`]: a small pool of threads that run partitions' group-commit rounds.
//!
//! fdatasync blocks a thread for milliseconds; doing it on dedicated threads keeps
//! appenders and the async runtime free. Partitions queue themselves (at most once
//! at a time, see `partition.rs`), so the queue holds at most one entry per
//! partition: its bound is the partition count.
//!
//! The threads stop when every `Flusher` handle is dropped.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::partition::Partition;

/// Handle to the flusher pool; cheap to clone.
#[derive(Clone, Debug)]
pub struct Flusher {
    queue: Sender<Partition>,
}

impl Flusher {
    /// Starts `thread_count` (at least one) flusher threads.
    pub fn start(thread_count: usize) -> Flusher {
        let (queue, receiver) = channel::<Partition>();
        let receiver = Arc::new(Mutex::new(receiver));
        for index in 0..thread_count.max(1) {
            let receiver = receiver.clone();
            thread::Builder::new()
                .name(format!("weir-flusher-{index}"))
                .spawn(move || run(&receiver))
                .expect("spawning a flusher thread at start-up");
        }
        Flusher { queue }
    }

    /// Queues a round for `partition`.
    pub(crate) fn submit(&self, partition: Partition) {
        // The receiver only goes away when every thread has exited, which happens
        // only after every sender (this handle included) is dropped.
        let _ = self.queue.send(partition);
    }
}

fn run(receiver: &Mutex<Receiver<Partition>>) {
    loop {
        let next = receiver.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).recv();
        match next {
            Ok(partition) => partition.run_round(),
            Err(_) => return,
        }
    }
}
