//! The gemm route: f32 in place (contiguous, broadcast, permuted views) and
//! every other dtype converted.

use super::{Route, Tensor, check};
use ir::DType;
use kernels::testing::Rng;

const ID: [u8; 4] = [0, 1, 2, 3];

fn packed_pair(rng: &mut Rng, t0: DType, t1: DType, a: [i64; 4], b: [i64; 4]) {
    let mut x = Tensor::packed(rng, t0, a);
    let mut y = Tensor::packed(rng, t1, b);
    check(&mut x, &mut y, Route::Default);
}

#[test]
fn f32_odd_sizes() {
    let mut rng = Rng::new(1);
    for (k, m, n) in [
        (32, 1, 1),
        (33, 3, 17),
        (64, 17, 3),
        (96, 783, 1),
        (96, 17, 128),
        (7, 783, 128),
        (4096, 3, 2),
    ] {
        packed_pair(&mut rng, DType::F32, DType::F32, [k, m, 1, 1], [k, n, 1, 1]);
    }
}

#[test]
fn f32_broadcast_over_dims_2_and_3() {
    let mut rng = Rng::new(2);
    // GQA: 3 weight matrices shared by 9 batches, and a dim-3 broadcast.
    packed_pair(
        &mut rng,
        DType::F32,
        DType::F32,
        [64, 17, 3, 2],
        [64, 5, 9, 2],
    );
    packed_pair(
        &mut rng,
        DType::F32,
        DType::F32,
        [32, 3, 1, 1],
        [32, 4, 2, 3],
    );
    // Many small matrices (split by batch) and few large ones (split by rows).
    packed_pair(
        &mut rng,
        DType::F32,
        DType::F32,
        [16, 5, 7, 1],
        [16, 3, 7, 1],
    );
}

#[test]
fn f32_permuted_views() {
    let mut rng = Rng::new(3);
    // Attention K^T Q: K [64, n_kv 17, 3 heads] as a permuted view of a
    // [64, 3, 17] cache; Q [64, 7 queries, 9 heads] from a [64, 9, 7] root.
    let mut k = Tensor::new(
        &mut rng,
        DType::F32,
        [64, 3, 17, 1],
        [0, 2, 1, 3],
        -1.0,
        1.0,
    );
    let mut q = Tensor::new(&mut rng, DType::F32, [64, 9, 7, 1], [0, 2, 1, 3], -1.0, 1.0);
    check(&mut k, &mut q, Route::Default);
    // A transposed src1 (element stride 5 floats): V times softmax rows.
    let mut v = Tensor::new(&mut rng, DType::F32, [33, 17, 3, 1], ID, -1.0, 1.0);
    let mut s = Tensor::new(&mut rng, DType::F32, [5, 33, 3, 1], [1, 0, 2, 3], -1.0, 1.0);
    check(&mut v, &mut s, Route::Default);
}

#[test]
fn converted_src0_dtypes() {
    let mut rng = Rng::new(4);
    for t in [DType::F16, DType::BF16] {
        for (k, m, n) in [(32, 1, 1), (33, 17, 3), (96, 783, 1), (64, 33, 128)] {
            packed_pair(&mut rng, t, DType::F32, [k, m, 1, 1], [k, n, 1, 1]);
        }
    }
    for t in [DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        for (m, n) in [(3, 1), (17, 5), (33, 128)] {
            packed_pair(&mut rng, t, DType::F32, [256, m, 1, 1], [256, n, 1, 1]);
        }
    }
    // Broadcast with a converted src0.
    packed_pair(
        &mut rng,
        DType::F16,
        DType::F32,
        [64, 17, 3, 1],
        [64, 5, 9, 1],
    );
}

#[test]
fn converted_src0_permuted_and_src1_f16() {
    let mut rng = Rng::new(5);
    // An f16 KV cache viewed per head (rows strided) against permuted f32 queries.
    let mut k = Tensor::new(
        &mut rng,
        DType::F16,
        [64, 3, 17, 1],
        [0, 2, 1, 3],
        -1.0,
        1.0,
    );
    let mut q = Tensor::new(&mut rng, DType::F32, [64, 9, 1, 1], [0, 2, 1, 3], -1.0, 1.0);
    check(&mut k, &mut q, Route::Default);
    // f16 and bf16 activations (converted once into scratch).
    packed_pair(
        &mut rng,
        DType::F32,
        DType::F16,
        [33, 17, 1, 1],
        [33, 5, 1, 1],
    );
    packed_pair(
        &mut rng,
        DType::F16,
        DType::BF16,
        [64, 17, 2, 1],
        [64, 3, 4, 1],
    );
    let mut a = Tensor::new(&mut rng, DType::F32, [40, 9, 2, 1], ID, -1.0, 1.0);
    let mut b = Tensor::new(&mut rng, DType::F16, [3, 40, 2, 1], [1, 0, 2, 3], -1.0, 1.0);
    check(&mut a, &mut b, Route::Default);
}

