//! Code generation of soft_max(x * scale + slope * mask) over rows.
//!
//! Per row: pass 1 takes the maximum of the scaled, masked logits; pass 2 sums
//! e^(v - max) (storing it when the output is F32, so pass 3 only rescales;
//! an F16 output recomputes it rather than round twice); pass 3 multiplies
//! by 1/sum. A row whose logits are all -inf yields zeros, as the reference.
//! The mask row is (i1 % ne1, i2 % ne2, i3 % ne3) of the mask; the ALiBi
//! slope of head i2 comes from a table in the argument block.

use super::codegen::{Gen, R};
use super::spec::{SLOTS, TensorSpec};
use inkwell::FloatPredicate;
use inkwell::values::{IntValue, VectorValue};
use ir::DType;

/// Emits the soft_max kernel: tensor 0 the output, 1 the logits, 2 the mask.
pub(super) fn emit<'ctx>(
    g: &Gen<'_, 'ctx>,
    out: TensorSpec,
    src: TensorSpec,
    mask: Option<TensorSpec>,
    scale: f32,
    alibi: bool,
) -> R<()> {
    let out_args = g.tensor(0)?;
    let src_args = g.tensor(1)?;
    let mask_args = mask.map(|_| g.tensor(2)).transpose()?;
    let slopes = if alibi {
        let n_tensors = 2 + usize::from(mask.is_some());
        Some(g.arg_ptr(n_tensors * SLOTS)?)
    } else {
        None
    };
    let (row0, row1) = (g.param(1), g.param(2));
    let n0 = out_args.ne[0];
    let w = g.width;
    g.emit_loop(row0, row1, 1, &[], |r, _| {
        let at = g.row_coords(r, &out_args.ne)?;
        let out_row = g.row(out, &out_args, at)?;
        let src_row = g.row(src, &src_args, at)?;
        let mask_row = match (mask, &mask_args) {
            (Some(spec), Some(args)) => Some(g.row(spec, args, at)?),
            _ => None,
        };
        let slope = match slopes {
            Some(table) => {
                let p = g.gep(table, g.b.build_int_mul(at[1], g.ci(4), "")?)?;
                g.b.build_load(g.f32t, p, "")?.into_float_value()
            }
            None => g.f32t.const_float(1.0),
        };
        // The scaled, masked logits at i .. i + w.
        let logits = |i: IntValue<'ctx>, w: u32| -> R<VectorValue<'ctx>> {
            let x = g.mul(g.load(&src_row, i, w)?, g.cf(scale, w))?;
            match &mask_row {
                Some(m) => g.fma(g.load(m, i, w)?, g.splat(slope, w)?, x),
                None => Ok(x),
            }
        };
        let max = reduce_max(g, n0, &logits)?;
        // An all -inf row: subtract 0 instead, so every e^v is 0, not NaN.
        let is_inf = g.b.build_float_compare(
            FloatPredicate::OEQ,
            max,
            g.f32t.const_float(f64::NEG_INFINITY),
            "",
        )?;
        let max =
            g.b.build_select(is_inf, g.f32t.const_zero(), max, "")?
                .into_float_value();
        let store_e = out.dtype == DType::F32;
        let e_at = |i: IntValue<'ctx>, w: u32| -> R<VectorValue<'ctx>> {
            g.exp(g.sub(logits(i, w)?, g.splat(max, w)?)?)
        };
        let sum_pass = |i0: IntValue<'ctx>, w: u32, acc: VectorValue<'ctx>| {
            g.emit_loop(i0, n0, u64::from(w), &[acc.into()], |i, acc| {
                let e = e_at(i, w)?;
                if store_e {
                    g.store(&out_row, i, e, false)?;
                }
                Ok(vec![g.add(acc[0].into_vector_value(), e)?.into()])
            })
        };
        let (i, acc) = sum_pass(g.ci(0), w, g.cf(0.0, w))?;
        let sum = g.intrinsic(
            "llvm.vector.reduce.fadd",
            &[g.vt(w).into()],
            &[g.f32t.const_float(-0.0).into(), acc[0].into()],
        )?;
        let (_, acc) = sum_pass(i, 1, g.splat(sum.into_float_value(), 1)?)?;
        let sum = g.lane0(acc[0].into_vector_value())?;
        let zero = g.f32t.const_zero();
        let empty =
            g.b.build_float_compare(FloatPredicate::OEQ, sum, zero, "")?;
        let inv = g.b.build_float_div(g.f32t.const_float(1.0), sum, "")?;
        let inv = g.b.build_select(empty, zero, inv, "")?.into_float_value();
        let scale_pass = |i0: IntValue<'ctx>, w: u32| {
            g.emit_loop(i0, n0, u64::from(w), &[], |i, _| {
                let e = if store_e {
                    g.load(&out_row, i, w)?
                } else {
                    e_at(i, w)?
                };
                g.store(&out_row, i, g.mul(e, g.splat(inv, w)?)?, false)?;
                Ok(vec![])
            })
        };
        let (i, _) = scale_pass(g.ci(0), w)?;
        scale_pass(i, 1)?;
        Ok(vec![])
    })?;
    g.b.build_return(None)?;
    Ok(())
}

/// The maximum of `logits` over elements `0..n0` (vectors, then a scalar tail).
fn reduce_max<'ctx>(
    g: &Gen<'_, 'ctx>,
    n0: IntValue<'ctx>,
    logits: &dyn Fn(IntValue<'ctx>, u32) -> R<VectorValue<'ctx>>,
) -> R<inkwell::values::FloatValue<'ctx>> {
    let w = g.width;
    let step = |acc: VectorValue<'ctx>, x: VectorValue<'ctx>| g.vcall("llvm.maxnum", &[acc, x]);
    let init = g.cf(f32::NEG_INFINITY, w);
    let (i, acc) = g.emit_loop(g.ci(0), n0, u64::from(w), &[init.into()], |i, acc| {
        Ok(vec![
            step(acc[0].into_vector_value(), logits(i, w)?)?.into(),
        ])
    })?;
    let max = g.intrinsic(
        "llvm.vector.reduce.fmax",
        &[g.vt(w).into()],
        &[acc[0].into()],
    )?;
    let init = g.splat(max.into_float_value(), 1)?;
    let (_, acc) = g.emit_loop(i, n0, 1, &[init.into()], |i, acc| {
        Ok(vec![
            step(acc[0].into_vector_value(), logits(i, 1)?)?.into(),
        ])
    })?;
    g.lane0(acc[0].into_vector_value())
}
