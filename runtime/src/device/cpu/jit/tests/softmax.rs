//! soft_max vs the reference: scale, F32 and F16 masks broadcast over rows
//! and heads, ALiBi, fully masked rows, F16 outputs, strided views.

use super::*;
use crate::device::cpu::jit::Jit;
use ir::Op;
use kernels::reference::compute;
use kernels::testing::nmse_threshold;

/// A mask of extents `ne` with some -inf entries (whole rows when `rows_masked`).
fn mask(rng: &mut Rng, dtype: DType, ne: [i64; 4], rows_masked: bool) -> (Buf, Dense) {
    let values = Dense::from_fn(ne, |[i0, i1, ..]| {
        if (rows_masked && i1 % 5 == 2) || (i0 + i1) % 7 == 3 {
            f64::NEG_INFINITY
        } else {
            rng.uniform(-2.0, 2.0)
        }
    });
    let mut buf = Buf::new(dtype, ne, Kind::Packed);
    buf.set(&values);
    let values = buf.get();
    (buf, values)
}

#[allow(clippy::too_many_arguments)]
fn check(
    jit: &Jit,
    pools: &[usize],
    ne: [i64; 4],
    kind: Kind,
    out_dtype: DType,
    mask_spec: Option<(DType, [i64; 4], bool)>,
    scale: f32,
    max_bias: f32,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let (mut src, src_values) = random(&mut rng, DType::F32, ne, kind, (-6.0, 6.0));
    let mut m = mask_spec.map(|(dtype, mne, rows)| mask(&mut rng, dtype, mne, rows));
    let op = Op::SoftMax { scale, max_bias };
    let mut refs = vec![&src_values];
    refs.extend(m.as_ref().map(|(_, v)| v));
    let layout = Layout::contiguous(out_dtype, ne).unwrap();
    let reference = rounded(&compute(&op, &refs, &layout), out_dtype);
    let mut out = Buf::new(out_dtype, ne, Kind::Packed);
    let mask_raw = m.as_mut().map(|(b, _)| b.raw());
    let kernel = jit
        .prepare_soft_max(scale, max_bias, out.raw(), src.raw(), mask_raw)
        .unwrap();
    let threshold = if out_dtype == DType::F16 {
        // F16 rounding of values near a rounding boundary may flip one ulp.
        1e-6
    } else {
        nmse_threshold("soft_max")
    };
    for &threads in pools {
        out.poison();
        run(&*kernel, threads);
        let what = format!(
            "soft_max {ne:?} {kind:?} -> {out_dtype} mask {mask_spec:?} scale {scale} \
             max_bias {max_bias} threads {}",
            threads
        );
        assert_close(&what, &reference, &out.get(), threshold);
    }
}

#[test]
fn soft_max_matches_the_reference() {
    let jit = shared_jit();
    let pools = pools();
    for (s, &ne) in SHAPES.iter().enumerate() {
        let seed = s as u64;
        check(
            jit,
            &pools,
            ne,
            Kind::Packed,
            DType::F32,
            None,
            1.0,
            0.0,
            seed,
        );
        check(
            jit,
            &pools,
            ne,
            Kind::Transposed,
            DType::F16,
            None,
            0.125,
            0.0,
            seed,
        );
        for dtype in [DType::F32, DType::F16] {
            // Mask rows cover more rows than the logits; heads and batches broadcast.
            let mne = [ne[0], ne[1] + 2, 1, 1];
            let m = Some((dtype, mne, true));
            check(jit, &pools, ne, Kind::Packed, DType::F32, m, 0.3, 0.0, seed);
            check(jit, &pools, ne, Kind::Padded, DType::F32, m, 0.3, 8.0, seed);
            let mne = [ne[0], ne[1], ne[2], 1];
            let m = Some((dtype, mne, false));
            check(jit, &pools, ne, Kind::Packed, DType::F16, m, 1.7, 0.0, seed);
        }
    }
}

#[test]
fn attention_sized_soft_max_with_alibi() {
    let jit = shared_jit();
    let pools = pools();
    let ne = [128, 128, 8, 1];
    let m = Some((DType::F16, [128, 128, 1, 1], false));
    check(jit, &pools, ne, Kind::Packed, DType::F32, m, 0.088, 8.0, 7);
}
