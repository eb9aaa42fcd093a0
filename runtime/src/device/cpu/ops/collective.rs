//! One participant's share of a collective, read in place from the other
//! devices' arenas (CPU devices of one host share memory, so a collective
//! needs no copies; the plan's events order it after every part is written
//! and before any part's bytes are reused).
//!
//! - `all_reduce_sum`: `dst = part0 + part1 + ...`, f32, added in part
//!   order starting from part 0, so every participant computes the same bits
//!   (a mirrored value is then identical on every device);
//! - `all_gather`: the parts joined along `dim`, in part order;
//! - `reduce_scatter_sum`: the all-reduce's sum (same order, same bits) of
//!   only this participant's `len` indices along `dim` from `start`.
//!
//! Work is split over chunks of the packed destination; every operand is
//! packed f32 (the IR's rule for collectives, re-checked here). The
//! destination shares no byte with any part (the compiler never runs a
//! collective in place; re-checked here, since an all-reduce writing over a
//! later part would overwrite it with part 0 before adding it; such a step
//! falls back to the reference kernel, which reads every part first).

use super::{dtypes, need, shape, unit_kernel};
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, RawTensor};
use ir::{DType, Op};

/// Elements per unit of work: big enough to amortise the split, small
/// enough that a decode vector still spreads over a few threads.
const CHUNK: usize = 1024;

/// Prepares the participant `op` (an all-reduce, all-gather or reduce-scatter)
/// writing `dst` from `parts`.
pub(super) fn prepare(
    op: &Op,
    dst: RawTensor,
    parts: &[RawTensor],
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let packed_f32 = |t: &RawTensor| t.dtype == DType::F32 && t.is_contiguous();
    need(op, packed_f32(&dst) && parts.iter().all(packed_f32), || {
        format!("collectives take packed f32: {}", dtypes(&dst, parts))
    })?;
    let bytes = |t: &RawTensor| {
        let start = t.data as usize;
        start..start + t.span_bytes() as usize
    };
    let out = bytes(&dst);
    let overlapping = parts.iter().position(|p| {
        let part = bytes(p);
        part.start < out.end && out.start < part.end
    });
    need(op, overlapping.is_none(), || {
        format!(
            "dst overlaps part {} (a participant never writes over a part)",
            overlapping.unwrap_or(0)
        )
    })?;
    match *op {
        Op::AllReduceSum { .. } => {
            need(op, parts.iter().all(|p| p.ne == dst.ne), || {
                let shapes: Vec<String> = parts.iter().map(shape).collect();
                format!("parts {} must all be {}", shapes.join(", "), shape(&dst))
            })?;
            Ok(all_reduce_sum(dst, parts.to_vec()))
        }
        Op::AllGather { dim, .. } => {
            let dim = usize::from(dim);
            let fits = dim < 4
                && (0..4).all(|d| {
                    let want = if d == dim {
                        parts.iter().map(|p| p.ne[d]).sum()
                    } else {
                        dst.ne[d]
                    };
                    dst.ne[d] == want && parts.iter().all(|p| d == dim || p.ne[d] == dst.ne[d])
                });
            need(op, fits, || {
                let shapes: Vec<String> = parts.iter().map(shape).collect();
                format!(
                    "parts {} do not join along dim {dim} into {}",
                    shapes.join(", "),
                    shape(&dst)
                )
            })?;
            Ok(all_gather(dst, parts.to_vec(), dim))
        }
        Op::ReduceScatterSum {
            dim, start, len, ..
        } => {
            let dim = usize::from(dim);
            let first = parts[0].ne;
            let fits = dim < 4
                && parts.iter().all(|p| p.ne == first)
                && start >= 0
                && len >= 1
                && start <= first[dim] - len
                && (0..4).all(|d| dst.ne[d] == if d == dim { len } else { first[d] });
            need(op, fits, || {
                let shapes: Vec<String> = parts.iter().map(shape).collect();
                format!(
                    "parts {} summed and cut to [{start}, {start} + {len}) along dim {dim} \
                     do not give {}",
                    shapes.join(", "),
                    shape(&dst)
                )
            })?;
            Ok(reduce_scatter_sum(dst, parts.to_vec(), dim, start as usize))
        }
        _ => Err(super::unsupported(op, "not a collective".into())),
    }
}

