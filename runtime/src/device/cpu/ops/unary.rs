//! Unary elementwise fallbacks (scale, sqr, sqrt, silu, gelu, gelu_erf, relu,
//! tanh) in f32 with std's exp/tanh and libm's erff. The JIT normally replaces
//! them; these favour exactness over speed.
//!
//! Units: chunks of [`CHUNK`] elements when src and dst are both contiguous
//! (so tiny rows still spread over threads), else rows.

use super::rows::{RowIo, scratch_row};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::Op;
use ir::plan::UnaryFn;

/// Elements per unit of the contiguous path.
const CHUNK: usize = 8 * 1024;

/// `sqrt(2 / pi)`, gelu's tanh-approximation constant.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// `x * sigmoid(x)`.
pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// gelu, tanh approximation.
pub(super) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// gelu, erf form.
pub(super) fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `out[i] = f(x[i])`, one tight loop per function.
fn apply(f: UnaryFn, x: &[f32], out: &mut [f32]) {
    fn map(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = f(v);
        }
    }
    match f {
        UnaryFn::Scale { scale, bias } => map(x, out, |v| v * scale + bias),
        UnaryFn::Sqr => map(x, out, |v| v * v),
        UnaryFn::Sqrt => map(x, out, f32::sqrt),
        UnaryFn::Silu => map(x, out, silu),
        UnaryFn::Gelu => map(x, out, gelu),
        UnaryFn::GeluErf => map(x, out, gelu_erf),
        UnaryFn::Relu => map(x, out, |v| if v > 0.0 { v } else { 0.0 }),
        UnaryFn::Tanh => map(x, out, f32::tanh),
        UnaryFn::Clamp { min, max } => map(x, out, |v| v.max(min).min(max)),
    }
}

/// Prepares the unary `op` of `a` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    a: RawTensor,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let f = op
        .unary_fn()
        .ok_or_else(|| super::unsupported(op, "not a unary op".into()))?;
    need(op, a.dtype.is_float() && dst.dtype.is_float(), || {
        dtypes(&dst, &[a])
    })?;
    need(op, dst.ne == a.ne, || {
        format!("src0 {} and dst {} differ", shape(&a), shape(&dst))
    })?;
    let (ai, di) = (RowIo::new(&a), RowIo::new(&dst));
    let name = format!("{} {} -> {} (fallback)", op.name(), a.dtype, dst.dtype);
    if a.is_contiguous() && dst.is_contiguous() {
        let n = a.n_elements();
        let (ae, de) = (
            a.dtype.block_bytes() as usize,
            dst.dtype.block_bytes() as usize,
        );
        return Ok(unit_kernel(name, n.div_ceil(CHUNK), move |units| {
            let mut x_buf = scratch_row(true, CHUNK);
            let mut y_buf = scratch_row(!di.direct(), CHUNK);
            for u in units {
                let (start, len) = (u * CHUNK, CHUNK.min(n - u * CHUNK));
                // SAFETY: the chunk is inside both (same element count, packed);
                // dst chunks are this thread's; `view` copies an overlapping source.
                unsafe {
                    let d = dst.row_ptr(0, 0, 0).add(start * de);
                    let x = ai.view(
                        a.row_ptr(0, 0, 0).add(start * ae),
                        len,
                        &mut x_buf,
                        d,
                        len * de,
                    );
                    let y = di.target(d, len, &mut y_buf);
                    apply(f, x, y);
                    di.commit(d, y);
                }
            }
        }));
    }
    let ne0 = a.ne[0] as usize;
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut x_buf = scratch_row(true, ne0);
        let mut y_buf = scratch_row(!di.direct(), ne0);
        for r in rows {
            // SAFETY: r is a row of both (same extents); dst row r is ours.
            unsafe {
                let d = dst.flat_row_ptr(r);
                let x = ai.view(a.flat_row_ptr(r), ne0, &mut x_buf, d, di.span(ne0));
                let y = di.target(d, ne0, &mut y_buf);
                apply(f, x, y);
                di.commit(d, y);
            }
        }
    }))
}
