//! Code generation of a fused body (elementwise nodes and row norms).
//!
//! Per output row: the row pointers of every tensor (inputs broadcast by
//! index modulo their extents), the broadcast scalars, the norms' statistics
//! (a reduction over their input's row first), then the elements: an optional
//! scalar prologue up to an aligned output address (streaming stores only),
//! full-width vectors (with a prefetch of each packed input ahead when the
//! output streams), and a scalar tail. The body is emitted once per width
//! by the same code, so the three loops compute identical bits (tested).
//! A product whose factor is x / d(x) (silu, gelu) is emitted as
//! (x·y) / d(x), off the divide's dependency chain.

use super::codegen::{Gen, R, Row, TensorArgs};
use super::spec::{Access, Node, TensorSpec, elem_bytes};
use inkwell::IntPredicate;
use inkwell::values::{FloatValue, IntValue, VectorValue};
use ir::plan::BinaryFn;

/// A norm's per-row statistics: the mean subtracted (norm only) and 1/sqrt(.. + eps).
#[derive(Clone, Copy)]
struct Stats<'ctx> {
    /// For norm: the row's first element and the mean's distance from it
    /// (x - mean is computed as (x - first) - distance, see `norm_stats`).
    mean: Option<(FloatValue<'ctx>, FloatValue<'ctx>)>,
    inv: FloatValue<'ctx>,
}

/// How far ahead of the loads the streaming loop prefetches its inputs.
/// Why: with a compute-heavy body (silu) the out-of-order window holds few
/// iterations, so the hardware prefetchers alone leave DRAM idle between
/// bursts; 1–4 KiB ahead measured best for silu(a)·b on Zen 3 (7.3 ms for
/// 16M floats against 9.0 without, one thread).
const PREFETCH_BYTES: u64 = 2048;

/// Emits the kernel of `nodes` writing tensor 0 (`out`) from tensors 1.. (`inputs`).
pub(super) fn emit<'ctx>(
    g: &Gen<'_, 'ctx>,
    nodes: &[Node],
    out: TensorSpec,
    inputs: &[TensorSpec],
    stream: bool,
) -> R<()> {
    let out_args = g.tensor(0)?;
    let in_args: Vec<TensorArgs> = (0..inputs.len())
        .map(|t| g.tensor(t + 1))
        .collect::<R<_>>()?;
    let (row0, row1, col0, col1) = (g.param(1), g.param(2), g.param(3), g.param(4));
    g.emit_loop(row0, row1, 1, &[], |r, _| {
        let at = g.row_coords(r, &out_args.ne)?;
        let out_row = g.row(out, &out_args, at)?;
        let rows: Vec<Row> = inputs
            .iter()
            .zip(&in_args)
            .map(|(&spec, args)| g.row(spec, args, at))
            .collect::<R<_>>()?;
        let stats = norm_stats(g, nodes, &rows, out_args.ne[0])?;
        let body = |i: IntValue<'ctx>, w: u32, nt: bool| -> R<()> {
            let v = eval(g, nodes, &rows, &stats, i, w)?;
            g.store(&out_row, i, v, nt)
        };
        let mut i = col0;
        if stream {
            // Scalar steps until the output address is aligned to a full vector.
            let es = elem_bytes(out.dtype) as u64;
            let align = es * u64::from(g.width);
            let first = g.gep(out_row.base, g.b.build_int_mul(col0, g.ci(es), "")?)?;
            let addr = g.b.build_ptr_to_int(first, g.i64t, "")?;
            let mis = g.b.build_and(addr, g.ci(align - 1), "")?;
            let gap = g.b.build_and(
                g.b.build_int_sub(g.ci(align), mis, "")?,
                g.ci(align - 1),
                "",
            )?;
            let peel = g.b.build_int_unsigned_div(gap, g.ci(es), "")?;
            let lim = g.b.build_int_add(col0, peel, "")?;
            let short = g.b.build_int_compare(IntPredicate::SLT, lim, col1, "")?;
            let lim = g.b.build_select(short, lim, col1, "")?.into_int_value();
            i = g
                .emit_loop(i, lim, 1, &[], |i, _| body(i, 1, false).map(|()| vec![]))?
                .0;
        }
        let w = g.width;
        i = g
            .emit_loop(i, col1, u64::from(w), &[], |i, _| {
                if stream {
                    for row in rows.iter().filter(|r| r.spec.access == Access::Contig) {
                        g.prefetch(row, i, PREFETCH_BYTES)?;
                    }
                }
                body(i, w, stream).map(|()| vec![])
            })?
            .0;
        g.emit_loop(i, col1, 1, &[], |i, _| body(i, 1, false).map(|()| vec![]))?;
        Ok(vec![])
    })?;
    g.b.build_return(None)?;
    Ok(())
}

