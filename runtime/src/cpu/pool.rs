//! One persistent thread pool for the whole run: workers are spawned once,
//! spin briefly between steps (so dispatching a step costs well under a
//! microsecond), then sleep on a condition variable when idle.
//!
//! Invariants:
//! - [`ThreadPool::run`] returns only after every thread finished the job, so
//!   a job may borrow from the caller's stack;
//! - thread `ith` of `nth` always gets the same share of a job
//!   ([`ThreadCtx::share`]), so results do not depend on scheduling;
//! - a panic on any thread is caught, poisons the job's barrier (threads
//!   waiting there give up instead of waiting forever) and is re-raised on the
//!   calling thread after all threads are done; the pool stays usable.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// How long an idle worker spins before it sleeps: long enough to cover the
/// gap between two steps of a plan, short enough not to burn a core between runs.
const SPIN_ITERATIONS: u32 = 200_000;

/// One wait iteration: spin, but yield the core now and then so that a pool
/// with more threads than cores still makes progress.
fn relax(spins: &mut u32) {
    *spins += 1;
    if spins.is_multiple_of(1024) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The panic payload of a thread that left a barrier because another thread
/// of its job panicked (never the panic to report).
struct GaveUp;

fn gave_up(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<GaveUp>()
}

/// A barrier for the threads of one job (all `nth` of them must call it).
pub struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    /// Set when a thread of the job panicked: waiters give up instead of
    /// waiting forever for it.
    poisoned: AtomicBool,
}

impl SpinBarrier {
    fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    fn wait(&self) {
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
}

/// What one thread of a job knows: who it is, and how to wait for the others.
pub struct ThreadCtx<'a> {
    /// This thread's index, `0..nth`; the caller's thread is 0.
    pub ith: usize,
    /// Threads running the job.
    pub nth: usize,
    barrier: &'a SpinBarrier,
}

