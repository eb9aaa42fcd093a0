//! Dequantization of hand-built blocks, byte by byte, against hand-computed
//! values; plain conversions; the 6-bit scale packing.

use super::k_common::{pack_scale_min_k4, scale_min_k4};
use super::{dequantize_row, quantize_row};
use ir::DType;

const F16_ONE: [u8; 2] = [0x00, 0x3C];
const F16_HALF: [u8; 2] = [0x00, 0x38];
const F16_TWO: [u8; 2] = [0x00, 0x40];
const F16_QUARTER: [u8; 2] = [0x00, 0x34];
const F16_MINUS_ONE: [u8; 2] = [0x00, 0xBC];

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / dtype.block_bytes() as usize * dtype.block_elems() as usize;
    let mut out = vec![f32::NAN; n];
    dequantize_row(dtype, bytes, &mut out);
    out
}

#[test]
fn q8_0_block_is_d_times_i8() {
    let mut block = F16_HALF.to_vec();
    let qs: Vec<i8> = (0..32).map(|j| [-128, -1, 0, 1, 127][j % 5]).collect();
    block.extend(qs.iter().map(|&q| q as u8));
    let y = decode(DType::Q8_0, &block);
    for j in 0..32 {
        assert_eq!(y[j], f32::from(qs[j]) * 0.5, "value {j}");
    }
    assert_eq!(&y[..5], &[-64.0, -0.5, 0.0, 0.5, 63.5]);
}

#[test]
fn q4_0_block_low_then_high_nibbles() {
    let mut block = F16_TWO.to_vec();
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = decode(DType::Q4_0, &block);
    for j in 0..16 {
        assert_eq!(y[j], (j as f32 - 8.0) * 2.0, "low nibble {j}");
        assert_eq!(y[j + 16], (7.0 - j as f32) * 2.0, "high nibble {j}");
    }
    assert_eq!((y[0], y[15], y[16], y[31]), (-16.0, 14.0, 14.0, -16.0));
}

#[test]
fn q4_1_block_is_q_times_d_plus_m() {
    // d = 0.5, m = -1, nibbles 0..15 low and 15..0 high.
    let mut block = [F16_HALF, F16_MINUS_ONE].concat();
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = decode(DType::Q4_1, &block);
    let expect_low: Vec<f32> = (0..16).map(|q| q as f32 * 0.5 - 1.0).collect();
    let expect_high: Vec<f32> = (0..16).map(|q| (15 - q) as f32 * 0.5 - 1.0).collect();
    assert_eq!(&y[..16], &expect_low[..]);
    assert_eq!(&y[16..], &expect_high[..]);
    assert_eq!((y[0], y[1], y[15]), (-1.0, -0.5, 6.5));
}

#[test]
fn q5_0_block_takes_the_fifth_bit_from_qh() {
    // d = 2; qh sets the fifth bit of values 1, 3 (low half) and 16, 31 (high
    // half); nibbles j low and 15 - j high.
    let qh: u32 = (1 << 1) | (1 << 3) | (1 << 16) | (1 << 31);
    let mut block = F16_TWO.to_vec();
    block.extend(qh.to_le_bytes());
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = decode(DType::Q5_0, &block);
    for j in 0..16 {
        let fifth = |i: usize| if qh >> i & 1 == 1 { 16.0 } else { 0.0 };
        assert_eq!(y[j], (j as f32 + fifth(j) - 16.0) * 2.0, "value {j}");
        let high = (15 - j) as f32 + fifth(j + 16);
        assert_eq!(y[j + 16], (high - 16.0) * 2.0, "value {}", j + 16);
    }
    assert_eq!((y[0], y[1], y[16], y[31]), (-32.0, 2.0, 30.0, 0.0));
}

#[test]
fn q5_1_block_is_q_times_d_plus_m() {
    // d = 0.5, m = -1; the fifth bit of every value 16..32 and of value 0.
    let qh: u32 = 0xFFFF_0001;
    let mut block = [F16_HALF, F16_MINUS_ONE].concat();
    block.extend(qh.to_le_bytes());
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = decode(DType::Q5_1, &block);
    assert_eq!((y[0], y[1], y[15]), (7.0, -0.5, 6.5));
    assert_eq!((y[16], y[31]), (14.5, 7.0), "q = 16 + 15 and 16 + 0");
}

