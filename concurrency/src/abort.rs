//! A run's abort: raised by a stream that panicked, so that every other
//! stream stops waiting for work the panicked one will never do.
//!
//! Invariants: [`Abort::raise`] sets the flag (Release) before it wakes the
//! events' sleepers, so a waiter either sees the flag before it sleeps or is
//! woken after it was set ([`crate::Event::wait`] re-checks it under the
//! event's lock); [`Abort::clear`] runs only between runs, when no stream is
//! running.

use crate::event::Event;
use crate::shim::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};

/// The abort flag of one executor, shared by every stream of a run.
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
