//! Host events: recorded once per run by one stream, waited on by others,
//! and the run's [`Abort`] that ends every wait when a stream panicked.
//!
//! A waiter spins briefly (an event is often recorded within microseconds,
//! and a sleep/wake-up costs more), then sleeps on a condition variable so a
//! stream with nothing to do leaves its core to the streams that compute.
//!
//! One atomic word holds both the done flag and the number of sleepers, so
//! `record` learns in the same read-modify-write whether anyone sleeps, and
//! only then takes the lock and notifies (a notify is a system call; most
//! records have no sleeper, because waiters spin first).
//!
//! Invariants: `record` happens-before the return of every `wait` that sees
//! it (Release/Acquire on `state`); a waiter counts itself as a sleeper only
//! under the lock and only while the event is not done (one compare-and-swap),
//! and a recorder that sees a sleeper notifies under the lock, so no wake-up is
//! lost; `reset` runs only between runs, when no stream is running; an
//! [`Abort`] sets its flag and then calls [`Event::wake_all`], so a stream
//! that panicked never leaves the others waiting forever.

use crate::shim::{AtomicBool, AtomicUsize, Condvar, Mutex, lock, relax_often, spin_limit, wait};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

/// Spins before a waiter sleeps (a few microseconds).
const SPINS: u32 = spin_limit(4_000);

/// The done bit of [`Event::state`]; the other bits count sleepers.
const DONE: usize = 1;
/// One sleeper in [`Event::state`].
const SLEEPER: usize = 2;

/// One event of a plan.
#[derive(Default)]
pub struct Event {
    /// [`DONE`] plus [`SLEEPER`] times the number of sleeping waiters.
    state: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

/// Why a wait ended without its event.
#[derive(Debug, PartialEq, Eq)]
pub struct Aborted;

impl Event {
    /// Marks the event done and wakes its waiters.
    pub fn record(&self) {
        let before = self.state.fetch_or(DONE, AcqRel);
        if before >= SLEEPER {
            let _guard = lock(&self.lock);
            self.wake.notify_all();
        }
    }

    /// True once recorded.
    pub fn is_done(&self) -> bool {
        self.state.load(Acquire) & DONE != 0
    }

    /// Waits until the event is recorded, or `abort` is raised (then `Err`;
    /// [`Abort::raise`] wakes a sleeping waiter so that it sees the flag).
    pub fn wait(&self, abort: &Abort) -> Result<(), Aborted> {
        self.wait_then(abort, &mut || {})
    }

    /// [`Event::wait`], calling `before_sleep` once when the spin ends
    /// without the event: the wait is a long one (a stream's executor parks
    /// its device's idle kernel threads there).
    pub fn wait_then(&self, abort: &Abort, before_sleep: &mut dyn FnMut()) -> Result<(), Aborted> {
        let mut spins = 0;
        while spins < SPINS {
            if self.is_done() {
                return Ok(());
            }
            relax_often(&mut spins);
        }
        before_sleep();
        let mut guard = lock(&self.lock);
        loop {
            let state = self.state.load(Acquire);
            if state & DONE != 0 {
                return Ok(());
            }
            if abort.is_raised() {
                return Err(Aborted);
            }
            // Count this thread as a sleeper only if the event is still not
            // done: a `record` after this sees the sleeper and notifies under
            // `lock`, which this thread releases only inside `wait`; a
            // `record` before it makes the exchange fail. An abort sets its
            // flag before `wake_all` takes `lock`, so it too is either seen
            // above or notifies this sleeper. No timeout is needed (tests/loom.rs
            // proves every order).
            let counted = self
                .state
                .compare_exchange(state, state + SLEEPER, AcqRel, Acquire);
            if counted.is_err() {
                continue;
            }
            guard = wait(&self.wake, guard);
            self.state.fetch_sub(SLEEPER, AcqRel);
        }
    }

    /// Makes the event not done (between runs only, when nobody waits).
    pub fn reset(&self) {
        self.state.fetch_and(!DONE, Release);
    }

    /// Wakes every waiter so it can see an abort.
    pub fn wake_all(&self) {
        let _guard = lock(&self.lock);
        self.wake.notify_all();
    }
}

/// A run's abort: raised by a stream that panicked, so that every other
/// stream stops waiting for work the panicked one will never do. It sets its
/// flag (Release) before it wakes the events' sleepers, so a waiter either
/// sees the flag before it sleeps or is woken after it was set
/// ([`Event::wait`] re-checks it under the event's lock); [`Abort::clear`]
/// runs only between runs, when no stream is running.
#[derive(Default)]
pub struct Abort {
    raised: AtomicBool,
}

impl Abort {
    /// Aborts the run: sets the flag, then wakes every sleeper of `events`
    /// so that each sees it.
    pub fn raise(&self, events: &[Event]) {
        self.raised.store(true, Release);
        for event in events {
            event.wake_all();
        }
    }

    /// True once [`Abort::raise`] ran in this run.
    pub fn is_raised(&self) -> bool {
        self.raised.load(Acquire)
    }

    /// Back to not raised (between runs only).
    pub fn clear(&self) {
        self.raised.store(false, Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::time::Duration;

    #[test]
    fn a_wait_returns_after_the_record_and_sees_its_writes() {
        for delay_us in [0u64, 50, 20_000] {
            let event = Arc::new(Event::default());
            let data = Arc::new(AtomicU64::new(0));
            let abort = Abort::default();
            let (e, d) = (Arc::clone(&event), Arc::clone(&data));
            let recorder = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(delay_us));
                d.store(42, Relaxed);
                e.record();
            });
            event.wait(&abort).expect("recorded");
            assert_eq!(data.load(Relaxed), 42);
            recorder.join().expect("recorder");
        }
    }

    #[test]
    fn an_abort_ends_a_wait_that_would_never_end() {
        let event = Event::default();
        let abort = Abort::default();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                abort.raise(std::slice::from_ref(&event));
            });
            assert_eq!(event.wait(&abort), Err(Aborted));
        });
    }
}