/// The statistics of every norm node over the current row (`None` for others).
fn norm_stats<'ctx>(
    g: &Gen<'_, 'ctx>,
    nodes: &[Node],
    rows: &[Row<'ctx>],
    n0: IntValue<'ctx>,
) -> R<Vec<Option<Stats<'ctx>>>> {
    let n = g.len_f32(n0)?;
    let inv_sqrt = |sum: FloatValue<'ctx>, eps: f32| -> R<FloatValue<'ctx>> {
        let mean = g.b.build_float_div(sum, n, "")?;
        let v =
            g.b.build_float_add(mean, g.f32t.const_float(f64::from(eps)), "")?;
        let root = g
            .intrinsic("llvm.sqrt", &[g.f32t.into()], &[v.into()])?
            .into_float_value();
        Ok(g.b.build_float_div(g.f32t.const_float(1.0), root, "")?)
    };
    nodes
        .iter()
        .map(|node| match *node {
            Node::RmsNorm(input, eps) => {
                let row = &rows[input as usize];
                let ss = g.row_sum(row, n0, |x| g.mul(x, x))?;
                Ok(Some(Stats {
                    mean: None,
                    inv: inv_sqrt(ss, eps)?,
                }))
            }
            Node::Norm(input, eps) => {
                let row = &rows[input as usize];
                // Deviations are taken around the row's first element x0:
                // x - x0 is exact for values near x0, and the mean's distance
                // from x0 is a small sum. For a nearly constant row (a norm
                // after soft_max) the f32 mean itself, rounded to a unit in
                // the last place of the values, is as far off as the
                // deviations the norm divides by their spread (ggml sums in
                // double; found by the differential fuzz target, NMSE 1.7e-3).
                let x0 = g.lane0(g.load(row, g.ci(0), 1)?)?;
                let from_x0 =
                    |x: VectorValue<'ctx>| g.sub(x, g.splat(x0, x.get_type().get_size())?);
                let shift = g.b.build_float_div(g.row_sum(row, n0, from_x0)?, n, "")?;
                let ss = g.row_sum(row, n0, |x| {
                    let d = g.sub(from_x0(x)?, g.splat(shift, x.get_type().get_size())?)?;
                    g.mul(d, d)
                })?;
                Ok(Some(Stats {
                    mean: Some((x0, shift)),
                    inv: inv_sqrt(ss, eps)?,
                }))
            }
            Node::Input(_) | Node::Unary(..) | Node::Binary(..) => Ok(None),
        })
        .collect()
}

/// The body's output at elements `i .. i + w`.
fn eval<'ctx>(
    g: &Gen<'_, 'ctx>,
    nodes: &[Node],
    rows: &[Row<'ctx>],
    stats: &[Option<Stats<'ctx>>],
    i: IntValue<'ctx>,
    w: u32,
) -> R<VectorValue<'ctx>> {
    let mut values: Vec<VectorValue> = Vec::with_capacity(nodes.len());
    for (k, node) in nodes.iter().enumerate() {
        let v = match *node {
            Node::Input(t) => g.load(&rows[t as usize], i, w)?,
            Node::Unary(f, a) => g.unary(f, values[a as usize])?,
            Node::Binary(BinaryFn::Mul, a, b) => match quotient_times(g, nodes, &values, a, b)? {
                Some(v) => v,
                None => g.mul(values[a as usize], values[b as usize])?,
            },
            Node::Binary(f, a, b) => g.binary(f, values[a as usize], values[b as usize])?,
            Node::RmsNorm(t, _) | Node::Norm(t, _) => {
                let s = stats[k].expect("computed per row");
                let mut x = g.load(&rows[t as usize], i, w)?;
                if let Some((x0, shift)) = s.mean {
                    x = g.sub(g.sub(x, g.splat(x0, w)?)?, g.splat(shift, w)?)?;
                }
                g.mul(x, g.splat(s.inv, w)?)?
            }
        };
        values.push(v);
    }
    Ok(*values.last().expect("a body is non-empty"))
}

/// `f(x) * y` as `(x * y) / d(x)` when one factor is a function of the form
/// x / d(x) (silu, gelu): the product then runs beside the exponential
/// instead of after the divide, which shortens each element's dependency
/// chain (what bounds silu(a) * b on one core). The function's own node, now
/// unused, is removed by LLVM.
fn quotient_times<'ctx>(
    g: &Gen<'_, 'ctx>,
    nodes: &[Node],
    values: &[VectorValue<'ctx>],
    a: u32,
    b: u32,
) -> R<Option<VectorValue<'ctx>>> {
    for (f, y) in [(a, b), (b, a)] {
        if let Node::Unary(func, x) = nodes[f as usize] {
            let x = values[x as usize];
            if let Some(d) = g.sigmoid_denominator(func, x)? {
                return Ok(Some(g.div(g.mul(x, values[y as usize])?, d)?));
            }
        }
    }
    Ok(None)
}
