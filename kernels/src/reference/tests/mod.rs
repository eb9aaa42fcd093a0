//! Tests of the reference kernels: hand-computed values on tiny inputs and
//! identities on seeded random ones.

mod copy_reduce;
mod dense_io;
mod elementwise;
mod matmul;
mod norm_softmax;
mod rope;

use super::{Dense, compute};
use ir::{DType, Layout, Op};

/// A dense tensor from values in flat order.
fn dense(ne: [i64; 4], values: &[f64]) -> Dense {
    Dense::new(ne, values.to_vec())
}

/// Runs `op` over `srcs` with a packed result of `dtype` and extents `ne`.
fn run(op: Op, srcs: &[&Dense], dtype: DType, ne: [i64; 4]) -> Dense {
    let out = Layout::contiguous(dtype, ne).expect("valid result layout");
    compute(&op, srcs, &out)
}

/// Runs `op` with an f32 result of src0's extents.
fn run_same(op: Op, srcs: &[&Dense]) -> Dense {
    run(op, srcs, DType::F32, srcs[0].ne)
}

/// Asserts elementwise `|a - b| <= tol * max(1, |b|)`.
#[track_caller]
fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ: {got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = g == w || (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(
            ok,
            "element {i}: got {g}, want {w}\n got: {got:?}\nwant: {want:?}"
        );
    }
}
