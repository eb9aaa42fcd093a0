//! Every kernel of `cpu::ops` against `kernels::reference` at odd sizes, on
//! 1, 2 and 3 threads, with poisoned destinations; plus the errors.

mod harness;

mod collective;
mod data;
mod elementwise;
mod errors;
mod moe;
mod rope;
mod rowwise;
