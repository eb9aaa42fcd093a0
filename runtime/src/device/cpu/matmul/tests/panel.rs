//! The panel route on every instruction set this host has: odd sizes (tiles
//! cut in both directions, depths across [`KC`] blocks), batches of
//! activations, F16 and BF16 weights, non-f32 activations and strided dst.

use super::super::panel::{KC, PanelIsa};
use super::{Route, Tensor, check};
use ir::DType;
use kernels::testing::Rng;

/// Each set the host has, with a line when it has none (the test would
/// otherwise pass without checking anything).
fn sets() -> Vec<PanelIsa> {
    let sets = PanelIsa::available();
    if sets.is_empty() {
        eprintln!("panel kernels: this host has neither AVX2+FMA nor AVX-512F; skipped");
    }
    sets
}

#[test]
fn f32_weights_at_odd_sizes() {
    let mut rng = Rng::new(11);
    for isa in sets() {
        for (k, m, n) in [
            (1, 1, 1),
            (7, 33, 13),
            (33, 17, 25),
            (64, 47, 12),
            (96, 783, 1),
            (KC as i64 + 37, 65, 7),
            (2 * KC as i64 + 1, 31, 29),
        ] {
            let mut a = Tensor::packed(&mut rng, DType::F32, [k, m, 1, 1]);
            let mut b = Tensor::packed(&mut rng, DType::F32, [k, n, 1, 1]);
            check(&mut a, &mut b, Route::Panels(isa));
        }
    }
}

#[test]
fn batches_of_activations_share_the_weight() {
    let mut rng = Rng::new(12);
    for isa in sets() {
        let mut a = Tensor::packed(&mut rng, DType::F32, [40, 21, 1, 1]);
        let mut b = Tensor::packed(&mut rng, DType::F32, [40, 5, 3, 2]);
        check(&mut a, &mut b, Route::Panels(isa));
    }
}

#[test]
fn half_weights_and_activations() {
    let mut rng = Rng::new(13);
    for isa in sets() {
        for (t0, t1) in [
            (DType::F16, DType::F32),
            (DType::BF16, DType::F32),
            (DType::F32, DType::F16),
            (DType::F16, DType::BF16),
        ] {
            let mut a = Tensor::packed(&mut rng, t0, [67, 45, 1, 1]);
            let mut b = Tensor::packed(&mut rng, t1, [67, 19, 1, 1]);
            check(&mut a, &mut b, Route::Panels(isa));
        }
    }
}

#[test]
fn strided_activations() {
    // src1 a permuted view (rows of K not contiguous): packing reads strides.
    let mut rng = Rng::new(14);
    for isa in sets() {
        let mut a = Tensor::packed(&mut rng, DType::F32, [24, 37, 1, 1]);
        let mut b = Tensor::new(&mut rng, DType::F32, [9, 24, 1, 1], [1, 0, 2, 3], -1.0, 1.0);
        check(&mut a, &mut b, Route::Panels(isa));
    }
}

#[test]
fn one_column_takes_four_panels_at_once() {
    // Enough panels for every thread of the harness (1 to 3) to run
    // four-panel steps and single leftovers; depth across two blocks.
    let mut rng = Rng::new(15);
    for isa in sets() {
        for (t0, m) in [(DType::F32, 333), (DType::F16, 517), (DType::F32, 5 * 32)] {
            let mut a = Tensor::packed(&mut rng, t0, [KC as i64 + 37, m, 1, 1]);
            let mut b = Tensor::packed(&mut rng, DType::F32, [KC as i64 + 37, 1, 1, 1]);
            check(&mut a, &mut b, Route::Panels(isa));
        }
    }
}
