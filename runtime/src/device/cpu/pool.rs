//! The CPU thread pool: [`concurrency::ThreadPool`] (one persistent pool,
//! workers spin between steps then sleep; its invariants and loom proofs live
//! in the `concurrency` crate), plus pinning its workers to a core group.

use super::affinity::pin_or_warn;
pub use concurrency::{ThreadCtx, share};

/// A fixed set of threads that run one job at a time.
pub struct ThreadPool(concurrency::ThreadPool);

impl ThreadPool {
    /// A pool of `n_threads` (at least 1; the caller's thread counts as one).
    pub fn new(n_threads: usize) -> ThreadPool {
        ThreadPool(concurrency::ThreadPool::new(n_threads))
    }

    /// A pool whose worker `ith` is pinned to `cores[ith % len]` (a core
    /// group's pool; the caller pins itself, see `CpuDevice::pin_caller`).
    pub fn pinned(n_threads: usize, cores: Vec<usize>) -> ThreadPool {
        ThreadPool(concurrency::ThreadPool::with_start(n_threads, move |ith| {
            if !cores.is_empty() {
                pin_or_warn(&[cores[ith % cores.len()]]);
            }
        }))
    }

    /// Threads in the pool (including the caller's).
    pub fn n_threads(&self) -> usize {
        self.0.n_threads()
    }

    /// Runs `job` on every thread (the caller's is thread 0) and returns when
    /// all are done. A panic in any thread is re-raised here.
    pub fn run(&self, job: &(dyn Fn(&ThreadCtx<'_>) + Sync)) {
        self.0.run(job);
    }

    /// Idle workers sleep now instead of spinning out their budget
    /// ([`concurrency::ThreadPool::park_idle`]).
    pub fn park_idle(&self) {
        self.0.park_idle();
    }
}
