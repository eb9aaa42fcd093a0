//! quantize -> dequantize on seeded random rows, checked against each format's
//! documented error bound (see the format modules).

use super::{dequantize_row, quantize_row, read_f16};
use crate::quant::k_common::scale_min_k4;
use crate::testing::Rng;
use half::f16;
use ir::DType;

/// Rows that stress the encoders: uniform around zero, all positive, all negative,
/// zeros, a constant, a single outlier, tiny and large magnitudes.
fn test_rows(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for scale in [1e-3, 1.0, 300.0] {
        rows.push(rng.vec(n, -scale, scale));
        rows.push(rng.vec(n, 0.5 * scale, scale));
        rows.push(rng.vec(n, -scale, -0.25 * scale));
    }
    rows.push(vec![0.0; n]);
    rows.push(vec![-0.75; n]);
    let mut outlier = rng.vec(n, -1.0, 1.0);
    outlier[n / 3] = 50.0;
    outlier[2 * n / 3] = -70.0;
    rows.push(outlier);
    rows.into_iter()
        .map(|r| r.into_iter().map(|v| v as f32).collect())
        .collect()
}

/// Quantizes and dequantizes `row`, returning the bytes and the values.
fn round_trip(dtype: DType, row: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let n_bytes = dtype.row_bytes(row.len() as u64).expect("whole blocks") as usize;
    let mut bytes = vec![0xA5u8; n_bytes];
    quantize_row(dtype, row, &mut bytes);
    let mut back = vec![f32::NAN; row.len()];
    dequantize_row(dtype, &bytes, &mut back);
    (bytes, back)
}

fn f16_error(v: f32) -> f64 {
    (f64::from(v) - f16::from_f32(v).to_f64()).abs()
}

fn amax(x: &[f32]) -> f64 {
    x.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()))
}

/// Asserts `|x - y| <= bound(i)` for each value, with a relative slack for f32 rounding.
fn check(dtype: DType, x: &[f32], y: &[f32], bound: impl Fn(usize) -> f64) {
    let slack = 2e-6 * amax(x);
    for i in 0..x.len() {
        let err = (f64::from(x[i]) - f64::from(y[i])).abs();
        assert!(
            err <= bound(i) + slack,
            "{dtype}: value {i}: {} came back as {} (error {err}, bound {})",
            x[i],
            y[i],
            bound(i)
        );
    }
}

#[test]
fn q8_0_within_half_a_step() {
    for row in test_rows(32 * 7, 1) {
        let (_, y) = round_trip(DType::Q8_0, &row);
        let bounds: Vec<f64> = row
            .chunks(32)
            .map(|b| {
                let d = (amax(b) as f32 / 127.0) as f64;
                d / 2.0 + 127.0 * f16_error(d as f32)
            })
            .collect();
        check(DType::Q8_0, &row, &y, |i| bounds[i / 32]);
    }
}

/// The symmetric formats (Q4_0: `offset` 8, Q5_0: 16): `d = max / -offset`
/// from the value of largest magnitude with its sign; within half a step,
/// except values beyond `offset - 1/2` steps on the other side, clamped to
/// the top quant (within one step). Each bound adds the f16 rounding of `d`
/// times the largest quant.
fn check_symmetric(dtype: DType, offset: f64, seed: u64) {
    for row in test_rows(32 * 7, seed) {
        let (_, y) = round_trip(dtype, &row);
        check(dtype, &row, &y, |i| {
            let block = &row[i / 32 * 32..][..32];
            let max = block
                .iter()
                .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let d = f64::from(max / -(offset as f32));
            let extra = offset * f16_error(d as f32);
            let t = if d != 0.0 { f64::from(row[i]) / d } else { 0.0 };
            if t < offset - 0.5 {
                d.abs() / 2.0 + extra
            } else {
                d.abs() + extra
            }
        });
    }
}

/// The affine formats (Q4_1: `levels` 15, Q5_1: 31): `d = (max - min) /
/// levels`, within half a step plus the f16 roundings of `d` and `min`.
fn check_affine(dtype: DType, levels: f32, seed: u64) {
    for row in test_rows(32 * 7, seed) {
        let (_, y) = round_trip(dtype, &row);
        let bounds: Vec<f64> = row
            .chunks(32)
            .map(|b| {
                let min = b.iter().fold(f32::MAX, |m, &v| m.min(v));
                let max = b.iter().fold(-f32::MAX, |m, &v| m.max(v));
                let d = (max - min) / levels;
                f64::from(d) / 2.0 + f64::from(levels) * f16_error(d) + f16_error(min)
            })
            .collect();
        check(dtype, &row, &y, |i| bounds[i / 32]);
    }
}

#[test]
fn q4_0_within_half_a_step_except_the_clamped_top() {
    check_symmetric(DType::Q4_0, 8.0, 2);
}

