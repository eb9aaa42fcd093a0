//! One persistent thread pool for the whole run: workers are spawned once,
//! spin briefly between jobs (so dispatching a job costs well under a
//! microsecond), then sleep on a condition variable when idle.
//!
//! Invariants:
//! - [`ThreadPool::run`] returns only after every thread finished the job, so
//!   a job may borrow from the caller's stack, and every write of the job
//!   happens-before `run` returns (each worker's Release increment of
//!   `finished`, Acquired by `run`);
//! - everything `run` writes before posting a job (the job itself, the reset
//!   barrier) happens-before the workers start it (Release on the epoch in
//!   `state`, Acquired by the workers);
//! - no lost wake-up: a worker counts itself as a sleeper and reads the epoch
//!   in one read-modify-write of `state`, holding `sleep_lock` until it sleeps;
//!   `run` bumps the epoch and reads the sleeper count in one read-modify-write
//!   of the same word. Read-modify-writes of one word are totally ordered, so
//!   either the worker sees the new epoch and does not sleep, or `run` sees
//!   the sleeper and notifies under `sleep_lock`, which it can take only once
//!   the worker sleeps. No SeqCst is involved (loom can prove it);
//! - parking: [`ThreadPool::park_idle`] bumps `parks`; a spinning worker that
//!   sees it move since it last looked sleeps at once, down the same sleeping
//!   path as after its spin budget (so the no-lost-wake-up argument above is
//!   unchanged: parking only shortens the spin);
//! - shutdown: `Drop` sets `shutdown`, then notifies under `sleep_lock`, where
//!   a worker checks `shutdown` before it sleeps; every worker is joined;
//! - a panic on any thread is caught, poisons the job's barrier (threads
//!   waiting there give up instead of waiting forever) and is re-raised on the
//!   calling thread after all threads are done; the pool stays usable.

use crate::barrier::{SpinBarrier, gave_up};
use crate::ctx::ThreadCtx;
use crate::shim::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, JoinHandle, Mutex, ThreadBuilder, lock,
    relax, spin_limit, spin_loop, wait,
};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// How long an idle worker spins before it sleeps: long enough to cover the
/// gap between two steps of a plan, short enough not to burn a core between runs.
const SPIN_ITERATIONS: u32 = spin_limit(200_000);

/// `state` holds the sleeping workers in its low bits and the job epoch above.
const SLEEPER_BITS: u32 = 16;
/// The sleeper count's bits of `state`.
const SLEEPERS: u64 = (1 << SLEEPER_BITS) - 1;
/// One epoch, as added to `state`.
const ONE_EPOCH: u64 = 1 << SLEEPER_BITS;

/// A value alone on its cache lines (two: adjacent-line prefetchers pull
/// pairs), so that threads spinning on it are not slowed by writes to its
/// neighbours. Without it on `state` and `finished`, an empty job on two
/// threads took 285 ns per `run` on the 2-core development host, not 155 ns.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

type Job<'a> = dyn Fn(&ThreadCtx<'_>) + Sync + 'a;