/// Scales [1, 2, 3, 4, 17, 33, 50, 63] and mins [0, 1, 5, 10, 20, 40, 61, 63],
/// packed by hand as ggml's get_scale_min_k4 reads them.
const K4_SC: [f32; 8] = [1.0, 2.0, 3.0, 4.0, 17.0, 33.0, 50.0, 63.0];
const K4_M: [f32; 8] = [0.0, 1.0, 5.0, 10.0, 20.0, 40.0, 61.0, 63.0];
const K4_SCALES: [u8; 12] = [65, 130, 195, 196, 64, 129, 197, 202, 65, 129, 210, 255];

#[test]
fn k4_scale_packing_matches_hand_packed_bytes() {
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &K4_SCALES);
        assert_eq!(
            (f32::from(sc), f32::from(m)),
            (K4_SC[j], K4_M[j]),
            "sub-block {j}"
        );
    }
    let sc: [u8; 8] = K4_SC.map(|v| v as u8);
    let m: [u8; 8] = K4_M.map(|v| v as u8);
    assert_eq!(pack_scale_min_k4(&sc, &m), K4_SCALES);
}

#[test]
fn k4_scale_packing_round_trips_every_value() {
    for s in 0..64u8 {
        let sc: [u8; 8] = std::array::from_fn(|j| (s + 7 * j as u8) % 64);
        let m: [u8; 8] = std::array::from_fn(|j| (63 - s + 13 * j as u8) % 64);
        let packed = pack_scale_min_k4(&sc, &m);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &packed), (sc[j], m[j]));
        }
    }
}

#[test]
fn q4_k_block_by_hand() {
    // d = 1, dmin = 0.5; byte l of chunk c: low nibble l % 16, high nibble 15 - l % 16.
    let mut block = [F16_ONE, F16_HALF].concat();
    block.extend(K4_SCALES);
    block.extend((0..128u8).map(|b| (b % 16) | ((15 - b % 16) << 4)));
    assert_eq!(block.len(), 144);
    let y = decode(DType::Q4_K, &block);
    for c in 0..4 {
        for l in 0..32 {
            let q = (l % 16) as f32;
            let (s0, s1) = (2 * c, 2 * c + 1);
            assert_eq!(
                y[64 * c + l],
                K4_SC[s0] * q - 0.5 * K4_M[s0],
                "chunk {c} low {l}"
            );
            assert_eq!(
                y[64 * c + 32 + l],
                K4_SC[s1] * (15.0 - q) - 0.5 * K4_M[s1],
                "chunk {c} high {l}"
            );
        }
    }
    assert_eq!(y[255], 63.0 * 0.0 - 31.5);
    assert_eq!(y[64 + 15], 3.0 * 15.0 - 2.5);
}

#[test]
fn q5_k_block_by_hand() {
    // As the Q4_K block, plus qh[l] = 0b0101_0101 for even l (fifth bit of every
    // low-nibble sub-block) and 0b1010_1010 for odd l (every high-nibble one).
    let mut block = [F16_ONE, F16_HALF].concat();
    block.extend(K4_SCALES);
    block.extend((0..32).map(|l| if l % 2 == 0 { 0x55u8 } else { 0xAA }));
    block.extend((0..128u8).map(|b| (b % 16) | ((15 - b % 16) << 4)));
    assert_eq!(block.len(), 176);
    let y = decode(DType::Q5_K, &block);
    for c in 0..4 {
        for l in 0..32 {
            let even = if l % 2 == 0 { 16.0 } else { 0.0 };
            let q_low = (l % 16) as f32 + even;
            let q_high = (15 - l % 16) as f32 + (16.0 - even);
            let (s0, s1) = (2 * c, 2 * c + 1);
            assert_eq!(
                y[64 * c + l],
                K4_SC[s0] * q_low - 0.5 * K4_M[s0],
                "chunk {c} low {l}"
            );
            assert_eq!(
                y[64 * c + 32 + l],
                K4_SC[s1] * q_high - 0.5 * K4_M[s1],
                "chunk {c} high {l}"
            );
        }
    }
    assert_eq!(y[0], 1.0 * 16.0 - 0.0);
    assert_eq!(y[255], 63.0 * 16.0 - 31.5);
}

