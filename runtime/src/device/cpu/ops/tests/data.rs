//! get_rows, set_rows, cpy, cont, concat: exact data movement and conversion.

use super::harness::*;
use ir::{DType, Op};
use kernels::testing::Rng;

const PLAIN: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const QUANT: [DType; 6] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

/// A row length valid for `dtype`: odd for plain types, an odd number of blocks.
fn odd_ne0(dtype: DType) -> i64 {
    match dtype.block_elems() {
        1 => 7,
        b => 3 * b as i64,
    }
}

#[test]
fn get_rows_every_table_dtype() {
    let mut rng = Rng::new(1);
    for dtype in ir::DType::ALL {
        let ne0 = odd_ne0(dtype);
        let big = if dtype.is_quantized() { 17 } else { 783 };
        for (n, ne2, ne3) in [(1, 1, 1), (3, 1, 1), (big, 1, 1), (5, 2, 3)] {
            let table = filled(&mut rng, dtype, [ne0, 17, ne2, ne3]);
            let idx = indices(&mut rng, [n, ne2, ne3, 1], 17);
            let out = if dtype == DType::I32 {
                DType::I32
            } else {
                DType::F32
            };
            let dst = poisoned(out, [ne0, n, ne2, ne3]);
            let what = format!("get_rows {dtype} n={n}");
            check(
                &what,
                Op::GetRows,
                vec![table, idx],
                Dst::Own(dst),
                Expect::Bytes,
            );
        }
    }
}

#[test]
fn get_rows_to_f16_and_from_strided_tables() {
    let mut rng = Rng::new(2);
    for dtype in [DType::F32, DType::F16, DType::Q8_0] {
        let table = filled(&mut rng, dtype, [odd_ne0(dtype), 9, 1, 1]);
        let idx = indices(&mut rng, [17, 1, 1, 1], 9);
        let dst = poisoned(DType::F16, [odd_ne0(dtype), 17, 1, 1]);
        let what = format!("get_rows {dtype} -> f16");
        check(
            &what,
            Op::GetRows,
            vec![table, idx],
            Dst::Own(dst),
            Expect::Bytes,
        );
    }
    for dtype in PLAIN {
        // A transposed table: elements of a row are strided.
        let table = permuted(&mut rng, dtype, [5, 11, 1, 1], [1, 0, 2, 3], -1.0, 1.0);
        let idx = indices(&mut rng, [4, 1, 1, 1], 11);
        let dst = poisoned(DType::F32, [5, 4, 1, 1]);
        let what = format!("get_rows transposed {dtype}");
        check(
            &what,
            Op::GetRows,
            vec![table, idx],
            Dst::Own(dst),
            Expect::Bytes,
        );
    }
}

#[test]
fn get_rows_part_gives_its_rows_and_zeros_for_the_others() {
    let mut rng = Rng::new(4);
    // A part of 7 rows starting at row 5 of a 20-row table; indices over the
    // whole table, so some fall before, in and after the part.
    for dtype in [
        DType::F32,
        DType::F16,
        DType::Q8_0,
        DType::Q4_1,
        DType::Q4_K,
    ] {
        let table = filled(&mut rng, dtype, [odd_ne0(dtype), 7, 2, 1]);
        let idx = indices(&mut rng, [23, 2, 1, 1], 20);
        let dst = poisoned(DType::F32, [odd_ne0(dtype), 23, 2, 1]);
        let what = format!("get_rows_part {dtype}");
        check(
            &what,
            Op::GetRowsPart { start: 5 },
            vec![table, idx],
            Dst::Own(dst),
            Expect::Bytes,
        );
    }
}

#[test]
fn get_rows_part_far_from_every_index_gives_zeros() {
    // A start no index can reach, and negative indices: zeros, no overflow.
    let mut rng = Rng::new(5);
    let table = filled(&mut rng, DType::F32, [8, 3, 1, 1]);
    let idx = dense(
        DType::I32,
        &kernels::reference::Dense::new([3, 1, 1, 1], vec![-2147483648.0, -1.0, 2.0]),
    );
    let mut out = poisoned(DType::F32, [8, 3, 1, 1]);
    let mut srcs = [table, idx];
    let raws: Vec<_> = srcs.iter_mut().map(T::raw).collect();
    let op = Op::GetRowsPart { start: i64::MAX };
    let kernel = crate::device::cpu::ops::prepare_op(&op, out.raw(), &raws).expect("prepared");
    for pool in pools() {
        // SAFETY: the operands live across the run; no scratch.
        pool.run(&|ctx| unsafe { kernel.run(ctx, std::ptr::null_mut()) });
        assert!(out.values().data.iter().all(|&v| v == 0.0));
    }
}

