//! Model checks of the pool, its barrier, the host events, the copy claims
//! and the executor's help/abort loop (the invariants are in the crate doc). Each model is small (two threads, one or two jobs),
//! small enough for loom to explore every interleaving with no preemption
//! bound (about 25,000 for the largest; the file runs in about two seconds):
//! `RUSTFLAGS="--cfg loom" cargo test -p ggplan-concurrency --release --test loom`.
//!
//! Every model was seen to fail when the code it checks is broken (an
//! ordering weakened, a notification or a reset left out); the commit that
//! added this file lists what was broken for each.
#![cfg(loom)]

use concurrency::{Abort, Aborted, CopyProgress, Event, SpinBarrier, ThreadPool};
use loom::sync::Arc;
use loom::sync::atomic::AtomicUsize;
use loom::thread;
use std::sync::atomic::Ordering::Relaxed;

/// Explores every interleaving of `model`. No preemption bound: the models
/// are small enough to check exhaustively (a bound of 3 visits under a
/// twentieth of the interleavings, and also catches every bug tried).
fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    builder.check(model);
}

/// Two slots written with Relaxed stores: a read sees a write only if the
/// synchronisation under test orders them.
fn slots() -> [AtomicUsize; 2] {
    [AtomicUsize::new(0), AtomicUsize::new(0)]
}

/// Waits until the pool's worker is asleep (or about to be).
fn until_the_worker_sleeps(pool: &ThreadPool) {
    while pool.sleeping_workers() == 0 {
        thread::yield_now();
    }
}

#[test]
fn barrier_orders_writes_across_two_generations() {
    /// Thread `me` of two: writes its slot, meets the other thread, reads
    /// the other's slot; twice, reusing the barrier.
    fn phases(barrier: &SpinBarrier, slots: &[AtomicUsize; 2], me: usize) {
        for generation in 1..=2 {
            slots[me].store(generation, Relaxed);
            barrier.wait();
            // The other may already be writing the next generation.
            assert!(slots[1 - me].load(Relaxed) >= generation);
        }
    }
    check(|| {
        let barrier = Arc::new(SpinBarrier::new(2));
        let slots = Arc::new(slots());
        let other = thread::spawn({
            let (barrier, slots) = (Arc::clone(&barrier), Arc::clone(&slots));
            move || phases(&barrier, &slots, 1)
        });
        phases(&barrier, &slots, 0);
        other.join().unwrap();
    });
}

#[test]
fn pool_run_returns_after_the_job_ran_on_every_thread() {
    check(|| {
        let pool = ThreadPool::new(2);
        let ran = slots();
        pool.run(&|ctx| ran[ctx.ith].store(1, Relaxed));
        assert_eq!(ran.each_ref().map(|r| r.load(Relaxed)), [1, 1]);
    });
}

#[test]
fn pool_runs_two_jobs_in_a_row() {
    check(|| {
        let pool = ThreadPool::new(2);
        let (first, second) = (slots(), slots());
        pool.run(&|ctx| first[ctx.ith].store(1, Relaxed));
        pool.run(&|ctx| {
            // The other thread's write in the previous job is visible.
            assert_eq!(first[1 - ctx.ith].load(Relaxed), 1);
            second[ctx.ith].store(1, Relaxed);
        });
        assert_eq!(second.each_ref().map(|r| r.load(Relaxed)), [1, 1]);
    });
}

#[test]
fn pool_wakes_a_sleeping_worker_for_the_next_job() {
    check(|| {
        let pool = ThreadPool::new(2);
        let ran = slots();
        for job in 1..=2 {
            until_the_worker_sleeps(&pool);
            pool.run(&|ctx| ran[ctx.ith].store(job, Relaxed));
            assert_eq!(ran.each_ref().map(|r| r.load(Relaxed)), [job, job]);
        }
    });
}

