//! Tests across the runtime's modules: whole plans loaded and run.

mod parallel;
pub(crate) mod support;
