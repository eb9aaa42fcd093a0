use super::{dense, run_same};
use crate::reference::{Dense, gather, scatter};
use crate::testing::Rng;
use ir::{DType, Layout, Op};

fn packed(dtype: DType, ne: [i64; 4]) -> Layout {
    Layout::contiguous(dtype, ne).expect("valid layout")
}

/// Bytes of `values` stored packed as `dtype`.
fn to_bytes(values: &Dense, dtype: DType) -> Vec<u8> {
    let layout = packed(dtype, values.ne);
    let mut bytes = vec![0u8; layout.span_bytes() as usize];
    scatter(values, &mut bytes, &layout);
    bytes
}

#[test]
fn gather_scatter_round_trip_plain_dtypes() {
    let a = dense([3, 2, 1, 1], &[1.5, -2.0, 0.25, 96.0, -7.0, 3.0]);
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        let layout = packed(dtype, a.ne);
        let bytes = to_bytes(&a, dtype);
        let want: Vec<f64> = if dtype == DType::I32 {
            a.data.iter().map(|v| v.round()).collect()
        } else {
            a.data.clone()
        };
        assert_eq!(gather(&bytes, &layout).data, want, "{dtype}");
    }
    // I32 values beyond f32's 24-bit mantissa come back exactly.
    let big = dense([2, 1, 1, 1], &[16_777_217.0, -2_147_483_648.0]);
    assert_eq!(
        gather(&to_bytes(&big, DType::I32), &packed(DType::I32, big.ne)),
        big
    );
}

#[test]
fn scatter_rounds_once_to_the_destination() {
    let a = dense(
        [2, 1, 1, 1],
        &[1.0 / 3.0, 1.0 + 2f64.powi(-11) + 2f64.powi(-40)],
    );
    let bytes = to_bytes(&a, DType::F16);
    assert_eq!(
        bytes,
        [0x55, 0x35, 0x01, 0x3C],
        "f64 -> f16 directly, no double rounding"
    );
}

#[test]
fn gather_a_strided_view() {
    // Root f32 [4, 3]; the view takes columns 1..3 of every row: ne [2, 3],
    // nb [4, 16], starting 4 bytes in.
    let root = Dense::from_fn([4, 3, 1, 1], |[i0, i1, _, _]| (10 * i1 + i0) as f64);
    let bytes = to_bytes(&root, DType::F32);
    let view = Layout {
        dtype: DType::F32,
        ne: [2, 3, 1, 1],
        nb: [4, 16, 48, 48],
    };
    let got = gather(&bytes[4..], &view);
    assert_eq!(got.data, [1., 2., 11., 12., 21., 22.]);

    // Writing through the view changes only the view's elements.
    let mut bytes = bytes;
    scatter(&dense([2, 3, 1, 1], &[-1.; 6]), &mut bytes[4..], &view);
    let back = gather(&bytes, &packed(DType::F32, root.ne));
    assert_eq!(
        back.data,
        [0., -1., -1., 3., 10., -1., -1., 13., 20., -1., -1., 23.]
    );
}

#[test]
fn cont_of_a_transposed_view() {
    let a = dense([3, 2, 1, 1], &[1., 2., 3., 4., 5., 6.]);
    let bytes = to_bytes(&a, DType::F32);
    let t = packed(DType::F32, a.ne)
        .permuted([1, 0, 2, 3])
        .expect("permutation");
    assert_eq!((t.ne, t.nb), ([2, 3, 1, 1], [12, 4, 24, 24]));
    let view = gather(&bytes, &t);
    let y = run_same(Op::Cont, &[&view]);
    assert_eq!(y.data, [1., 4., 2., 5., 3., 6.]);
}

#[test]
fn permute_round_trips_through_gather_and_scatter() {
    let mut rng = Rng::new(61);
    let ne = [3, 5, 7, 2];
    let a = Dense::new(
        ne,
        rng.vec(210, -4.0, 4.0)
            .into_iter()
            .map(|v| (v * 64.0).round() / 64.0)
            .collect(),
    );
    let axes = [2u8, 0, 3, 1];
    for dtype in [DType::F32, DType::F16] {
        let base = packed(dtype, ne);
        let bytes = to_bytes(&a, dtype);
        let p = base.permuted(axes).expect("permutation");
        let view = gather(&bytes, &p);
        a.data.iter().enumerate().for_each(|(flat, &v)| {
            let idx = [
                flat as i64 % 3,
                flat as i64 / 3 % 5,
                flat as i64 / 15 % 7,
                flat as i64 / 105,
            ];
            let mut pidx = [0i64; 4];
            for i in 0..4 {
                pidx[axes[i] as usize] = idx[i];
            }
            assert_eq!(view.get(pidx), v, "{dtype} element {idx:?}");
        });
        // Scattering the permuted values through the permuted layout rebuilds the bytes.
        let mut fresh = vec![0u8; bytes.len()];
        scatter(&view, &mut fresh, &p);
        assert_eq!(fresh, bytes, "{dtype}");
    }
}

