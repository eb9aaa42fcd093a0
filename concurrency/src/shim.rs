//! The one place that chooses between `std` and `loom`. Built with
//! `--cfg loom`, every atomic, lock, condition variable, thread and spin hint
//! of this crate is loom's, so the loom tests check the code that ships, not a
//! copy of it.
//!
//! Under loom a spin is a scheduling point, so spin budgets shrink to one
//! iteration ([`spin_limit`]): the models then reach the sleeping paths in a
//! few steps instead of never.

#[cfg(not(loom))]
pub(crate) use std::{
    hint::spin_loop,
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread::{Builder as ThreadBuilder, JoinHandle, yield_now},
};

#[cfg(loom)]
pub(crate) use loom::{
    hint::spin_loop,
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread::{Builder as ThreadBuilder, JoinHandle, yield_now},
};

/// A spin budget: `n` iterations normally, one under loom.
pub(crate) const fn spin_limit(n: u32) -> u32 {
    if cfg!(loom) { 1 } else { n }
}

/// Locks `mutex`, ignoring poisoning: a panicking job is caught and re-raised
/// by the pool, and the data these locks guard stays valid across a panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sleeps on `condvar` until notified (spurious wake-ups included: callers
/// re-check their condition), ignoring poisoning as [`lock`] does.
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(|e| e.into_inner())
}

/// One iteration of a wait loop: spin, but yield the core now and then so
/// that a pool with more threads than cores still makes progress.
pub(crate) fn relax(spins: &mut u32) {
    *spins += 1;
    if spins.is_multiple_of(1024) {
        yield_now();
    } else {
        spin_loop();
    }
}

/// One iteration of a wait for another stream: spin, but yield the core
/// every eighth time, because the thread that will end the wait may be
/// waiting for this very core (more streams than cores). Public: the
/// runtime's executor waits for copies the same way.
pub fn relax_often(spins: &mut u32) {
    *spins += 1;
    if spins.is_multiple_of(8) {
        yield_now();
    } else {
        spin_loop();
    }
}
