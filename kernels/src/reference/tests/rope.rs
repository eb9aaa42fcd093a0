use super::{assert_close, dense, run_same};
use crate::reference::{Dense, rope_yarn_corr_dims};
use crate::testing::Rng;
use ir::{Op, RopeMode, RopeParams};

fn positions(p: &[f64]) -> Dense {
    dense([p.len() as i64, 1, 1, 1], p)
}

#[test]
fn rope_at_position_zero_is_identity() {
    let mut rng = Rng::new(51);
    let a = Dense::new([8, 3, 2, 1], rng.vec(48, -2.0, 2.0));
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let y = run_same(
            Op::Rope(RopeParams::plain(mode, 6, 10000.0)),
            &[&a, &positions(&[0., 0.])],
        );
        assert_close(&y.data, &a.data, 0.0);
    }
}

#[test]
fn rope_normal_and_neox_by_hand() {
    // head_dim 6, n_dims 4, position 1: pair 0 turns by 1 rad, pair 1 by 10000^(-1/2) = 0.01.
    let a = dense([6, 1, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let pos = positions(&[1.0]);
    let (c1, s1) = (1f64.cos(), 1f64.sin());
    let (c2, s2) = (0.01f64.cos(), 0.01f64.sin());

    let y = run_same(
        Op::Rope(RopeParams::plain(RopeMode::Normal, 4, 10000.0)),
        &[&a, &pos],
    );
    let want = [
        c1 - 2. * s1,
        s1 + 2. * c1,
        3. * c2 - 4. * s2,
        3. * s2 + 4. * c2,
        5.,
        6.,
    ];
    assert_close(&y.data, &want, 1e-14);

    let y = run_same(
        Op::Rope(RopeParams::plain(RopeMode::Neox, 4, 10000.0)),
        &[&a, &pos],
    );
    let want = [
        c1 - 3. * s1,
        2. * c2 - 4. * s2,
        s1 + 3. * c1,
        2. * s2 + 4. * c2,
        5.,
        6.,
    ];
    assert_close(&y.data, &want, 1e-14);
}

#[test]
fn rope_preserves_pair_norms_and_scales_by_attn_factor() {
    let mut rng = Rng::new(52);
    let a = Dense::new([10, 2, 3, 2], rng.vec(120, -3.0, 3.0));
    let pos = positions(&[0., 7., 123.]);
    for (mode, attn_factor) in [
        (RopeMode::Normal, 1.0),
        (RopeMode::Neox, 1.0),
        (RopeMode::Normal, 2.0),
    ] {
        let mut p = RopeParams::plain(mode, 8, 500.0);
        p.attn_factor = attn_factor;
        let y = run_same(Op::Rope(p), &[&a, &pos]);
        for (x, out) in a.rows().zip(y.rows()) {
            for i in 0..4 {
                let (j0, j1) = if mode == RopeMode::Normal {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + 4)
                };
                let before = x[j0].hypot(x[j1]);
                let after = out[j0].hypot(out[j1]);
                assert_close(&[after], &[before * f64::from(attn_factor)], 1e-13);
            }
            assert_eq!(&x[8..], &out[8..], "elements past n_dims pass through");
        }
    }
}

#[test]
fn rope_each_token_uses_its_own_position() {
    // Token 0 at position 0 is unchanged; token 1 at position 2 turns pair 0 by 2 rad.
    let a = dense([2, 1, 2, 1], &[1., 0., 1., 0.]);
    let y = run_same(
        Op::Rope(RopeParams::plain(RopeMode::Normal, 2, 10000.0)),
        &[&a, &positions(&[0., 2.])],
    );
    assert_close(&y.data, &[1., 0., 2f64.cos(), 2f64.sin()], 1e-15);
}

#[test]
fn yarn_corr_dims_by_hand() {
    // corr_dim(32) = 4 ln(4096 / 64 pi) / (2 ln 10000) = 0.6545 -> floor 0;
    // corr_dim(1) = 1.4071 -> ceil 2.
    assert_eq!(rope_yarn_corr_dims(4, 4096, 10000.0, 32.0, 1.0), [0.0, 2.0]);
    // Clamped to n_dims - 1 at the top.
    assert_eq!(rope_yarn_corr_dims(4, 1 << 30, 10000.0, 32.0, 1.0)[1], 3.0);
}

#[test]
fn rope_yarn_by_hand() {
    // corr dims [0, 2]: ramp(0) = 1 (pure extrapolation), ramp(1) = 0.5.
    // freq_scale 0.25, ext_factor 1, position 3:
    // pair 0: theta = 3; pair 1: theta = 0.5 * 0.25 * 0.03 + 0.5 * 0.03 = 0.01875;
    // mscale = 1 + 0.1 ln 4.
    let p = RopeParams {
        mode: RopeMode::Normal,
        n_dims: 4,
        freq_base: 10000.0,
        freq_scale: 0.25,
        n_ctx_orig: 4096,
        ext_factor: 1.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    let a = dense([4, 1, 1, 1], &[1., 0., 0., 1.]);
    let y = run_same(Op::Rope(p), &[&a, &positions(&[3.0])]);
    let m = 1.0 + 0.1 * 4f64.ln();
    let t = 0.01875f64;
    assert_close(
        &y.data,
        &[m * 3f64.cos(), m * 3f64.sin(), -m * t.sin(), m * t.cos()],
        1e-13,
    );

    // Without YaRN the same params interpolate every pair: theta = 0.25 * pos * freq.
    let plain = RopeParams {
        ext_factor: 0.0,
        ..p
    };
    let y = run_same(Op::Rope(plain), &[&a, &positions(&[3.0])]);
    let t0 = 0.75f64;
    let t1 = 0.0075f64;
    assert_close(&y.data, &[t0.cos(), t0.sin(), -t1.sin(), t1.cos()], 1e-13);
}

#[test]
fn rope_divides_each_pairs_angle_by_its_frequency_factor() {
    // Llama 3's rope_freqs: pair 0 at factor 1 keeps its 1 rad at position 1,
    // pair 1 at factor 4 turns by 0.01 / 4; elements past n_dims pass through.
    let a = dense([6, 1, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let factors = dense([2, 1, 1, 1], &[1.0, 4.0]);
    let y = run_same(
        Op::Rope(RopeParams::plain(RopeMode::Normal, 4, 10000.0)),
        &[&a, &positions(&[1.0]), &factors],
    );
    let (c1, s1) = (1f64.cos(), 1f64.sin());
    let (c2, s2) = (0.0025f64.cos(), 0.0025f64.sin());
    let want = [
        c1 - 2. * s1,
        s1 + 2. * c1,
        3. * c2 - 4. * s2,
        3. * s2 + 4. * c2,
        5.,
        6.,
    ];
    assert_close(&y.data, &want, 1e-14);
}
