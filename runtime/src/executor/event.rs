//! Host events: recorded once per run by one stream, waited on by others
//! (spin briefly, then sleep; an abort wakes every waiter). They live in the
//! `concurrency` crate, where their invariants are stated and proved by loom.

pub use concurrency::{Aborted, Event};
