//! What one thread of a job sees, and how a job is shared out.
//!
//! Invariant: thread `ith` of `nth` always gets the same share of a job
//! ([`share`]), so results do not depend on scheduling.

use crate::barrier::SpinBarrier;
use std::ops::Range;

/// What one thread of a job knows: who it is, and how to wait for the others.
pub struct ThreadCtx<'a> {
    /// This thread's index, `0..nth`; the caller's thread is 0.
    pub ith: usize,
    /// Threads running the job.
    pub nth: usize,
    barrier: &'a SpinBarrier,
}

impl<'a> ThreadCtx<'a> {
    /// Thread `ith` of `nth`, meeting the others at `barrier`.
    pub(crate) fn new(ith: usize, nth: usize, barrier: &'a SpinBarrier) -> ThreadCtx<'a> {
        ThreadCtx { ith, nth, barrier }
    }

    /// A context for running a job on the calling thread alone (tests, tools).
    pub fn single<R>(f: impl FnOnce(&ThreadCtx<'_>) -> R) -> R {
        let barrier = SpinBarrier::new(1);
        f(&ThreadCtx::new(0, 1, &barrier))
    }

    /// Waits until every thread of the job reached this point (for kernels
    /// with phases, e.g. quantize the activations, then multiply).
    pub fn barrier(&self) {
        self.barrier.wait();
    }

    /// This thread's contiguous share of `0..n` (balanced to within one).
    pub fn share(&self, n: usize) -> Range<usize> {
        share(n, self.ith, self.nth)
    }
}

/// Part `ith` of `nth` of `0..n`, balanced to within one item.
pub fn share(n: usize, ith: usize, nth: usize) -> Range<usize> {
    let base = n / nth;
    let extra = n % nth;
    let start = ith * base + ith.min(extra);
    let len = base + usize::from(ith < extra);
    start..start + len
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_range_once() {
        for n in [0, 1, 3, 17, 783] {
            for nth in 1..5 {
                let mut next = 0;
                for ith in 0..nth {
                    let r = share(n, ith, nth);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }
}
