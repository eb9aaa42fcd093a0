//! A mixture of experts' ops: mul_mat_id over float and quantized experts
//! (one activation row per token, or one per slot; strided ids as llama.cpp's
//! top-k view gives them), a part of the experts (expert parallelism) and
//! argsort in both orders, at odd sizes.

use super::harness::*;
use ir::{DType, Op};
use kernels::testing::Rng;

#[test]
fn mul_mat_id_float_and_quantized_experts() {
    let mut rng = Rng::new(70);
    // (expert dtype, k): block dtypes need whole blocks per row.
    for (dtype, k) in [
        (DType::F32, 45),
        (DType::F16, 45),
        (DType::Q8_0, 64),
        (DType::Q4_0, 96),
        (DType::Q4_K, 256),
        (DType::Q6_K, 256),
    ] {
        let (n, n_expert, n_used, t) = (19, 7, 3, 5);
        for b1 in [1, n_used] {
            let experts = filled(&mut rng, dtype, [k, n, n_expert, 1]);
            let b = filled(&mut rng, DType::F32, [k, b1, t, 1]);
            let ids = indices(&mut rng, [n_used, t, 1, 1], n_expert as usize);
            let dst = poisoned(DType::F32, [n, n_used, t, 1]);
            check(
                &format!("mul_mat_id {dtype} k {k} b1 {b1}"),
                Op::MulMatId,
                vec![experts, b, ids],
                Dst::Own(dst),
                Expect::Nmse,
            );
        }
    }
    // The ids as llama.cpp reads them: the first 2 of each argsort row of 8.
    let experts = filled(&mut rng, DType::F32, [33, 11, 8, 1]);
    let b = filled(&mut rng, DType::F32, [33, 1, 9, 1]);
    let mut ids = indices(&mut rng, [8, 9, 1, 1], 8);
    ids.layout.ne = [2, 9, 1, 1];
    let dst = poisoned(DType::F32, [11, 2, 9, 1]);
    check(
        "mul_mat_id strided ids",
        Op::MulMatId,
        vec![experts, b, ids],
        Dst::Own(dst),
        Expect::Nmse,
    );
}

/// A `mul_mat_id_part` (experts 3..7 of 9) through `prepare_op`: an f32 dst
/// on the grouped kernel, an f16 one row by row; ids over the full set, so
/// some slots are other parts' (rows of zeros, over a poisoned dst).
#[test]
fn mul_mat_id_part_on_both_kernels() {
    let mut rng = Rng::new(72);
    for (dtype, k) in [(DType::F32, 45), (DType::Q8_0, 64), (DType::Q4_K, 256)] {
        for dst_dtype in [DType::F32, DType::F16] {
            let experts = filled(&mut rng, dtype, [k, 13, 4, 1]);
            let b = filled(&mut rng, DType::F32, [k, 1, 6, 1]);
            let ids = indices(&mut rng, [3, 6, 1, 1], 9);
            let dst = poisoned(dst_dtype, [13, 3, 6, 1]);
            check(
                &format!("mul_mat_id_part {dtype} into {dst_dtype}"),
                Op::MulMatIdPart {
                    first: 3,
                    experts: 9,
                },
                vec![experts, b, ids],
                Dst::Own(dst),
                Expect::Nmse,
            );
        }
    }
}

#[test]
fn argsort_rows_both_orders() {
    let mut rng = Rng::new(71);
    for ne in [[1, 1, 1, 1], [8, 17, 1, 1], [37, 3, 2, 1]] {
        for descending in [false, true] {
            let a = filled(&mut rng, DType::F32, ne);
            let dst = poisoned(DType::I32, ne);
            check(
                &format!("argsort {ne:?} descending {descending}"),
                Op::Argsort { descending },
                vec![a],
                Dst::Own(dst),
                Expect::Bytes,
            );
        }
    }
}
