//! A plugin call's time budget: the CPU time of the thread running it, with a
//! wall-clock backstop.
//!
//! A wall-clock deadline alone fails healthy plugins on a busy machine (a call
//! that needs 7.5 ms of CPU failed 78% of the time under load at 10 ms), so
//! the budget counts the plugin's own work: the CPU time of the calling
//! thread, read with `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` from wasmtime's
//! epoch callback, which runs on that thread once per tick while wasm runs. The
//! wall-clock backstop stops a call the machine starves for so long that its
//! caller would give up anyway.
//!
//! Invariant: a [`Budget`] is read only on the thread that started it (the
//! thread CPU clock is per thread); the store that holds it runs one call at a
//! time on one thread.

use std::time::{Duration, Instant};

/// Which limit stopped a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlineClock {
    /// The call's own CPU time ([`crate::HostLimits::call_deadline`]).
    CpuTime,
    /// Elapsed time ([`crate::HostLimits::call_wall_deadline`]).
    WallClock,
}

impl std::fmt::Display for DeadlineClock {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            DeadlineClock::CpuTime => "CPU-time",
            DeadlineClock::WallClock => "wall-clock",
        })
    }
}

/// The limits of one call, started when the call starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    cpu_started: Duration,
    cpu_max: Duration,
    wall_started: Instant,
    wall_max: Duration,
}

impl Budget {
    /// Starts a budget on the calling thread.
    pub(crate) fn start(cpu_max: Duration, wall_max: Duration) -> Budget {
        Budget { cpu_started: thread_cpu_time(), cpu_max, wall_started: Instant::now(), wall_max }
    }

    /// The limit this call has run past, if any.
    pub(crate) fn expired(&self) -> Option<DeadlineClock> {
        if thread_cpu_time().saturating_sub(self.cpu_started) > self.cpu_max {
            Some(DeadlineClock::CpuTime)
        } else if self.wall_started.elapsed() > self.wall_max {
            Some(DeadlineClock::WallClock)
        } else {
            None
        }
    }
}

/// CPU time the calling thread has used (user and system).
pub fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is
    // supported on every Linux the broker runs on (and on macOS).
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeping_uses_no_cpu_budget_but_spinning_does() {
        let budget = Budget::start(Duration::from_millis(5), Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(budget.expired(), None, "20 ms asleep is not 5 ms of CPU");
        let spun = thread_cpu_time();
        while thread_cpu_time() - spun < Duration::from_millis(6) {
            std::hint::black_box(spun);
        }
        assert_eq!(budget.expired(), Some(DeadlineClock::CpuTime));
    }

    #[test]
    fn the_wall_clock_backstop_stops_a_starved_call() {
        let budget = Budget::start(Duration::from_secs(60), Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(budget.expired(), Some(DeadlineClock::WallClock));
    }
}
