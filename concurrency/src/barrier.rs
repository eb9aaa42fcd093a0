//! The barrier between the phases of one job.
//!
//! Invariants: every write a thread makes before [`SpinBarrier::wait`]
//! happens-before every thread's return from that wait (the arrivals form one
//! read-modify-write chain on `arrived`, and the last arrival publishes them
//! with a Release increment of `generation` that the waiters Acquire); the
//! barrier is reusable: the last arrival resets `arrived` before it opens the
//! next generation.

use crate::shim::{AtomicBool, AtomicUsize, relax};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// The panic payload of a thread that left a barrier because another thread
/// of its job panicked (never the panic to report).
pub(crate) struct GaveUp;

/// True when `payload` is a barrier's [`GaveUp`], not a panic of the job.
pub(crate) fn gave_up(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<GaveUp>()
}

/// A spinning barrier for the `n` threads of one job (all of them must call
/// [`SpinBarrier::wait`] the same number of times).
pub struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    /// Set when a thread of the job panicked: waiters give up instead of
    /// waiting forever for it.
    poisoned: AtomicBool,
}

impl SpinBarrier {
    /// A barrier for `n` threads.
    pub fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Waits until all `n` threads arrived. Panics (with a payload the pool
    /// recognises and does not report) if the barrier was poisoned.
    pub fn wait(&self) {
        if self.n == 1 {
            return;
        }
        let generation = self.generation.load(Acquire);
        if self.arrived.fetch_add(1, AcqRel) + 1 == self.n {
            self.arrived.store(0, Relaxed);
            self.generation.fetch_add(1, Release);
        } else {
            let mut spins = 0u32;
            while self.generation.load(Acquire) == generation {
                if self.poisoned.load(Relaxed) {
                    std::panic::panic_any(GaveUp);
                }
                relax(&mut spins);
            }
        }
    }

    /// Makes waiters give up (a thread of the job panicked).
    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Release);
    }

    /// Readies the barrier for a new job: nobody arrived, not poisoned. Only
    /// while no thread runs a job (the pool publishes it with the next job).
    pub(crate) fn reset(&self) {
        self.arrived.store(0, Relaxed);
        self.poisoned.store(false, Relaxed);
    }
}