#[test]
fn q6_k_block_by_hand() {
    // ql bytes 0x21 (low nibble 1, high 2); qh bytes 0b11_10_01_00, so the four
    // quarters of each half have q = 1, 17, 34, 50, i.e. q - 32 = -31, -15, 2, 18.
    let scales: [i8; 16] = [1, -2, 3, -4, 5, 6, 7, 8, -1, 2, -3, 4, 10, 20, 30, -127];
    let mut block = vec![0x21u8; 128];
    block.extend([0xE4u8; 64]);
    block.extend(scales.map(|s| s as u8));
    block.extend(F16_QUARTER);
    assert_eq!(block.len(), 210);
    let y = decode(DType::Q6_K, &block);
    let quarter_q = [-31.0, -15.0, 2.0, 18.0];
    for v in 0..256 {
        let quarter = (v % 128) / 32;
        let expect = 0.25 * f32::from(scales[v / 16]) * quarter_q[quarter];
        assert_eq!(y[v], expect, "value {v}");
    }
    assert_eq!(y[255], 0.25 * -127.0 * 18.0);
}

#[test]
fn plain_conversions() {
    let v = [1.0f32, -2.5, 65504.0, 1.0 / 3.0, 1e-8, f32::INFINITY];
    let mut bytes = vec![0u8; 12];
    quantize_row(DType::F16, &v, &mut bytes);
    assert_eq!(&bytes[..6], &[0x00, 0x3C, 0x00, 0xC1, 0xFF, 0x7B]);
    assert_eq!(
        &bytes[6..8],
        &[0x55, 0x35],
        "1/3 rounds to nearest f16 0x3555"
    );
    let mut back = vec![0f32; 6];
    dequantize_row(DType::F16, &bytes, &mut back);
    assert_eq!(&back[..3], &v[..3]);
    assert_eq!(back[3], 0.333_251_95);
    assert_eq!(
        back[4], 0.0,
        "1e-8 is below half the smallest f16 subnormal"
    );
    assert_eq!(back[5], f32::INFINITY);

    // bf16: the top half of the f32, rounded to nearest even.
    let ties = [
        f32::from_bits(0x3F80_8000), // tie, even below: 0x3F80
        f32::from_bits(0x3F81_8000), // tie, odd below: up to 0x3F82
        f32::from_bits(0x3F80_8001), // above the tie: 0x3F81
        1.0,
    ];
    let mut bytes = vec![0u8; 8];
    quantize_row(DType::BF16, &ties, &mut bytes);
    assert_eq!(bytes, [0x80, 0x3F, 0x82, 0x3F, 0x81, 0x3F, 0x80, 0x3F]);
    let mut back = vec![0f32; 4];
    dequantize_row(DType::BF16, &bytes, &mut back);
    assert_eq!(back[3], 1.0);
    assert_eq!(back[1].to_bits(), 0x3F82_0000);

    let ints = [2.5f32, -2.5, 7.49, -0.4, f32::NAN, 3e9];
    let mut bytes = vec![0u8; 24];
    quantize_row(DType::I32, &ints, &mut bytes);
    let mut back = vec![0f32; 6];
    dequantize_row(DType::I32, &bytes, &mut back);
    assert_eq!(back, [3.0, -3.0, 7.0, -0.0, 0.0, i32::MAX as f32]);

    let mut bytes = vec![0u8; 8];
    quantize_row(DType::F32, &[1.5, -0.1], &mut bytes);
    assert_eq!(&bytes[..4], &1.5f32.to_le_bytes());
    let mut back = vec![0f32; 2];
    dequantize_row(DType::F32, &bytes, &mut back);
    assert_eq!(back, [1.5, -0.1]);
}

#[test]
#[should_panic(expected = "not a whole number of q4_1 blocks")]
fn partial_block_panics() {
    quantize_row(DType::Q4_1, &[0.0; 33], &mut [0u8; 40]);
}

#[test]
#[should_panic(expected = "take 68 bytes, the byte slice has 70")]
fn wrong_byte_length_panics() {
    dequantize_row(DType::Q8_0, &[0u8; 70], &mut [0f32; 64]);
}
