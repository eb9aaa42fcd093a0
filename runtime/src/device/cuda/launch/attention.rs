//! The launch of an attention step (`kernels/attention.cu`).

use super::{GRID_X, Kernel, Launch, args, dim, is_float, require};
use crate::RuntimeError;
use crate::device::cpu::RawTensor;
use ir::DType;

/// The largest key or value head the kernel holds (`ATT_MAXD`).
pub const MAX_HEAD_DIM: i64 = 256;
/// Threads per block (`ATT_WARPS` warps).
const THREADS: u32 = 4 * 32;

/// The launch of an attention step writing `dst` (packed F32, the permuted
/// product's elements in order) from `srcs` = `[k, q, v]` or
/// `[k, q, v, mask]`: one block per (query row, head).
pub fn attention(
    dst: RawTensor,
    srcs: &[RawTensor],
    (scale, max_bias): (f32, f32),
) -> Result<Launch, RuntimeError> {
    let name = "attention";
    require(name, (3..=4).contains(&srcs.len()), || {
        format!("k, q, v and an optional mask, not {} sources", srcs.len())
    })?;
    let (k, q, v) = (&srcs[0], &srcs[1], &srcs[2]);
    require(name, srcs.iter().all(|t| is_float(t.dtype)), || {
        "k, q, v and the mask must be float tensors".to_string()
    })?;
    require(
        name,
        k.ne[0] <= MAX_HEAD_DIM && v.ne[1] <= MAX_HEAD_DIM,
        || {
            format!(
                "heads of {} and {} values exceed the kernel's {MAX_HEAD_DIM}",
                k.ne[0], v.ne[1]
            )
        },
    )?;
    let divides = |a: i64, b: i64| b >= 1 && a % b == 0;
    require(
        name,
        q.ne[0] == k.ne[0]
            && v.ne[0] == k.ne[1]
            && divides(q.ne[2], k.ne[2])
            && divides(q.ne[3], k.ne[3])
            && divides(q.ne[2], v.ne[2])
            && divides(q.ne[3], v.ne[3]),
        || {
            format!(
                "k {:?}, q {:?} and v {:?} are no attention's shapes",
                k.ne, q.ne, v.ne
            )
        },
    )?;
    let out = v.ne[1] * q.ne[1] * q.ne[2] * q.ne[3];
    let packed = ir::layout::contiguous_strides(DType::F32, dst.ne) == Some(dst.nb);
    require(
        name,
        dst.dtype == DType::F32 && packed && dst.ne.iter().product::<i64>() == out,
        || {
            format!(
                "the result must be packed F32 of {out} elements, not {} {:?}",
                dst.dtype, dst.ne
            )
        },
    )?;
    let mut tensors = vec![dst];
    tensors.extend_from_slice(srcs);
    let mut a = args(name, &tensors)?;
    a.f[0] = scale;
    a.f[1] = max_bias;
    a.i[0] = i32::from(srcs.len() > 3);
    let blocks = dim(name, q.ne[1] * q.ne[2] * q.ne[3], GRID_X)?;
    Ok(Launch {
        kernel: Kernel::Library("attention"),
        grid: [blocks, 1, 1],
        block: THREADS,
        args: a,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dtype: DType, ne: [i64; 4]) -> RawTensor {
        let nb = ir::layout::contiguous_strides(dtype, ne).expect("a float layout");
        RawTensor {
            data: 0x1000 as *mut u8,
            dtype,
            ne,
            nb,
        }
    }

    #[test]
    fn one_block_per_query_row_and_head_with_the_mask_flagged() {
        // SmolLM2's decode: head 64, 64 cached rows, 9 query heads over 3.
        let k = t(DType::F16, [64, 64, 3, 1]);
        let v = t(DType::F16, [64, 64, 3, 1]);
        let mask = t(DType::F32, [64, 5, 1, 1]);
        for n_q in [1, 5] {
            let q = t(DType::F32, [64, n_q, 9, 1]);
            let dst = t(DType::F32, [576, n_q, 1, 1]);
            let l = attention(dst, &[k, q, v, mask], (0.125, 0.0)).expect("launch");
            assert_eq!(l.kernel, Kernel::Library("attention"));
            assert_eq!((l.grid, l.block), ([9 * n_q as u32, 1, 1], THREADS));
            assert_eq!((l.args.f[0], l.args.f[1], l.args.i[0]), (0.125, 0.0, 1));
            let l = attention(dst, &[k, q, v], (0.125, 0.0)).expect("no mask");
            assert_eq!(l.args.i[0], 0);
        }
    }

    #[test]
    fn heads_too_large_and_results_not_packed_are_refused() {
        let k = t(DType::F32, [257, 8, 1, 1]);
        let q = t(DType::F32, [257, 1, 2, 1]);
        let v = t(DType::F32, [8, 257, 1, 1]);
        let dst = t(DType::F32, [514, 1, 1, 1]);
        let err = attention(dst, &[k, q, v], (1.0, 0.0)).unwrap_err();
        assert!(err.to_string().contains("exceed the kernel's 256"), "{err}");
        let k = t(DType::F32, [40, 8, 1, 1]);
        let q = t(DType::F32, [40, 1, 2, 1]);
        let v = t(DType::F32, [8, 40, 1, 1]);
        let mut dst = t(DType::F32, [80, 1, 1, 1]);
        attention(dst, &[k, q, v], (1.0, 0.0)).expect("packed");
        dst.nb[0] = 8;
        let err = attention(dst, &[k, q, v], (1.0, 0.0)).unwrap_err();
        assert!(err.to_string().contains("packed F32"), "{err}");
        let q3 = t(DType::F32, [40, 1, 3, 1]);
        let two_heads = t(DType::F32, [40, 8, 2, 1]);
        let err = attention(
            t(DType::F32, [120, 1, 1, 1]),
            &[two_heads, q3, v],
            (1.0, 0.0),
        );
        assert!(err.is_err(), "3 query heads over 2 cache heads");
    }
}
