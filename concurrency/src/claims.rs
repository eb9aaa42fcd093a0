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
//!   whoever sees `finished > k` (Acquire) sees the copy's bytes;
//! - a helper ([`CopyProgress::help_until`]) returns only when its segment
//!   finished or the run was aborted: a segment claimed by a thread that
//!   then panicked never finishes, and the raised [`Abort`] ends the wait.
//!
//! It lives here, beside the events, so that `tests/loom.rs` checks this code
//! (the runtime's executor uses it as is).

use crate::event::{Abort, Aborted};
use crate::shim::{AtomicUsize, relax_often};
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

    /// Returns once segment `k` finished, running the stream's unfinished
    /// segments up to it in order on this thread: for the next one nobody
    /// runs yet, `wait_sources(cx, next)` waits on its events (helping
    /// other streams as it likes), then a claim, `run(cx, next)` (the copy,
    /// its events recorded) and [`Self::finish`]. A segment another thread
    /// claimed is short (its sources were ready), so this thread spins.
    /// `Err` when `abort` was raised first.
    pub fn help_until<C>(
        &self,
        k: usize,
        abort: &Abort,
        cx: &mut C,
        mut wait_sources: impl FnMut(&mut C, usize) -> Result<(), Aborted>,
        mut run: impl FnMut(&mut C, usize),
    ) -> Result<(), Aborted> {
        let mut spins = 0u32;
        loop {
            let next = self.finished();
            if next > k {
                return Ok(());
            }
            if abort.is_raised() {
                return Err(Aborted);
            }
            if self.is_next_unclaimed(next) {
                wait_sources(cx, next)?;
                if self.claim(next) {
                    run(cx, next);
                    self.finish(next);
                }
                continue;
            }
            relax_often(&mut spins);
        }
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
    fn a_helper_runs_every_segment_up_to_its_own_after_their_sources() {
        let p = CopyProgress::default();
        let abort = Abort::default();
        let mut log = Vec::new();
        let helped = p.help_until(
            1,
            &abort,
            &mut log,
            |log, k| {
                log.push(("sources", k));
                Ok(())
            },
            |log, k| log.push(("run", k)),
        );
        assert_eq!(helped, Ok(()));
        let expected = [("sources", 0), ("run", 0), ("sources", 1), ("run", 1)];
        assert_eq!(log, expected);
        assert_eq!(p.finished(), 2);
        // Already finished: nothing runs again.
        let again = p.help_until(
            0,
            &abort,
            &mut log,
            |_, _| unreachable!(),
            |_, _| unreachable!(),
        );
        assert_eq!(again, Ok(()));
    }

    #[test]
    fn an_aborted_run_ends_a_helper_and_a_failed_source_runs_nothing() {
        let p = CopyProgress::default();
        let abort = Abort::default();
        let failed = p.help_until(
            0,
            &abort,
            &mut (),
            |_, _| Err(Aborted),
            |_, _| unreachable!(),
        );
        assert_eq!(failed, Err(Aborted));
        assert!(p.is_next_unclaimed(0), "nothing claimed");
        // A thread claimed segment 0, then panicked and aborted the run.
        assert!(p.claim(0));
        abort.raise(&[]);
        let ended = p.help_until(
            0,
            &abort,
            &mut (),
            |_, _| unreachable!(),
            |_, _| unreachable!(),
        );
        assert_eq!(ended, Err(Aborted));
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
