//! Q6_K: 256 values in 210 bytes (16 sub-blocks of 16).
//!
//! ```text
//! offset  size  field
//! 0       128   ql      low 4 bits
//! 128     64    qh      high 2 bits
//! 192     16    scales  i8 scale per sub-block of 16 values
//! 208     2     d       f16 super-block scale
//! ```
//! Each half n (values 128n..128n+128) uses `ql[64n..]`, `qh[32n..]` and
//! `scales[8n..]`. For l in 0..32, with `QL = ql[64n..]`, `QH = qh[32n..]`:
//! value 128n + l      : `(QL[l] & 0xF)      | ((QH[l] >> 0) & 3) << 4`
//! value 128n + l + 32 : `(QL[l + 32] & 0xF) | ((QH[l] >> 2) & 3) << 4`
//! value 128n + l + 64 : `(QL[l] >> 4)       | ((QH[l] >> 4) & 3) << 4`
//! value 128n + l + 96 : `(QL[l + 32] >> 4)  | ((QH[l] >> 6) & 3) << 4`
//! each minus 32 (q in -32..=31); value v's scale is `scales[v / 16]`.
//! value = d * sc * q, computed in f32 in that order.
//!
//! The quantizer is a simple valid encoder (not ggml's search): per sub-block
//! `need = amax / 31`, `d` = the f16 at least max(need) / 127, `sc = ceil(need / d)`,
//! `q = round(x / (d*sc))`, which never clamps. Error bound (tested): every value is
//! within `d*sc/2` of its reconstruction (d, sc as decoded from the block).

use super::k_common::{QK_K, f16_at_least};
use super::{read_f16, write_f16};

/// Values per block.
pub const BLOCK_ELEMS: usize = QK_K;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 210;

/// Decodes one block (210 bytes) into 256 values.
pub fn dequantize_block(block: &[u8], out: &mut [f32]) {
    let d = read_f16(block, 208);
    for n in 0..2 {
        let ql = &block[64 * n..64 * (n + 1)];
        let qh = &block[128 + 32 * n..128 + 32 * (n + 1)];
        let sc = &block[192 + 8 * n..192 + 8 * (n + 1)];
        let y = &mut out[128 * n..128 * (n + 1)];
        for l in 0..32 {
            let is = l / 16;
            let q1 = i16::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i16::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i16::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i16::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let scale = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = scale(0) * f32::from(q1);
            y[l + 32] = scale(2) * f32::from(q2);
            y[l + 64] = scale(4) * f32::from(q3);
            y[l + 96] = scale(6) * f32::from(q4);
        }
    }
}

/// Encodes 256 values into one block.
pub fn quantize_block(values: &[f32], block: &mut [u8]) {
    let need: [f64; 16] = std::array::from_fn(|j| {
        let amax = values[16 * j..16 * (j + 1)]
            .iter()
            .fold(0f64, |a, &v| a.max(f64::from(v).abs()));
        amax / 31.0
    });
    let d = f16_at_least(need.iter().fold(0f64, |a, &n| a.max(n)) / 127.0);
    let d_f = d.to_f64();
    let sc: [u8; 16] = std::array::from_fn(|j| {
        if d_f > 0.0 {
            (need[j] / d_f).ceil().clamp(0.0, 127.0) as u8
        } else {
            0
        }
    });
    // Quants stored offset by 32, in 0..=63.
    let q: [u8; QK_K] = std::array::from_fn(|i| {
        let step = d_f * f64::from(sc[i / 16]);
        let t = if step > 0.0 {
            (f64::from(values[i]) / step).round()
        } else {
            0.0
        };
        (t.clamp(-32.0, 31.0) as i8 + 32) as u8
    });
    block[..192].fill(0);
    for n in 0..2 {
        for l in 0..32 {
            let base = 128 * n + l;
            let (q1, q2, q3, q4) = (q[base], q[base + 32], q[base + 64], q[base + 96]);
            block[64 * n + l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            block[64 * n + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            block[128 + 32 * n + l] =
                (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    block[192..208].copy_from_slice(&sc);
    write_f16(block, 208, d);
}
