//! Host events: recorded once per run by one stream, waited on by others.
//!
//! A waiter spins briefly (an event is often recorded within microseconds,
//! and a sleep/wake-up costs more), then sleeps on a condition variable so a
//! stream with nothing to do leaves its core to the streams that compute.
//!
//! Invariants: `record` happens-before the return of every `wait` that sees
//! it (Release/Acquire on `done`, and the mutex for sleepers); `reset` runs
//! only between runs, when no stream is running; whoever sets a wait's
//! `abort` flag then calls [`Event::wake_all`], so a stream that panicked never
//! leaves the others waiting forever.

use crate::shim::{AtomicBool, Condvar, Mutex, lock, spin_limit, spin_loop, wait, yield_now};
use std::sync::atomic::Ordering::{Acquire, Release};

/// Spins before a waiter sleeps (a few microseconds).
const SPINS: u32 = spin_limit(4_000);

/// One event of a plan.
#[derive(Default)]
pub struct Event {
    done: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

/// Why a wait ended without its event.
#[derive(Debug, PartialEq, Eq)]
pub struct Aborted;

impl Event {
    /// Marks the event done and wakes its waiters.
    pub fn record(&self) {
        self.done.store(true, Release);
        let _guard = lock(&self.lock);
        self.wake.notify_all();
    }

    /// True once recorded.
    pub fn is_done(&self) -> bool {
        self.done.load(Acquire)
    }

    /// Waits until the event is recorded, or `abort` is set (then `Err`).
    /// Whoever sets `abort` must then call [`Event::wake_all`]: a sleeping
    /// waiter sees the flag only when woken.
    pub fn wait(&self, abort: &AtomicBool) -> Result<(), Aborted> {
        for i in 0..SPINS {
            if self.is_done() {
                return Ok(());
            }
            if i % 256 == 255 {
                yield_now();
            } else {
                spin_loop();
            }
        }
        let mut guard = lock(&self.lock);
        loop {
            if self.is_done() {
                return Ok(());
            }
            if abort.load(Acquire) {
                return Err(Aborted);
            }
            // No timeout is needed: `record` and `wake_all` change their flag
            // before they take `lock` and notify while holding it, and this
            // thread checks both flags holding `lock`, releasing it only
            // inside `wait`. So a change is either seen by the checks above or
            // made after this thread sleeps, and then its notification wakes
            // it (tests/loom.rs proves both orders).
            guard = wait(&self.wake, guard);
        }
    }

    /// Makes the event not done (between runs only).
    pub fn reset(&self) {
        self.done.store(false, Release);
    }

    /// Wakes every waiter so it can see an abort.
    pub fn wake_all(&self) {
        let _guard = lock(&self.lock);
        self.wake.notify_all();
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
            let abort = AtomicBool::new(false);
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
        let abort = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                abort.store(true, Release);
                event.wake_all();
            });
            assert_eq!(event.wait(&abort), Err(Aborted));
        });
    }
}
