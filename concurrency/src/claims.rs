//! Copy segments that any thread may run: the copy stream's own thread, or a
//! compute stream that is waiting for the copy's event (it *helps*).
//!
//! Why: a copy between CPU devices is a memcpy that needs a core like any
//! step. With one core per device, handing the copy to the copy stream's
//! thread and back costs two thread switches per split boundary; the waiting
//! compute thread running the copy itself costs none. The copy still belongs
//! to its stream (trace, order, events): only the thread that runs it varies.
//!
//! Invariants (per copy stream, `claimed` and `finished` count segments):
//! - segment `k` is claimed only when `finished == claimed == k`, by one
//!   compare-and-swap of `claimed` from `k` to `k + 1`: each segment runs
//!   exactly once, and after every earlier segment of its stream finished
//!   (stream order);
//! - a segment is claimed only once every event it waits on was recorded, so
//!   the thread that claimed it never blocks inside it;
//! - its events are recorded before `finished` becomes `k + 1` (Release), so
//!   whoever sees `finished > k` (Acquire) sees the copy's bytes.
//!
//! It lives here, beside the events, so that `tests/loom.rs` checks this code
//! (the runtime's executor uses it as is).

use crate::shim::AtomicUsize;
use std::sync::atomic::Ordering;

/// Progress of one copy stream in one run.
pub struct CopyProgress {
    claimed: AtomicUsize,
    finished: AtomicUsize,
}

impl Default for CopyProgress {
    fn default() -> CopyProgress {
        CopyProgress {
            claimed: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
        }
    }
}

impl CopyProgress {
    /// Back to the start (between runs only).
    pub fn reset(&self) {
        self.claimed.store(0, Ordering::Relaxed);
        self.finished.store(0, Ordering::Release);
    }

    /// Segments finished so far.
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::Acquire)
    }

    /// True when segment `k` is the next to run and nobody runs it yet.
    pub fn is_next_unclaimed(&self, k: usize) -> bool {
        self.finished() == k && self.claimed.load(Ordering::Acquire) == k
    }

    /// Claims segment `k` (see the module invariants); true when this
    /// thread now owns it and must run it, then call [`Self::finish`].
    pub fn claim(&self, k: usize) -> bool {
        self.finished() == k
            && (self.claimed)
                .compare_exchange(k, k + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Marks segment `k` finished (after its events were recorded).
    pub fn finish(&self, k: usize) {
        self.finished.store(k + 1, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn segments_are_claimed_once_and_in_order() {
        let p = CopyProgress::default();
        assert!(!p.claim(1), "segment 1 before segment 0 finished");
        assert!(p.is_next_unclaimed(0) && p.claim(0));
        assert!(!p.claim(0) && !p.is_next_unclaimed(0), "claimed twice");
        assert!(!p.claim(1), "segment 1 while segment 0 runs");
        p.finish(0);
        assert_eq!(p.finished(), 1);
        assert!(p.claim(1));
        p.reset();
        assert!(p.is_next_unclaimed(0));
    }

    #[test]
    fn racing_threads_run_every_segment_exactly_once() {
        const SEGMENTS: usize = 2_000;
        let p = CopyProgress::default();
        let runs: Vec<AtomicUsize> = (0..SEGMENTS).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while p.finished() < SEGMENTS {
                        let k = p.finished();
                        if k < SEGMENTS && p.claim(k) {
                            runs[k].fetch_add(1, Ordering::Relaxed);
                            p.finish(k);
                        }
                    }
                });
            }
        });
        assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
    }
}