#[test]
fn quantized_rows_through_a_row_strided_view() {
    // Root Q4_1 [64, 6]; the view sees rows 0, 2, 4 (nb1 = two rows).
    let mut rng = Rng::new(62);
    let root = Dense::new([64, 6, 1, 1], rng.vec(384, -2.0, 2.0));
    let layout = packed(DType::Q4_1, root.ne);
    let mut bytes = to_bytes(&root, DType::Q4_1);
    let full = gather(&bytes, &layout);
    let row_bytes = layout.row_bytes();
    let view = Layout {
        dtype: DType::Q4_1,
        ne: [64, 3, 1, 1],
        nb: [20, 2 * row_bytes, 6 * row_bytes, 6 * row_bytes],
    };
    let got = gather(&bytes, &view);
    for r in 0..3 {
        assert_eq!(got.row(r, 0, 0), full.row(2 * r, 0, 0));
    }
    // Scatter into the view: rows 1, 3, 5 keep their bytes.
    let before = bytes.clone();
    scatter(&Dense::zeros([64, 3, 1, 1]), &mut bytes, &view);
    for r in 0..6 {
        let row = &bytes[r * row_bytes as usize..][..row_bytes as usize];
        let old = &before[r * row_bytes as usize..][..row_bytes as usize];
        if r % 2 == 1 {
            assert_eq!(row, old, "row {r} untouched");
        } else {
            assert!(
                gather(row, &packed(DType::Q4_1, [64, 1, 1, 1]))
                    .data
                    .iter()
                    .all(|&v| v == 0.0)
            );
        }
    }
}

#[test]
fn quantized_gather_scatter_round_trip() {
    let mut rng = Rng::new(63);
    for dtype in [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ] {
        let a = Dense::new([256, 2, 2, 1], rng.vec(1024, -1.0, 1.0));
        let got = gather(&to_bytes(&a, dtype), &packed(dtype, a.ne));
        let max_err = a
            .data
            .iter()
            .zip(&got.data)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        // Half a 4-bit step of a [-1, 1] block, plus scale rounding.
        assert!(max_err < 0.13, "{dtype}: max error {max_err}");
        assert!(max_err > 0.0 || dtype == DType::Q8_0, "{dtype} is lossy");
    }
}

#[test]
#[should_panic(expected = "rows must be packed")]
fn gather_refuses_strided_quantized_rows() {
    // Two rows of 32, each row's blocks 68 bytes apart (a permuted view's nb0).
    let bytes = vec![0u8; 34 * 4];
    let t = Layout {
        dtype: DType::Q8_0,
        ne: [32, 2, 1, 1],
        nb: [68, 34, 68, 68],
    };
    gather(&bytes, &t);
}

#[test]
#[should_panic(expected = "spans 24 bytes, only 20 given")]
fn gather_refuses_short_buffers() {
    gather(&[0u8; 20], &packed(DType::F32, [3, 2, 1, 1]));
}

#[test]
fn f64_to_half_formats_round_once() {
    use crate::quant::plain::{f64_to_bf16, f64_to_f16};
    // Just above a tie: rounds up (through f32 it would round to the tie, then to even).
    assert_eq!(
        f64_to_f16(1.0 + 2f64.powi(-11) + 2f64.powi(-40)).to_bits(),
        0x3C01
    );
    assert_eq!(
        f64_to_f16(1.0 + 2f64.powi(-11)).to_bits(),
        0x3C00,
        "tie to even"
    );
    assert_eq!(
        f64_to_f16(-(1.0 + 3.0 * 2f64.powi(-11))).to_bits(),
        0xBC02,
        "tie to even, negative"
    );
    assert_eq!(f64_to_f16(65519.99).to_bits(), 0x7BFF);
    assert_eq!(f64_to_f16(65520.0).to_bits(), 0x7C00, "overflow to inf");
    assert_eq!(f64_to_f16(1e300).to_bits(), 0x7C00);
    assert_eq!(
        f64_to_f16(2f64.powi(-25) + 2f64.powi(-60)).to_bits(),
        0x0001,
        "above half the smallest subnormal"
    );
    assert_eq!(
        f64_to_f16(2f64.powi(-25)).to_bits(),
        0x0000,
        "tie to even (zero)"
    );
    assert!(f64_to_f16(f64::NAN).is_nan());
    assert_eq!(
        f64_to_bf16(1.0 + 2f64.powi(-8) + 2f64.powi(-50)).to_bits(),
        0x3F81
    );
    assert_eq!(f64_to_bf16(1.0 + 2f64.powi(-8)).to_bits(), 0x3F80);
    assert_eq!(f64_to_bf16(-3.0).to_bits(), 0xC040);
}