#[test]
fn a_parked_worker_sleeps_and_wakes_for_the_next_job() {
    check(|| {
        // A worker that never stops spinning unless parked: the park may come
        // while it still runs the first job, or while it spins after it.
        let pool = ThreadPool::with_spin_budget(2, u32::MAX, |_| {});
        let ran = slots();
        pool.run(&|ctx| ran[ctx.ith].store(1, Relaxed));
        pool.park_idle();
        until_the_worker_sleeps(&pool);
        pool.run(&|ctx| ran[ctx.ith].store(2, Relaxed));
        assert_eq!(ran.each_ref().map(|r| r.load(Relaxed)), [2, 2]);
    });
}

#[test]
fn dropping_a_fresh_pool_joins_its_worker() {
    check(|| {
        // The worker is starting or spinning when the pool drops.
        drop(ThreadPool::new(2));
    });
}

#[test]
fn dropping_the_pool_after_a_job_joins_its_sleeping_worker() {
    check(|| {
        let pool = ThreadPool::new(2);
        pool.run(&|_| {});
        until_the_worker_sleeps(&pool);
        drop(pool);
    });
}

#[test]
fn event_wait_sees_the_writes_made_before_the_record() {
    check(|| {
        let event = Arc::new(Event::default());
        let data = Arc::new(AtomicUsize::new(0));
        let recorder = thread::spawn({
            let (event, data) = (Arc::clone(&event), Arc::clone(&data));
            move || {
                data.store(42, Relaxed);
                event.record();
            }
        });
        assert_eq!(event.wait(&Abort::default()), Ok(()));
        assert_eq!(data.load(Relaxed), 42);
        recorder.join().unwrap();
    });
}

#[test]
fn event_wait_ends_on_an_abort() {
    check(|| {
        let event = Arc::new(Event::default());
        let abort = Arc::new(Abort::default());
        let aborter = thread::spawn({
            let (event, abort) = (Arc::clone(&event), Arc::clone(&abort));
            // What the executor does when a stream panics.
            move || abort.raise(std::slice::from_ref(&event))
        });
        assert_eq!(event.wait(&abort), Err(Aborted));
        aborter.join().unwrap();
    });
}

#[test]
fn event_reset_between_runs_waits_for_the_next_record() {
    check(|| {
        let event = Arc::new(Event::default());
        let data = Arc::new(AtomicUsize::new(0));
        let abort = Abort::default();
        for run in 1..=2 {
            let recorder = thread::spawn({
                let (event, data) = (Arc::clone(&event), Arc::clone(&data));
                move || {
                    data.store(run, Relaxed);
                    event.record();
                }
            });
            assert_eq!(event.wait(&abort), Ok(()));
            assert_eq!(data.load(Relaxed), run);
            recorder.join().unwrap();
            event.reset();
        }
    });
}

#[test]
fn copy_segments_run_once_in_order_and_their_writes_are_seen() {
    /// A thread helping with a copy stream of two segments as the executor's
    /// `help_until` does: the next unfinished segment, if nobody runs it, is
    /// claimed, run (a Relaxed write of its slot) and finished.
    fn help(p: &CopyProgress, slots: &[AtomicUsize; 2], runs: &[AtomicUsize; 2]) {
        loop {
            let k = p.finished();
            if k == 2 {
                break;
            }
            if p.is_next_unclaimed(k) && p.claim(k) {
                assert_eq!(runs[k].fetch_add(1, Relaxed), 0, "segment {k} ran twice");
                if k == 1 {
                    // Stream order: segment 0 finished, and its bytes are here.
                    assert_eq!(slots[0].load(Relaxed), 1);
                }
                slots[k].store(1, Relaxed);
                p.finish(k);
            } else {
                thread::yield_now();
            }
        }
        // Whoever sees the stream finished sees every segment's bytes.
        assert_eq!((slots[0].load(Relaxed), slots[1].load(Relaxed)), (1, 1));
    }
    check(|| {
        let p = Arc::new(CopyProgress::default());
        let runs = Arc::new(slots());
        let slots = Arc::new(slots());
        let other = thread::spawn({
            let (p, slots, runs) = (Arc::clone(&p), Arc::clone(&slots), Arc::clone(&runs));
            move || help(&p, &slots, &runs)
        });
        help(&p, &slots, &runs);
        other.join().unwrap();
        assert_eq!((runs[0].load(Relaxed), runs[1].load(Relaxed)), (1, 1));
    });
}