#[test]
fn q4_0_keeps_the_largest_magnitude_value() {
    let mut row = vec![0.1f32; 32];
    row[5] = -3.0;
    let (bytes, y) = round_trip(DType::Q4_0, &row);
    assert_eq!(read_f16(&bytes, 0), 0.375, "d = max / -8");
    assert_eq!(bytes[2 + 5] & 0x0F, 0, "max encodes as q = 0");
    assert_eq!(y[5], -3.0);
}

#[test]
fn q4_1_within_half_a_step() {
    check_affine(DType::Q4_1, 15.0, 3);
}

#[test]
fn q5_0_within_half_a_step_except_the_clamped_top() {
    check_symmetric(DType::Q5_0, 16.0, 21);
}

#[test]
fn q5_0_keeps_the_largest_magnitude_value() {
    let mut row = vec![0.1f32; 32];
    row[20] = -4.0;
    let (bytes, y) = round_trip(DType::Q5_0, &row);
    assert_eq!(read_f16(&bytes, 0), 0.25, "d = max / -16");
    assert_eq!(bytes[6 + 4] >> 4, 0, "max encodes as q = 0 (low 4 bits)");
    assert_eq!(bytes[4] & 0x10, 0, "and no fifth bit (qh bit 20)");
    assert_eq!(y[20], -4.0);
}

#[test]
fn q5_1_within_half_a_step() {
    check_affine(DType::Q5_1, 31.0, 22);
}

/// Checks the K-quant affine bound: within d*sc/2 of the reconstruction, or dmin/2
/// below the sub-block's offset (decoded from the bytes), and a bound in terms of
/// the input alone: range/(2 max_q) + amax/50 per 32-value sub-block.
fn check_affine_k(dtype: DType, max_q: f64, scales_at: usize, seed: u64) {
    let block_bytes = dtype.block_bytes() as usize;
    for row in test_rows(256 * 3, seed) {
        let (bytes, y) = round_trip(dtype, &row);
        let decoded_bound = |i: usize| {
            let block = &bytes[i / 256 * block_bytes..][..block_bytes];
            let (d, dmin) = (f64::from(read_f16(block, 0)), f64::from(read_f16(block, 2)));
            let (sc, m) = scale_min_k4(i % 256 / 32, &block[scales_at..scales_at + 12]);
            let step = d * f64::from(sc);
            let offset = dmin * f64::from(m);
            if f64::from(row[i]) < -offset {
                dmin / 2.0
            } else {
                step / 2.0
            }
        };
        check(dtype, &row, &y, decoded_bound);
        check(dtype, &row, &y, |i| {
            let sub = &row[i / 32 * 32..][..32];
            let lo = sub.iter().fold(0f32, |a, &v| a.min(v));
            let hi = sub.iter().fold(f32::MIN, |a, &v| a.max(v));
            let block_amax = amax(&row[i / 256 * 256..][..256]);
            f64::from(hi - lo) / (2.0 * max_q) + block_amax / 50.0
        });
    }
}

#[test]
fn q4_k_within_bounds() {
    check_affine_k(DType::Q4_K, 15.0, 4, 4);
}

#[test]
fn q5_k_within_bounds() {
    check_affine_k(DType::Q5_K, 31.0, 4, 5);
}

#[test]
fn q6_k_within_half_a_step() {
    for row in test_rows(256 * 3, 6) {
        let (bytes, y) = round_trip(DType::Q6_K, &row);
        check(DType::Q6_K, &row, &y, |i| {
            let block = &bytes[i / 256 * 210..][..210];
            let d = f64::from(read_f16(block, 208));
            d * f64::from(block[192 + i % 256 / 16] as i8) / 2.0
        });
        check(DType::Q6_K, &row, &y, |i| {
            let sub_amax = amax(&row[i / 16 * 16..][..16]);
            sub_amax / 62.0 + amax(&row[i / 256 * 256..][..256]) / 7000.0
        });
    }
}

#[test]
fn plain_round_trips() {
    for row in test_rows(40, 7) {
        let (_, y) = round_trip(DType::F32, &row);
        assert_eq!(y, row);
        let (_, y) = round_trip(DType::F16, &row);
        check(DType::F16, &row, &y, |i| {
            f64::from(row[i]).abs() * 2f64.powi(-11) + 2f64.powi(-25)
        });
        let (_, y) = round_trip(DType::BF16, &row);
        check(DType::BF16, &row, &y, |i| {
            f64::from(row[i]).abs() * 2f64.powi(-8)
        });
        let (_, y) = round_trip(DType::I32, &row);
        for (a, b) in row.iter().zip(&y) {
            assert_eq!(a.round(), *b);
        }
    }
}

#[test]
fn quantization_is_deterministic_and_idempotent_on_its_output() {
    // Re-quantizing dequantized values of the ggml reference formats reproduces them.
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
        let row = &test_rows(256, 8)[3];
        let (b1, y1) = round_trip(dtype, row);
        let (b2, _) = round_trip(dtype, row);
        assert_eq!(b1, b2, "{dtype}: same input, same bytes");
        let (_, y2) = round_trip(dtype, &y1);
        check(dtype, &y1, &y2, |_| 1e-6 * amax(&y1));
    }
}
