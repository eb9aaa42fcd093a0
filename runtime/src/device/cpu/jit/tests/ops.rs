//! Unfused ops through `prepare_elementwise` vs `reference::compute`.

use super::*;
use crate::device::cpu::jit::Jit;
use ir::{GluKind, Op};
use kernels::reference::compute;
use kernels::testing::nmse_threshold;

/// Runs `op` over `srcs` (random values in `range`) on every pool.
fn check_op(
    jit: &Jit,
    pools: &[usize],
    op: Op,
    srcs: &[([i64; 4], Kind)],
    out_ne: [i64; 4],
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let range = match op {
        Op::Sqrt => (0.0, 4.0),
        Op::Div => (0.5, 3.0),
        _ => (-5.0, 5.0),
    };
    let (mut bufs, values): (Vec<Buf>, Vec<Dense>) = srcs
        .iter()
        .map(|&(ne, kind)| random(&mut rng, DType::F32, ne, kind, range))
        .unzip();
    let refs: Vec<&Dense> = values.iter().collect();
    let out_layout = Layout::contiguous(DType::F32, out_ne).unwrap();
    let reference = compute(&op, &refs, &out_layout);
    let mut out = Buf::new(DType::F32, out_ne, Kind::Packed);
    let raws: Vec<RawTensor> = bufs.iter_mut().map(Buf::raw).collect();
    let kernel = jit.prepare_elementwise(&op, out.raw(), &raws).unwrap();
    for &threads in pools {
        out.poison();
        run(&*kernel, threads);
        let what = format!("{op:?} {srcs:?} threads {}", threads);
        assert_close(&what, &reference, &out.get(), nmse_threshold(op.name()));
    }
}

#[test]
fn every_elementwise_op_matches_the_reference() {
    let jit = shared_jit();
    let pools = pools();
    let unary = [
        Op::Scale {
            scale: -2.5,
            bias: 0.25,
        },
        Op::Sqr,
        Op::Sqrt,
        Op::Silu,
        Op::Gelu,
        Op::GeluErf,
        Op::Relu,
        Op::Tanh,
        Op::RmsNorm { eps: 1e-6 },
        Op::Norm { eps: 1e-5 },
    ];
    let binary = [Op::Add, Op::Sub, Op::Mul, Op::Div];
    // The 4096-row shape is covered by the fused tests.
    for (s, &ne) in SHAPES
        .iter()
        .enumerate()
        .filter(|(_, ne)| ne[1] * ne[2] * ne[3] < 4096)
    {
        let seed = s as u64;
        // Layouts alternate by shape (the fused tests cover them all).
        let layout = [Kind::Transposed, Kind::Packed][s % 2];
        for op in unary {
            check_op(jit, &pools, op, &[(ne, layout)], ne, seed);
        }
        for op in binary {
            let srcs = if s % 2 == 0 {
                [(ne, Kind::Packed), ([ne[0], 1, 1, 1], Kind::Packed)]
            } else {
                [(ne, Kind::Padded), (ne, Kind::Transposed)]
            };
            check_op(jit, &pools, op, &srcs, ne, seed);
        }
        for kind in [GluKind::SwiGlu, GluKind::GeGlu, GluKind::GeGluErf] {
            let two = Op::Glu {
                kind,
                swapped: false,
            };
            check_op(
                jit,
                &pools,
                two,
                &[(ne, Kind::Packed), (ne, Kind::Transposed)],
                ne,
                seed,
            );
            for swapped in [false, true] {
                let one = Op::Glu { kind, swapped };
                let wide = [2 * ne[0], ne[1], ne[2], ne[3]];
                check_op(jit, &pools, one, &[(wide, layout)], ne, seed);
            }
        }
    }
}

#[test]
fn ops_outside_the_jit_are_refused() {
    let jit = Jit::new().unwrap();
    let mut a = Buf::new(DType::F32, [4, 4, 1, 1], Kind::Packed);
    let mut b = Buf::new(DType::F32, [4, 4, 1, 1], Kind::Packed);
    let err = jit.prepare_elementwise(&Op::MulMat, b.raw(), &[a.raw(), a.raw()]);
    assert!(err.is_err());
    let mut q = Buf::new(DType::F32, [4, 4, 1, 1], Kind::Packed);
    let mut raw = q.raw();
    raw.dtype = DType::Q8_0;
    let err = jit
        .prepare_elementwise(&Op::Silu, b.raw(), &[raw])
        .err()
        .unwrap();
    assert!(err.to_string().contains("q8_0"), "{err}");
    let err = jit
        .prepare_elementwise(&Op::Add, b.raw(), &[a.raw()])
        .err()
        .unwrap();
    assert!(err.to_string().contains("2 sources"), "{err}");
}
