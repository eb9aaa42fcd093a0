//! Binary elementwise fallbacks (add, sub, mul, div with src1 repeated over
//! src0: src1 row `(i1 % ne1, i2 % ne2, i3 % ne3)`, its ne0 dividing src0's)
//! and the gated linear units (one source split in halves, or gate and up).
//!
//! One dst row per unit; f32 arithmetic, as the reference up to rounding.

use super::rows::{RowIo, scratch_row};
use super::unary::{gelu, gelu_erf, silu};
use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{GluKind, Op};

#[derive(Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

impl Bin {
    /// `out[i] = x[i] op y[i % y.len()]`.
    fn apply(self, x: &[f32], y: &[f32], out: &mut [f32]) {
        fn zip(x: &[f32], y: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32 + Copy) {
            if y.len() == 1 {
                let b = y[0];
                for (o, &a) in out.iter_mut().zip(x) {
                    *o = f(a, b);
                }
                return;
            }
            for (oc, xc) in out.chunks_mut(y.len()).zip(x.chunks(y.len())) {
                for ((o, &a), &b) in oc.iter_mut().zip(xc).zip(y) {
                    *o = f(a, b);
                }
            }
        }
        match self {
            Bin::Add => zip(x, y, out, |a, b| a + b),
            Bin::Sub => zip(x, y, out, |a, b| a - b),
            Bin::Mul => zip(x, y, out, |a, b| a * b),
            Bin::Div => zip(x, y, out, |a, b| a / b),
        }
    }
}

/// Prepares add, sub, mul or div of `srcs = [a, b]` into `dst`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let (a, b) = (srcs[0], srcs[1]);
    let f = match op {
        Op::Add => Bin::Add,
        Op::Sub => Bin::Sub,
        Op::Mul => Bin::Mul,
        _ => Bin::Div,
    };
    need(
        op,
        a.dtype.is_float() && b.dtype.is_float() && dst.dtype.is_float(),
        || dtypes(&dst, srcs),
    )?;
    need(
        op,
        dst.ne == a.ne && (0..4).all(|d| a.ne[d] % b.ne[d] == 0),
        || {
            format!(
                "src1 {} does not repeat over src0 {} into dst {}",
                shape(&b),
                shape(&a),
                shape(&dst)
            )
        },
    )?;
    let (ai, bi, di) = (RowIo::new(&a), RowIo::new(&b), RowIo::new(&dst));
    let (ne0, bne0) = (a.ne[0] as usize, b.ne[0] as usize);
    let bn = [b.ne[1] as usize, b.ne[2] as usize, b.ne[3] as usize];
    let name = format!("{} {} (fallback)", op.name(), dtypes(&dst, srcs));
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut x_buf = scratch_row(true, ne0);
        let mut b_buf = scratch_row(true, bne0);
        let mut y_buf = scratch_row(!di.direct(), ne0);
        for r in rows {
            let [i1, i2, i3] = a.row_coords(r);
            // SAFETY: a row of src0 and dst (same extents), the src1 row is
            // inside src1 (modulo its extents); dst row is ours, sources that
            // overlap it are copied first.
            unsafe {
                let d = dst.row_ptr(i1, i2, i3);
                let span = di.span(ne0);
                let x = ai.view(a.row_ptr(i1, i2, i3), ne0, &mut x_buf, d, span);
                let bp = b.row_ptr(i1 % bn[0], i2 % bn[1], i3 % bn[2]);
                let y = bi.view(bp, bne0, &mut b_buf, d, span);
                let out = di.target(d, ne0, &mut y_buf);
                f.apply(x, y, out);
                di.commit(d, out);
            }
        }
    }))
}

/// Prepares a glu of `srcs = [x]` (halves) or `[gate, up]` into `dst`.
pub(super) fn prepare_glu(
    op: &Op,
    kind: GluKind,
    swapped: bool,
    dst: RawTensor,
    srcs: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let a = srcs[0];
    let up = srcs.get(1).copied();
    need(
        op,
        a.dtype.is_float() && dst.dtype.is_float() && up.is_none_or(|u| u.dtype.is_float()),
        || dtypes(&dst, srcs),
    )?;
    let out_ne0 = if up.is_some() { a.ne[0] } else { a.ne[0] / 2 };
    need(
        op,
        up.is_none_or(|u| u.ne == a.ne)
            && (up.is_some() || a.ne[0] % 2 == 0)
            && dst.ne == [out_ne0, a.ne[1], a.ne[2], a.ne[3]],
        || {
            let u = up.map(|u| shape(&u)).unwrap_or_default();
            format!(
                "src0 {}, up {u} and dst {} do not fit",
                shape(&a),
                shape(&dst)
            )
        },
    )?;
    let act: fn(f32) -> f32 = match kind {
        GluKind::SwiGlu => silu,
        GluKind::GeGlu => gelu,
        GluKind::GeGluErf => gelu_erf,
    };
    let ai = RowIo::new(&a);
    let ui = up.map(|u| RowIo::new(&u));
    let di = RowIo::new(&dst);
    let (ne0, n) = (a.ne[0] as usize, out_ne0 as usize);
    let name = format!("glu {kind:?} {} (fallback)", dtypes(&dst, srcs)).to_lowercase();
    Ok(unit_kernel(name, a.n_rows(), move |rows| {
        let mut x_buf = scratch_row(true, ne0);
        let mut u_buf = scratch_row(up.is_some(), ne0);
        let mut y_buf = scratch_row(!di.direct(), n);
        for r in rows {
            let [i1, i2, i3] = a.row_coords(r);
            // SAFETY: a row of every operand (extents checked); dst row is ours;
            // sources overlapping it are copied first.
            unsafe {
                let d = dst.row_ptr(i1, i2, i3);
                let span = di.span(n);
                let x = ai.view(a.row_ptr(i1, i2, i3), ne0, &mut x_buf, d, span);
                let (gate, upv) = match (up, ui) {
                    (Some(u), Some(ui)) => {
                        (x, ui.view(u.row_ptr(i1, i2, i3), ne0, &mut u_buf, d, span))
                    }
                    _ if swapped => (&x[n..], &x[..n]),
                    _ => (&x[..n], &x[n..]),
                };
                let out = di.target(d, n, &mut y_buf);
                for ((o, &g), &u) in out.iter_mut().zip(gate).zip(upv) {
                    *o = act(g) * u;
                }
                di.commit(d, out);
            }
        }
    }))
}
