//! rope: both modes, plain and YaRN parameters, partial rotation, strided and
//! in-place sources, large positions.

use super::harness::*;
use ir::{DType, Op, RopeMode, RopeParams};
use kernels::testing::Rng;

fn yarn(mode: RopeMode, n_dims: u32) -> RopeParams {
    RopeParams {
        mode,
        n_dims,
        freq_base: 10000.0,
        freq_scale: 0.25,
        n_ctx_orig: 4096,
        ext_factor: 1.0,
        attn_factor: 0.9,
        beta_fast: 32.0,
        beta_slow: 1.0,
    }
}

fn positions(rng: &mut Rng, n: i64) -> T {
    indices(rng, [n, 1, 1, 1], 5000)
}

#[test]
fn rope_modes_params_and_dtypes() {
    let mut rng = Rng::new(10);
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (ne, n_dims) in [
            ([10, 1, 1, 1], 10),
            ([64, 3, 17, 1], 64),
            ([66, 5, 3, 2], 32),
        ] {
            for p in [RopeParams::plain(mode, n_dims, 10000.0), yarn(mode, n_dims)] {
                for dtype in [DType::F32, DType::F16] {
                    let a = filled(&mut rng, dtype, ne);
                    let pos = positions(&mut rng, ne[2]);
                    let dst = poisoned(dtype, ne);
                    let what = format!("rope {mode:?} {dtype} {ne:?} n_dims {n_dims}");
                    check(
                        &what,
                        Op::Rope(p),
                        vec![a, pos],
                        Dst::Own(dst),
                        Expect::Nmse,
                    );
                }
            }
        }
    }
}

#[test]
fn rope_many_tokens_strided_and_in_place() {
    let mut rng = Rng::new(11);
    let p = RopeParams::plain(RopeMode::Neox, 32, 1_000_000.0);
    // 783 tokens of 4 heads.
    let a = filled(&mut rng, DType::F32, [32, 4, 783, 1]);
    let pos = positions(&mut rng, 783);
    let dst = poisoned(DType::F32, [32, 4, 783, 1]);
    check(
        "rope 783 tokens",
        Op::Rope(p),
        vec![a, pos],
        Dst::Own(dst),
        Expect::Nmse,
    );
    // Q heads seen inside a fused QKV projection (strided rows, offset).
    let q = view_in(
        &mut rng,
        DType::F32,
        [32, 3, 17, 1],
        [32, 9, 17, 1],
        [0, 3, 0, 0],
    );
    let pos = positions(&mut rng, 17);
    let dst = poisoned(DType::F32, [32, 3, 17, 1]);
    check(
        "rope strided",
        Op::Rope(p),
        vec![q, pos],
        Dst::Own(dst),
        Expect::Nmse,
    );
    // In place: dst is the source's memory.
    for dtype in [DType::F32, DType::F16] {
        let a = filled(&mut rng, dtype, [32, 2, 5, 1]);
        let pos = positions(&mut rng, 5);
        let what = format!("rope in place {dtype}");
        check(
            &what,
            Op::Rope(yarn(RopeMode::Normal, 16)),
            vec![a, pos],
            Dst::Into(0),
            Expect::Nmse,
        );
    }
}

/// Llama 3's frequency factors (src2, one per pair, a few to spare), plain and
/// with YaRN, at an odd row length.
#[test]
fn rope_with_frequency_factors() {
    let mut rng = Rng::new(12);
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for p in [RopeParams::plain(mode, 42, 500_000.0), yarn(mode, 42)] {
            let ne = [46, 3, 19, 1];
            let a = filled(&mut rng, DType::F32, ne);
            let pos = positions(&mut rng, ne[2]);
            let factors = dense(DType::F32, &random(&mut rng, [23, 1, 1, 1], 1.0, 8.0));
            let dst = poisoned(DType::F32, ne);
            check(
                &format!("rope {mode:?} with factors"),
                Op::Rope(p),
                vec![a, pos, factors],
                Dst::Own(dst),
                Expect::Nmse,
            );
        }
    }
}
