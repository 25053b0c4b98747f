//! glibc's malloc thresholds, fixed for a process that streams through the
//! client core.
//!
//! glibc starts with a 128 KiB mmap threshold and a trim threshold of twice
//! that, and moves both with the sizes it sees freed. In a host process (a Go
//! program, Node, Python) those moving thresholds kept the heap shrinking
//! after fetched answers were freed and growing again for the next one: the
//! connection thread then wrote every fetched byte into freshly faulted pages.
//! Measured with a Go consumer reading 1 GB of 1 KiB records on one core:
//! 76,000 page faults and 1.27 CPU-seconds per GB, against 3,000 faults in
//! the Rust client's own process; with the thresholds fixed here, 9,500
//! faults and 1.06 CPU-seconds per GB.
//!
//! Fixed thresholds keep up to [`TRIM_THRESHOLD`] of freed memory per heap
//! instead of returning it to the system at once. A process that sets its
//! own (`GLIBC_TUNABLES` naming `glibc.malloc.trim_threshold` or
//! `glibc.malloc.mmap_threshold`) keeps them, and `WEIR_MALLOC_TUNING=off`
//! leaves glibc's defaults alone.

/// Allocations up to this size come from the heap, not their own mapping
/// (fetched answers are up to a few MiB).
pub const MMAP_THRESHOLD: usize = 16 << 20;
/// Free memory a heap keeps before it is returned to the system.
pub const TRIM_THRESHOLD: usize = 32 << 20;

/// Whether the thresholds are set here: not when the process or its user
/// chose otherwise.
fn wanted(tuning: Option<&str>, tunables: Option<&str>) -> bool {
    if tuning.is_some_and(|value| value.eq_ignore_ascii_case("off")) {
        return false;
    }
    !tunables.is_some_and(|tunables| {
        tunables.contains("glibc.malloc.trim_threshold") || tunables.contains("glibc.malloc.mmap_threshold")
    })
}

/// Fixes the thresholds (once per process, before the runtime starts).
pub(crate) fn tune() {
    let tuning = std::env::var("WEIR_MALLOC_TUNING").ok();
    let tunables = std::env::var("GLIBC_TUNABLES").ok();
    if wanted(tuning.as_deref(), tunables.as_deref()) {
        set_thresholds();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() {
    // SAFETY: mallopt takes glibc's arena locks itself; both values are in
    // the ranges glibc accepts (the mmap threshold's cap is 32 MiB).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_chose_its_own_thresholds_keeps_them() {
        assert!(wanted(None, None));
        assert!(wanted(Some("on"), Some("glibc.malloc.arena_max=2")));
        assert!(!wanted(Some("OFF"), None));
        assert!(!wanted(None, Some("glibc.malloc.trim_threshold=1048576")));
        assert!(!wanted(None, Some("glibc.pthread.rseq=0:glibc.malloc.mmap_threshold=65536")));
    }
}
