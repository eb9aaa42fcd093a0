//! The runtime's concurrency primitives, kept apart (and free of dependencies)
//! so that they can be model-checked with loom: the persistent thread pool
//! ([`ThreadPool`], with its [`SpinBarrier`] and [`ThreadCtx`]), the host
//! events the executor orders streams with ([`Event`]), the copy segments any
//! waiting stream may run ([`CopyProgress`]) and a run's [`Abort`].
//!
//! Invariants (each stated in its module, each proved by `tests/loom.rs`):
//! - barrier: every write before [`SpinBarrier::wait`] is seen by every thread
//!   after it, generation after generation;
//! - pool: [`ThreadPool::run`] returns only after the job ran on every thread,
//!   and sees their writes; a sleeping worker is never left asleep when a job
//!   is posted (no lost wake-up); dropping the pool joins every worker;
//! - events: [`Event::record`] happens-before the return of every
//!   [`Event::wait`] that sees it; an [`Abort`] (the flag, then
//!   [`Event::wake_all`]) ends every wait; no wake-up is lost;
//! - copy claims ([`CopyProgress`], the executor's copy segments that any
//!   waiting thread may run): each segment runs exactly once, in stream
//!   order, after its sources, and whoever sees it finished sees what it
//!   wrote; an abort ends every helper, also one whose segment was claimed
//!   by a thread that panicked.
//!
//! None of this relies on SeqCst: loom treats SeqCst as AcqRel, so a proof
//! here holds for the orderings as written. Built with `--cfg loom`, `shim`
//! swaps std's primitives for loom's; run the models with
//! `RUSTFLAGS="--cfg loom" cargo test -p ggplan-concurrency --release --test loom`.

mod barrier;
mod claims;
mod ctx;
mod event;
mod pool;
mod shim;

pub use barrier::SpinBarrier;
pub use claims::CopyProgress;
pub use ctx::{ThreadCtx, share};
pub use event::{Abort, Aborted, Event};
pub use pool::ThreadPool;
pub use shim::relax_often;