#[test]
fn refuses_bad_operands() {
    let mut rng = Rng::new(6);
    let mut a = Tensor::packed(&mut rng, DType::F32, [32, 3, 2, 1]);
    let mut b = Tensor::packed(&mut rng, DType::F32, [32, 4, 3, 1]);
    let mut d = Tensor::packed(&mut rng, DType::F32, [3, 4, 3, 1]);
    let err = super::super::prepare_mul_mat(d.raw(), a.raw(), b.raw())
        .err()
        .unwrap();
    assert!(err.to_string().contains("mul_mat"), "{err}");
    let mut i = Tensor::packed(&mut rng, DType::I32, [32, 4, 2, 1]);
    assert!(super::super::prepare_mul_mat(d.raw(), a.raw(), i.raw()).is_err());
}

#[test]
fn quantized_rows_widen_exactly_as_the_reference() {
    let mut rng = Rng::new(21);
    for t in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
        let size = t.block_bytes() as usize;
        for blocks in [1, 3, 18] {
            let mut row: Vec<u8> = (0..blocks * size).map(|_| rng.next_u64() as u8).collect();
            for b in 0..blocks {
                // Finite scales and minimums (random bits could be inf or NaN,
                // whose payloads need not match); both signs.
                for at in [0, 2]
                    .into_iter()
                    .take(if t == DType::Q4_1 { 2 } else { 1 })
                {
                    let v = half::f16::from_f64(rng.uniform(-2.0, 2.0));
                    row[b * size + at..b * size + at + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            let mut want = vec![0f32; blocks * 32];
            kernels::quant::dequantize_row(t, &row, &mut want);
            let mut got = vec![f32::NAN; blocks * 32];
            // SAFETY: `row` holds `blocks` whole blocks of `t`.
            unsafe {
                crate::device::cpu::matmul::convert::row_to_f32(t, row.as_ptr(), 0, &mut got)
            };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{t}, {blocks} blocks");
        }
    }
}

/// mul_mat(a with only its first `rows` rows, b) on `nth` threads: f32 dst.
fn first_rows_times(a: &mut Tensor, b: &mut Tensor, rows: i64, nth: usize) -> Vec<f32> {
    let mut a_rows = a.raw();
    a_rows.ne[1] = rows;
    let ne = [rows, b.layout.ne[1], b.layout.ne[2], b.layout.ne[3]];
    let out = ir::Layout::contiguous(DType::F32, ne).unwrap();
    let mut dst = super::Buf::new(out.span_bytes() as usize);
    let raw_dst = crate::device::cpu::RawTensor {
        data: dst.ptr(),
        dtype: DType::F32,
        ne,
        nb: out.nb,
    };
    let kernel = super::super::prepare_mul_mat(raw_dst, a_rows, b.raw()).unwrap();
    let mut scratch = super::Buf::new(kernel.scratch_bytes());
    let scratch_ptr = scratch.ptr() as usize;
    let pool = crate::device::cpu::ThreadPool::new(nth);
    // SAFETY: the tensors and scratch outlive the run; every thread calls run once.
    pool.run(&|ctx| unsafe { kernel.run(ctx, scratch_ptr as *mut u8) });
    dst.bytes()[..out.span_bytes() as usize]
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn one_column_rows_do_not_depend_on_the_row_count_or_threads() {
    // Decode's attention scores over a context bucket (the first rows of a
    // KV cache) must be those over the whole cache, bit for bit: the same row
    // may not take another gemm kernel because the matrix has more rows
    // (gemm switches kernels above 256) or the threads split it differently.
    let mut rng = Rng::new(7);
    for dtype in [DType::F32, DType::F16] {
        // K cache [64, 1000 slots, 3 heads], 9 query heads (GQA broadcast).
        let mut k = Tensor::new(&mut rng, dtype, [64, 3, 1000, 1], [0, 2, 1, 3], -1.0, 1.0);
        let mut q = Tensor::new(&mut rng, DType::F32, [64, 9, 1, 1], [0, 2, 1, 3], -1.0, 1.0);
        let full = first_rows_times(&mut k, &mut q, 1000, 1);
        for rows in [1, 17, 128, 256, 257, 600, 1000] {
            for nth in 1..=3 {
                let got = first_rows_times(&mut k, &mut q, rows, nth);
                for (head, got) in got.chunks(rows as usize).enumerate() {
                    let want = &full[head * 1000..head * 1000 + rows as usize];
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(got),
                        bits(want),
                        "{dtype}, {rows} rows, {nth} threads, head {head}"
                    );
                }
            }
        }
    }
}