/// Distinct row indices below `below` for every (i2, i3) of `[n, ne1, ne2, 1]`.
fn distinct_indices(rng: &mut Rng, ne: [i64; 4], below: usize) -> T {
    let mut v = Vec::new();
    for _ in 0..ne[1] * ne[2] {
        let mut pool: Vec<usize> = (0..below).collect();
        for _ in 0..ne[0] {
            v.push(pool.swap_remove(rng.below(pool.len())) as f64);
        }
    }
    dense(DType::I32, &kernels::reference::Dense::new(ne, v))
}

#[test]
fn set_rows_keeps_untouched_rows() {
    let mut rng = Rng::new(3);
    let dsts = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_1,
        DType::Q4_K,
    ];
    for dtype in dsts {
        for src in [DType::F32, DType::F16] {
            let ne0 = odd_ne0(dtype);
            for (n, ne2, ne3, in1, in2) in [(1, 1, 1, 1, 1), (17, 1, 1, 1, 1), (5, 2, 3, 1, 3)] {
                let base = filled(&mut rng, dtype, [ne0, 40, ne2, ne3]);
                let rows = filled(&mut rng, src, [ne0, n, ne2, ne3]);
                let idx = distinct_indices(&mut rng, [n, in1, in2, 1], 40);
                let what = format!("set_rows {src} -> {dtype} n={n}");
                let srcs = vec![base, rows, idx];
                check(&what, Op::SetRows, srcs, Dst::Into(0), Expect::Bytes);
            }
        }
    }
}

/// llama.cpp's transposed V write: one-element rows, one index each (the
/// F32 -> F16 case takes an inline conversion).
#[test]
fn set_rows_of_single_elements_as_a_transposed_v_cache() {
    let mut rng = Rng::new(5);
    for dtype in [DType::F16, DType::F32, DType::BF16] {
        for n in [1, 97, 299] {
            let base = filled(&mut rng, dtype, [1, 301, 1, 1]);
            let rows = filled(&mut rng, DType::F32, [1, n, 1, 1]);
            let idx = distinct_indices(&mut rng, [n, 1, 1, 1], 301);
            let what = format!("set_rows of single elements -> {dtype} n={n}");
            check(
                &what,
                Op::SetRows,
                vec![base, rows, idx],
                Dst::Into(0),
                Expect::Bytes,
            );
        }
    }
}

#[test]
fn set_rows_with_repeated_indices_keeps_the_last_row_on_any_thread_count() {
    let mut rng = Rng::new(9);
    for (n, ne2, in1) in [(33, 1, 1), (21, 3, 3), (64, 2, 1)] {
        let base = filled(&mut rng, DType::F32, [7, 5, ne2, 1]);
        let rows = filled(&mut rng, DType::F32, [7, n, ne2, 1]);
        // Only 5 destination rows for n > 5 source rows: most repeat.
        let v: Vec<f64> = (0..n * in1).map(|_| rng.below(5) as f64).collect();
        let idx = dense(
            DType::I32,
            &kernels::reference::Dense::new([n, in1, 1, 1], v),
        );
        let what = format!("set_rows with repeats n={n} ne2={ne2}");
        check(
            &what,
            Op::SetRows,
            vec![base, rows, idx],
            Dst::Into(0),
            Expect::Bytes,
        );
    }
}

#[test]
fn cpy_between_every_dtype_into_views() {
    let mut rng = Rng::new(4);
    for src in PLAIN {
        for dst in PLAIN.into_iter().chain(QUANT) {
            let ne0 = odd_ne0(dst);
            // Contiguous to contiguous, rows 1, 3, 783.
            let row_counts: &[i64] = if dst.is_quantized() {
                &[1, 3]
            } else {
                &[1, 3, 783]
            };
            for &rows in row_counts {
                let a = filled(&mut rng, src, [ne0, rows, 1, 1]);
                let b = filled(&mut rng, dst, [ne0, rows, 1, 1]);
                let what = format!("cpy {src} -> {dst} rows={rows}");
                check(&what, Op::Cpy, vec![a, b], Dst::Into(1), Expect::Bytes);
            }
            // Into a view of a bigger cache (rows 5..22 of 40): the rest stays.
            let a = filled(&mut rng, src, [ne0, 17, 1, 1]);
            let b = view_in(
                &mut rng,
                dst,
                [ne0, 17, 1, 1],
                [ne0, 40, 1, 1],
                [0, 5, 0, 0],
            );
            let what = format!("cpy {src} -> {dst} view");
            check(&what, Op::Cpy, vec![a, b], Dst::Into(1), Expect::Bytes);
        }
        // A permuted source into a packed destination of another shape.
        for dst in [DType::F32, DType::F16, DType::Q8_0] {
            let a = permuted(&mut rng, src, [12, 32, 2, 1], [2, 0, 1, 3], -1.0, 1.0);
            let b = filled(&mut rng, dst, [64, 12, 1, 1]);
            let what = format!("cpy permuted {src} -> {dst} reshaped");
            check(&what, Op::Cpy, vec![a, b], Dst::Into(1), Expect::Bytes);
        }
    }
    // Transposed sources of the same shape (tiled walk; whole rows for quantized).
    for dst in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_K,
    ] {
        let a = permuted(
            &mut rng,
            DType::F32,
            [256, 37, 1, 1],
            [1, 0, 2, 3],
            -1.0,
            1.0,
        );
        let b = filled(&mut rng, dst, [256, 37, 1, 1]);
        let what = format!("cpy transposed f32 -> {dst}");
        check(&what, Op::Cpy, vec![a, b], Dst::Into(1), Expect::Bytes);
    }
    // A transposed destination (V cache written transposed).
    let a = filled(&mut rng, DType::F32, [5, 9, 1, 1]);
    let b = permuted(&mut rng, DType::F16, [5, 9, 1, 1], [1, 0, 2, 3], -1.0, 1.0);
    check(
        "cpy into transposed f16",
        Op::Cpy,
        vec![a, b],
        Dst::Into(1),
        Expect::Bytes,
    );
}