struct Shared {
    n_threads: usize,
    /// The job epoch (bumped once per job; workers run the job when it
    /// changes) and, in the low [`SLEEPER_BITS`], the workers asleep or about
    /// to sleep. One word, so posting a job tells `run` whether to wake anyone.
    state: Padded<AtomicU64>,
    /// The current job, valid while `run` is on the stack.
    job: Mutex<Option<JobPtr>>,
    /// Workers done with the current job.
    finished: Padded<AtomicUsize>,
    barrier: SpinBarrier,
    shutdown: AtomicBool,
    /// Bumped by [`ThreadPool::park_idle`]: idle workers stop spinning.
    parks: AtomicU64,
    /// Spins of an idle worker before it sleeps.
    spin_budget: u32,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    panicked: Mutex<Option<Box<dyn Any + Send>>>,
    /// Called first on each worker thread, with its index.
    on_start: Box<dyn Fn(usize) + Send + Sync>,
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
        ThreadPool::with_start(n_threads, |_| {})
    }

    /// A pool whose worker thread `ith` (`1..n_threads`) first calls
    /// `on_start(ith)`, e.g. to pin itself to a core.
    pub fn with_start(
        n_threads: usize,
        on_start: impl Fn(usize) + Send + Sync + 'static,
    ) -> ThreadPool {
        ThreadPool::with_spin_budget(n_threads, SPIN_ITERATIONS, on_start)
    }

    /// [`ThreadPool::with_start`] with idle workers spinning `spin_budget`
    /// times before they sleep (tests use `u32::MAX`: never, unless parked).
    #[doc(hidden)]
    pub fn with_spin_budget(
        n_threads: usize,
        spin_budget: u32,
        on_start: impl Fn(usize) + Send + Sync + 'static,
    ) -> ThreadPool {
        let n_threads = n_threads.max(1);
        assert!(
            (n_threads as u64) < SLEEPERS,
            "{n_threads} threads in one pool"
        );
        let shared = Arc::new(Shared {
            n_threads,
            state: Padded(AtomicU64::new(0)),
            job: Mutex::new(None),
            finished: Padded(AtomicUsize::new(0)),
            barrier: SpinBarrier::new(n_threads),
            shutdown: AtomicBool::new(false),
            parks: AtomicU64::new(0),
            spin_budget,
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            panicked: Mutex::new(None),
            on_start: Box::new(on_start),
        });
        let workers = (1..n_threads)
            .map(|ith| {
                let shared = Arc::clone(&shared);
                ThreadBuilder::new()
                    .name(format!("ggplan-cpu-{ith}"))
                    .spawn(move || worker(&shared, ith))
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

    /// Tells idle workers to sleep now instead of spinning out their budget:
    /// for a caller about to leave the pool idle for long (its stream waits
    /// for another device, or has nothing left to do this run), so spinning
    /// workers do not hold cores that other processes (a server on the same
    /// host) or threads need. The next job wakes them as usual.
    pub fn park_idle(&self) {
        self.shared.parks.fetch_add(1, Release);
    }

    /// Workers asleep or about to sleep (models and tests wait for it to
    /// drive a worker down the sleeping path).
    #[doc(hidden)]
    pub fn sleeping_workers(&self) -> usize {
        (self.shared.state.load(Relaxed) & SLEEPERS) as usize
    }

    /// Runs `job` on every thread (the caller's is thread 0) and returns when
    /// all are done. A panic in any thread is re-raised here.
    pub fn run(&self, job: &(dyn Fn(&ThreadCtx<'_>) + Sync)) {
        let shared = &*self.shared;
        if shared.n_threads == 1 {
            ThreadCtx::single(|ctx| job(ctx));
            return;
        }
        let _one_at_a_time = lock(&self.running);
        // SAFETY: only the lifetime is erased; workers drop their copy before
        // incrementing `finished`, and we wait for all of them below.
        let ptr = JobPtr(unsafe {
            std::mem::transmute::<*const Job<'_>, *const Job<'static>>(job as *const Job<'_>)
        });
        *lock(&shared.job) = Some(ptr);
        shared.finished.store(0, Relaxed);
        shared.barrier.reset();
        // Post the job; a worker that counted itself as a sleeper before this
        // holds `sleep_lock` until it sleeps, so notifying under it wakes it.
        let before = shared.state.fetch_add(ONE_EPOCH, Release);
        if before & SLEEPERS != 0 {
            let _guard = lock(&shared.sleep_lock);
            shared.wake.notify_all();
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            job(&ThreadCtx::new(0, shared.n_threads, &shared.barrier))
        }));
        if result.is_err() {
            shared.barrier.poison();
        }
        let mut spins = 0u32;
        while shared.finished.load(Acquire) != shared.n_threads - 1 {
            relax(&mut spins);
        }
        *lock(&shared.job) = None;
        let worker_panic = lock(&shared.panicked).take();
        match (result, worker_panic) {
            (Err(own), _) if !gave_up(own.as_ref()) => resume_unwind(own),
            (_, Some(worker)) => resume_unwind(worker),
            (Err(own), None) => resume_unwind(own),
            (Ok(()), None) => {}
        }
    }
}

impl Shared {
    /// Waits until the epoch moves past `seen` (then returns the new one) or
    /// the pool shuts down (`None`): spins first (its budget, or until
    /// `parks` moves past `parks_seen`), then sleeps.
    fn next_epoch(&self, seen: u64, parks_seen: &mut u64) -> Option<u64> {
        let mut spins = 0u32;
        loop {
            let epoch = self.state.load(Acquire) >> SLEEPER_BITS;
            if epoch != seen {
                return Some(epoch);
            }
            if self.shutdown.load(Acquire) {
                return None;
            }
            let parks = self.parks.load(Relaxed);
            if parks != *parks_seen {
                // Parked: the sleeping path at once (its own checks decide).
                *parks_seen = parks;
                self.sleep(seen);
                spins = 0;
            } else if spins < self.spin_budget {
                spins += 1;
                spin_loop();
            } else {
                self.sleep(seen);
                spins = 0;
            }
        }
    }

    /// Sleeps until the epoch moves past `seen` or the pool shuts down.
    /// Counting this worker as a sleeper reads the epoch in the same
    /// read-modify-write, under `sleep_lock`, held until the wait releases it
    /// (see the module doc for why no wake-up is lost).
    fn sleep(&self, seen: u64) {
        let mut guard = lock(&self.sleep_lock);
        let mut epoch = self.state.fetch_add(1, Acquire) >> SLEEPER_BITS;
        while epoch == seen && !self.shutdown.load(Acquire) {
            guard = wait(&self.wake, guard);
            epoch = self.state.load(Acquire) >> SLEEPER_BITS;
        }
        self.state.fetch_sub(1, Relaxed);
        drop(guard);
    }
}

fn worker(shared: &Shared, ith: usize) {
    (shared.on_start)(ith);
    let mut seen = 0u64;
    let mut parks_seen = 0u64;
    while let Some(epoch) = shared.next_epoch(seen, &mut parks_seen) {
        seen = epoch;
        let job = *lock(&shared.job);
        if let Some(JobPtr(job)) = job {
            let ctx = ThreadCtx::new(ith, shared.n_threads, &shared.barrier);
            // SAFETY: `run` keeps the job alive until `finished` counts us.
            let job = unsafe { &*job };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| job(&ctx))) {
                shared.barrier.poison();
                let mut first = lock(&shared.panicked);
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
        self.shared.shutdown.store(true, Release);
        {
            let _guard = lock(&self.shared.sleep_lock);
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::AcqRel;

    #[test]
    fn parked_workers_sleep_instead_of_spinning_and_wake_for_the_next_job() {
        // Workers that would spin forever: only a park puts them to sleep.
        let pool = ThreadPool::with_spin_budget(3, u32::MAX, |_| {});
        let count = AtomicUsize::new(0);
        let job = |_: &ThreadCtx<'_>| {
            count.fetch_add(1, AcqRel);
        };
        for round in 1..=3 {
            pool.run(&job);
            assert_eq!(count.load(Acquire), 3 * round);
            pool.park_idle();
            // A deadline only so that a broken park fails instead of hanging.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while pool.sleeping_workers() < 2 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "workers still spinning"
                );
                std::thread::yield_now();
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
    fn sleeping_workers_wake_for_the_next_job() {
        let pool = ThreadPool::new(3);
        for _ in 0..3 {
            // Long enough for the workers to spin out and sleep.
            std::thread::sleep(std::time::Duration::from_millis(30));
            let n = AtomicUsize::new(0);
            pool.run(&|_| {
                n.fetch_add(1, Relaxed);
            });
            assert_eq!(n.load(Relaxed), 3);
        }
    }

    #[test]
    fn the_start_hook_runs_once_on_each_worker() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let pool = ThreadPool::with_start(3, {
            let started = Arc::clone(&started);
            move |ith| lock(&started).push((ith, std::thread::current().name().map(String::from)))
        });
        pool.run(&|_| {});
        let mut started = lock(&started).clone();
        started.sort();
        assert_eq!(
            started,
            [
                (1, Some("ggplan-cpu-1".into())),
                (2, Some("ggplan-cpu-2".into()))
            ]
        );
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