fn all_reduce_sum(dst: RawTensor, parts: Vec<RawTensor>) -> Box<dyn CpuKernel> {
    let n = dst.n_elements();
    let name = format!("all_reduce_sum of {} parts", parts.len());
    unit_kernel(name, n.div_ceil(CHUNK), move |units| {
        // Capture the whole RawTensor (Send), not its raw pointer field.
        let (dst, parts) = (&dst, &parts);
        let lo = units.start * CHUNK;
        let hi = (units.end * CHUNK).min(n);
        // SAFETY: every operand is packed f32 of n elements (checked at
        // prepare); [lo, hi) is this thread's share of dst, and the parts are
        // only read.
        unsafe {
            let out = std::slice::from_raw_parts_mut(dst.data.cast::<f32>().add(lo), hi - lo);
            let part =
                |p: &RawTensor| std::slice::from_raw_parts(p.data.cast::<f32>().add(lo), hi - lo);
            ordered_sum(out, parts.iter().map(part));
        }
    })
}

/// `out` = the first of `parts`, then each next one added in order: the one
/// order every all-reduce and reduce-scatter participant adds in, so their
/// results agree to the bit.
fn ordered_sum<'p>(out: &mut [f32], mut parts: impl Iterator<Item = &'p [f32]>) {
    if let Some(first) = parts.next() {
        out.copy_from_slice(first);
    }
    for part in parts {
        for (o, &v) in out.iter_mut().zip(part) {
            *o += v;
        }
    }
}

fn all_gather(dst: RawTensor, parts: Vec<RawTensor>, dim: usize) -> Box<dyn CpuKernel> {
    // Packed tensors: each part is `outer` runs of `inner * ne[dim]` values,
    // and dst's run for one outer index is the parts' runs side by side.
    let inner: i64 = dst.ne[..dim].iter().product();
    let outer: i64 = dst.ne[dim + 1..].iter().product();
    let runs: Vec<usize> = parts.iter().map(|p| (inner * p.ne[dim]) as usize).collect();
    let dst_run: usize = runs.iter().sum();
    let name = format!("all_gather of {} parts along dim {dim}", parts.len());
    unit_kernel(name, outer as usize, move |units| {
        let (dst, parts) = (&dst, &parts);
        for o in units {
            let mut at = o * dst_run;
            for (p, &run) in parts.iter().zip(&runs) {
                // SAFETY: shapes checked at prepare: part run `o` and dst
                // values [at, at + run) are inside their tensors; each outer
                // index is one thread's.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        p.data.cast::<f32>().add(o * run),
                        dst.data.cast::<f32>().add(at),
                        run,
                    );
                }
                at += run;
            }
        }
    })
}

fn reduce_scatter_sum(
    dst: RawTensor,
    parts: Vec<RawTensor>,
    dim: usize,
    start: usize,
) -> Box<dyn CpuKernel> {
    // Packed tensors: for one outer index, dst's run of `inner * len` values
    // is the parts' runs from `inner * start`, summed.
    let inner = dst.ne[..dim].iter().product::<i64>() as usize;
    let outer = dst.ne[dim + 1..].iter().product::<i64>() as usize;
    let run = inner * dst.ne[dim] as usize;
    let part_run = inner * parts[0].ne[dim] as usize;
    let skip = inner * start;
    let name = format!(
        "reduce_scatter_sum of {} parts along dim {dim}",
        parts.len()
    );
    unit_kernel(name, outer, move |units| {
        let (dst, parts) = (&dst, &parts);
        for o in units {
            // SAFETY: shapes checked at prepare: dst values [o * run, + run)
            // and part values [o * part_run + skip, + run) are inside their
            // tensors (start + len <= the parts' extent); each outer index is
            // one thread's, and the parts are only read.
            unsafe {
                let at = |p: &RawTensor| {
                    std::slice::from_raw_parts(p.data.cast::<f32>().add(o * part_run + skip), run)
                };
                let out = std::slice::from_raw_parts_mut(dst.data.cast::<f32>().add(o * run), run);
                ordered_sum(out, parts.iter().map(at));
            }
        }
    })
}