/// The executor's copy stream in miniature, driven through the real
/// [`CopyProgress::help_until`]: segment `k` copies `source[k]` into
/// `copied[k]`, and segment 0's source is written by a compute stream that
/// records `ready` after it.
struct CopyStream {
    progress: CopyProgress,
    abort: Abort,
    ready: Event,
    source: [AtomicUsize; 2],
    copied: [AtomicUsize; 2],
    runs: [AtomicUsize; 2],
}

impl CopyStream {
    fn new() -> CopyStream {
        CopyStream {
            progress: CopyProgress::default(),
            abort: Abort::default(),
            ready: Event::default(),
            source: slots(),
            copied: slots(),
            runs: slots(),
        }
    }

    /// Waits for segment `k` as a compute stream does: helping.
    fn help_until(&self, k: usize) -> Result<(), Aborted> {
        self.progress.help_until(
            k,
            &self.abort,
            &mut (),
            |_, next| {
                if next == 0 {
                    self.ready.wait(&self.abort)
                } else {
                    Ok(())
                }
            },
            |_, next| {
                assert_eq!(
                    self.runs[next].fetch_add(1, Relaxed),
                    0,
                    "segment {next} ran twice"
                );
                let bytes = self.source[next].load(Relaxed);
                assert_eq!(bytes, 1, "segment {next} ran before its source was written");
                self.copied[next].store(bytes, Relaxed);
            },
        )
    }
}

#[test]
fn helping_streams_run_each_copy_once_after_its_source_and_see_it() {
    check(|| {
        let stream = Arc::new(CopyStream::new());
        // Segment 1's source is there from the start; segment 0's is written
        // by the compute stream below.
        stream.source[1].store(1, Relaxed);
        let compute = thread::spawn({
            let stream = Arc::clone(&stream);
            move || {
                stream.source[0].store(1, Relaxed);
                stream.ready.record();
                // Then it needs segment 1, which follows segment 0.
                assert_eq!(stream.help_until(1), Ok(()));
                assert_eq!(stream.copied.each_ref().map(|c| c.load(Relaxed)), [1, 1]);
            }
        });
        // Another compute stream needs segment 0's copy.
        assert_eq!(stream.help_until(0), Ok(()));
        assert_eq!(stream.copied[0].load(Relaxed), 1);
        compute.join().unwrap();
        assert_eq!(stream.runs.each_ref().map(|r| r.load(Relaxed)), [1, 1]);
    });
}

#[test]
fn an_abort_ends_a_helper_waiting_for_a_source_that_never_comes() {
    check(|| {
        let stream = Arc::new(CopyStream::new());
        // The compute stream that would write segment 0's source panics
        // before it does: the executor raises the abort.
        let panicked = thread::spawn({
            let stream = Arc::clone(&stream);
            move || stream.abort.raise(std::slice::from_ref(&stream.ready))
        });
        assert_eq!(stream.help_until(0), Err(Aborted));
        panicked.join().unwrap();
        assert_eq!(
            stream.runs[0].load(Relaxed),
            0,
            "nothing ran without its source"
        );
    });
}

#[test]
fn an_abort_ends_a_helper_whose_copy_was_claimed_by_a_panicking_stream() {
    check(|| {
        let stream = Arc::new(CopyStream::new());
        stream.source[0].store(1, Relaxed);
        stream.ready.record();
        let panicked = thread::spawn({
            let stream = Arc::clone(&stream);
            move || {
                // It claims segment 0, as a helper would, then its copy
                // panics: the segment never finishes, and the run aborts.
                if stream.progress.claim(0) {
                    stream.abort.raise(std::slice::from_ref(&stream.ready));
                }
            }
        });
        // Either this thread ran the copy first, or the abort ends its wait.
        match stream.help_until(0) {
            Ok(()) => assert_eq!(stream.copied[0].load(Relaxed), 1),
            Err(Aborted) => assert!(stream.abort.is_raised()),
        }
        panicked.join().unwrap();
    });
}