#[test]
fn cont_packs_strided_tensors() {
    let mut rng = Rng::new(5);
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        for ne in [
            [3, 1, 1, 1],
            [7, 17, 3, 1],
            [5, 783, 1, 2],
            [3, 4096, 1, 1],
            [130, 37, 2, 1],
        ] {
            let a = permuted(&mut rng, dtype, ne, [1, 2, 0, 3], -100.0, 100.0);
            let dst = poisoned(dtype, ne);
            let what = format!("cont {dtype} {ne:?}");
            check(&what, Op::Cont, vec![a], Dst::Own(dst), Expect::Bytes);
        }
        // Packing into another shape (ggml_cont_2d).
        let a = permuted(&mut rng, dtype, [6, 35, 1, 1], [1, 0, 2, 3], -100.0, 100.0);
        let dst = poisoned(dtype, [21, 10, 1, 1]);
        let what = format!("cont {dtype} reshaped");
        check(&what, Op::Cont, vec![a], Dst::Own(dst), Expect::Bytes);
        // Contiguous source (one long run).
        let a = filled(&mut rng, dtype, [33, 1001, 1, 1]);
        let dst = poisoned(dtype, [1001, 33, 1, 1]);
        let what = format!("cont {dtype} contiguous");
        check(&what, Op::Cont, vec![a], Dst::Own(dst), Expect::Bytes);
    }
    // Quantized rows are copied as they are (the reference re-quantizes, so
    // compare values).
    for dtype in QUANT {
        let ne0 = odd_ne0(dtype);
        let a = view_in(
            &mut rng,
            dtype,
            [ne0, 9, 1, 1],
            [ne0, 20, 1, 1],
            [0, 3, 0, 0],
        );
        let want = a.values();
        let dst = poisoned(dtype, [ne0, 9, 1, 1]);
        let what = format!("cont {dtype} rows");
        check(&what, Op::Cont, vec![a], Dst::Own(dst), Expect::Values);
        assert_eq!(want.ne, [ne0, 9, 1, 1]);
    }
}

#[test]
fn concat_along_every_dim() {
    let mut rng = Rng::new(6);
    for dtype in [DType::F32, DType::F16, DType::I32, DType::Q8_0] {
        let ne0 = odd_ne0(dtype);
        for dim in 0..4 {
            let mut nb = [ne0, 3, 2, 2];
            nb[dim] = if dim == 0 { 2 * ne0 } else { 5 };
            let a = filled(&mut rng, dtype, [ne0, 3, 2, 2]);
            let b = filled(&mut rng, dtype, nb);
            let mut ne = [ne0, 3, 2, 2];
            ne[dim] += nb[dim];
            let dst = poisoned(dtype, ne);
            let what = format!("concat {dtype} dim {dim}");
            check(
                &what,
                Op::Concat { dim: dim as u8 },
                vec![a, b],
                Dst::Own(dst),
                Expect::Bytes,
            );
        }
    }
    // Strided sources.
    let a = permuted(&mut rng, DType::F32, [5, 7, 3, 1], [1, 0, 2, 3], -1.0, 1.0);
    let b = permuted(&mut rng, DType::F32, [5, 4, 3, 1], [2, 1, 0, 3], -1.0, 1.0);
    let dst = poisoned(DType::F32, [5, 11, 3, 1]);
    check(
        "concat strided",
        Op::Concat { dim: 1 },
        vec![a, b],
        Dst::Own(dst),
        Expect::Bytes,
    );
}
