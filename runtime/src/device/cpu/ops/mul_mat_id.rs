//! mul_mat_id (a mixture of experts' product): `dst[:, e, t] = experts[:, :,
//! ids[e, t]]^T · b[:, e % b1, t]` for experts `[k, n, n_expert]` of any
//! weight dtype, activations `[k, b1, t]` and I32 ids `[n_used, t]`.
//!
//! Correct first: one dst row (a token's expert slot) per unit; the token's
//! activation row is read once into f32, each of the expert's `n` rows is
//! decoded (dequantized) into a scratch row and dotted with it, summed in
//! f64 in order of k. Tokens are not yet grouped by expert.
//!
//! Invariant: an expert id outside `0..n_expert` panics naming it (the pool
//! reports the panic as the step's failure); no byte outside the experts'
//! tensor is read.

use super::rows::{RowIo, scratch_row};
use super::{dtypes, need, read_i32, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// Prepares mul_mat_id of `srcs = [experts, activations, ids]` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let (a, b, ids) = (srcs[0], srcs[1], srcs[2]);
    need(
        op,
        a.dtype != DType::I32
            && b.dtype.is_float()
            && ids.dtype == DType::I32
            && dst.dtype.is_float(),
        || dtypes(&dst, srcs),
    )?;
    let (k, n, n_expert) = (a.ne[0], a.ne[1], a.ne[2]);
    let (n_used, t) = (ids.ne[0], ids.ne[1]);
    let fits = b.ne[0] == k
        && (b.ne[1] == 1 || b.ne[1] == n_used)
        && b.ne[2] == t
        && dst.ne == [n, n_used, t, 1]
        && a.ne[3] == 1
        && (!a.dtype.is_quantized()
            || (k % a.dtype.block_elems() as i64 == 0
                && a.nb[0] as usize == a.dtype.block_bytes() as usize));
    need(op, fits, || {
        format!(
            "experts {}, activations {}, ids {} and dst {} do not fit",
            shape(&a),
            shape(&b),
            shape(&ids),
            shape(&dst)
        )
    })?;
    let (ai, bi, di) = (RowIo::new(&a), RowIo::new(&b), RowIo::new(&dst));
    let (k, n, n_used, b1) = (k as usize, n as usize, n_used as usize, b.ne[1] as usize);
    let name = format!("mul_mat_id {} x {} -> {}", a.dtype, b.dtype, dst.dtype).to_lowercase();
    Ok(unit_kernel(name, n_used * t as usize, move |units| {
        let mut x = scratch_row(true, k);
        let mut w = scratch_row(true, k);
        let mut y = scratch_row(true, n);
        for u in units {
            let (e, tok) = (u % n_used, u / n_used);
            // SAFETY: (e, tok) is inside ids' extents, checked above.
            let id = unsafe { read_i32(ids.row_ptr(tok, 0, 0).add(e * ids.nb[0] as usize)) };
            assert!(
                (0..n_expert).contains(&i64::from(id)),
                "mul_mat_id: expert id {id} (slot {e}, token {tok}) is outside 0..{n_expert}"
            );
            // SAFETY: row (e % b1, tok) of b holds k elements; expert `id`'s
            // rows are in bounds (id checked just above); the dst row is this
            // unit's alone and does not overlap its sources (a product's
            // result owns its memory).
            unsafe {
                bi.load(b.row_ptr(e % b1, tok, 0), &mut x);
                for (i, out) in y.iter_mut().enumerate() {
                    ai.load(a.row_ptr(i, id as usize, 0), &mut w);
                    let dot = w
                        .iter()
                        .zip(x.iter())
                        .fold(0.0f64, |acc, (&p, &q)| acc + f64::from(p) * f64::from(q));
                    *out = dot as f32;
                }
                di.store(dst.row_ptr(e, tok, 0), &y);
            }
        }
    }))
}