impl ThreadCtx<'_> {
    /// A context for running a job on the calling thread alone (tests, tools).
    pub fn single<R>(f: impl FnOnce(&ThreadCtx<'_>) -> R) -> R {
        let barrier = SpinBarrier::new(1);
        f(&ThreadCtx {
            ith: 0,
            nth: 1,
            barrier: &barrier,
        })
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

type Job<'a> = dyn Fn(&ThreadCtx<'_>) + Sync + 'a;

struct Shared {
    n_threads: usize,
    /// Bumped once per job; workers run the job when it changes.
    epoch: AtomicU64,
    /// The current job, valid while `run` is on the stack.
    job: Mutex<Option<JobPtr>>,
    finished: AtomicUsize,
    barrier: SpinBarrier,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    panicked: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

/// A job pointer with its lifetime erased; `run` guarantees it outlives use.
#[derive(Clone, Copy)]
struct JobPtr(*const Job<'static>);
// SAFETY: the pointee is `Sync` (the job type requires it) and `run` keeps it
// alive until every worker has finished with it.
unsafe impl Send for JobPtr {}

/// A fixed set of threads that run one job at a time.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises `run` calls from several threads (one job at a time).
    running: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `n_threads` (at least 1; the caller's thread counts as one).
    pub fn new(n_threads: usize) -> ThreadPool {
        ThreadPool::with_cores(n_threads, Vec::new())
    }

    /// A pool whose worker `ith` is pinned to `cores[ith % len]` (a core
    /// group's pool; the caller pins itself, see `CpuDevice::pin_caller`).
    pub fn pinned(n_threads: usize, cores: Vec<usize>) -> ThreadPool {
        ThreadPool::with_cores(n_threads, cores)
    }

    fn with_cores(n_threads: usize, cores: Vec<usize>) -> ThreadPool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            n_threads,
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            finished: AtomicUsize::new(0),
            barrier: SpinBarrier::new(n_threads),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            panicked: Mutex::new(None),
        });
        let workers = (1..n_threads)
            .map(|ith| {
                let shared = Arc::clone(&shared);
                let core = (!cores.is_empty()).then(|| cores[ith % cores.len()]);
                std::thread::Builder::new()
                    .name(format!("ggplan-cpu-{ith}"))
                    .spawn(move || {
                        if let Some(core) = core {
                            crate::device::cpu::pin_current_thread(&[core]);
                        }
                        worker(&shared, ith)
                    })
                    .expect("spawning a pool thread")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            running: Mutex::new(()),
        }
    }

    /// Threads in the pool (including the caller's).
    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// Runs `job` on every thread (the caller's is thread 0) and returns when
    /// all are done. A panic in any thread is re-raised here.
    pub fn run(&self, job: &(dyn Fn(&ThreadCtx<'_>) + Sync)) {
        let shared = &*self.shared;
        if shared.n_threads == 1 {
            ThreadCtx::single(|ctx| job(ctx));
            return;
        }
        let _one_at_a_time = self.running.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: only the lifetime is erased; workers drop their copy before
        // incrementing `finished`, and we wait for all of them below.
        let ptr = JobPtr(unsafe {
            std::mem::transmute::<*const Job<'_>, *const Job<'static>>(job as *const Job<'_>)
        });
        *shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(ptr);
        shared.finished.store(0, Relaxed);
        shared.barrier.arrived.store(0, Relaxed);
        shared.barrier.poisoned.store(false, Relaxed);
        shared.epoch.fetch_add(1, SeqCst);
        if shared.sleepers.load(SeqCst) > 0 {
            let _guard = shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.wake.notify_all();
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            job(&ThreadCtx {
                ith: 0,
                nth: shared.n_threads,
                barrier: &shared.barrier,
            })
        }));
        if result.is_err() {
            shared.barrier.poisoned.store(true, Release);
        }
        let mut spins = 0u32;
        while shared.finished.load(Acquire) != shared.n_threads - 1 {
            relax(&mut spins);
        }
        *shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let worker_panic = shared
            .panicked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match (result, worker_panic) {
            (Err(own), _) if !gave_up(own.as_ref()) => resume_unwind(own),
            (_, Some(worker)) => resume_unwind(worker),
            (Err(own), None) => resume_unwind(own),
            (Ok(()), None) => {}
        }
    }
}

fn worker(shared: &Shared, ith: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for a new epoch: spin first, then sleep.
        let mut spins = 0u32;
        loop {
            let epoch = shared.epoch.load(Acquire);
            if epoch != seen {
                seen = epoch;
                break;
            }
            if shared.shutdown.load(Acquire) {
                return;
            }
            if spins < SPIN_ITERATIONS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let guard = shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.sleepers.fetch_add(1, SeqCst);
            if shared.epoch.load(SeqCst) == seen && !shared.shutdown.load(SeqCst) {
                drop(shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner()));
            } else {
                drop(guard);
            }
            shared.sleepers.fetch_sub(1, SeqCst);
            spins = 0;
        }
        if shared.shutdown.load(Acquire) {
            return;
        }
        let job = *shared.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(JobPtr(job)) = job {
            let ctx = ThreadCtx {
                ith,
                nth: shared.n_threads,
                barrier: &shared.barrier,
            };
            // SAFETY: `run` keeps the job alive until `finished` counts us.
            let job = unsafe { &*job };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| job(&ctx))) {
                shared.barrier.poisoned.store(true, Release);
                let mut first = shared.panicked.lock().unwrap_or_else(|e| e.into_inner());
                // Keep the original panic, not a barrier's "gave up" one.
                if first.as_deref().is_none_or(gave_up) {
                    *first = Some(payload);
                }
            }
        }
        shared.finished.fetch_add(1, Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        {
            let _guard = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
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

    #[test]
    fn every_thread_runs_every_job_and_barriers_order_phases() {
        let pool = ThreadPool::new(3);
        let counts: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for round in 0..300 {
            let phase_one = AtomicUsize::new(0);
            pool.run(&|ctx| {
                counts[ctx.ith].fetch_add(1, Relaxed);
                phase_one.fetch_add(1, AcqRel);
                ctx.barrier();
                assert_eq!(phase_one.load(Acquire), 3, "round {round}");
            });
        }
        for c in &counts {
            assert_eq!(c.load(Relaxed), 300);
        }
    }

    #[test]
    fn a_panic_before_a_barrier_does_not_hang_the_others() {
        let pool = ThreadPool::new(2);
        for culprit in [0, 1] {
            let r = catch_unwind(AssertUnwindSafe(|| {
                pool.run(&|ctx| {
                    if ctx.ith == culprit {
                        panic!("kernel bug");
                    }
                    ctx.barrier();
                })
            }));
            let msg = r.unwrap_err();
            assert_eq!(msg.downcast_ref::<&str>(), Some(&"kernel bug"));
        }
        let n = AtomicUsize::new(0);
        pool.run(&|ctx| {
            ctx.barrier();
            n.fetch_add(1, Relaxed);
        });
        assert_eq!(n.load(Relaxed), 2);
    }

    #[test]
    fn a_worker_panic_reaches_the_caller() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|ctx| {
                if ctx.ith == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        // The pool still works afterwards.
        let n = AtomicUsize::new(0);
        pool.run(&|_| {
            n.fetch_add(1, Relaxed);
        });
        assert_eq!(n.load(Relaxed), 2);
    }
}
