//! Pieces shared by the K-quant formats: the 12-byte packing of eight 6-bit
//! scales and mins (Q4_K, Q5_K), f16 scales rounded up, and the affine sub-block
//! encoder of Q4_K and Q5_K.

use half::f16;

/// Values per K-quant super-block.
pub(super) const QK_K: usize = 256;

/// Scale and min of sub-block `j` (0..8) from the 12 packed bytes, as ggml's
/// `get_scale_min_k4`: sub-blocks 0..4 keep the low 6 bits of bytes j and j + 4;
/// sub-blocks 4..8 take their low 4 bits from byte j + 4 (scale: low nibble, min:
/// high nibble) and their top 2 bits from the top bits of bytes j - 4 (scale) and
/// j (min).
pub(super) fn scale_min_k4(j: usize, scales: &[u8]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        let sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
        let m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
        (sc, m)
    }
}

/// Packs eight 6-bit scales and mins (each < 64) so that [`scale_min_k4`] reads
/// them back.
pub(super) fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..8 {
        debug_assert!(sc[j] < 64 && m[j] < 64);
        if j < 4 {
            out[j] |= sc[j];
            out[j + 4] |= m[j];
        } else {
            out[j + 4] = (sc[j] & 0x0F) | ((m[j] & 0x0F) << 4);
            out[j - 4] |= (sc[j] >> 4) << 6;
            out[j] |= (m[j] >> 4) << 6;
        }
    }
    out
}

/// The smallest f16 not below `v` (`v >= 0`; values past the f16 range give inf).
pub(super) fn f16_at_least(v: f64) -> f16 {
    let h = super::plain::f64_to_f16(v);
    if h.to_f64() < v {
        f16::from_bits(h.to_bits() + 1)
    } else {
        h
    }
}

/// An encoded Q4_K / Q5_K super-block before bit packing.
pub(super) struct AffineBlock {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block mins.
    pub dmin: f16,
    /// 6-bit sub-block scales.
    pub sc: [u8; 8],
    /// 6-bit sub-block mins.
    pub m: [u8; 8],
    /// One quant per value, each in 0..=max_q.
    pub q: [u8; QK_K],
}

/// Encodes 256 values as 8 sub-blocks of 32 with `value = d*sc*q - dmin*m`,
/// `q` in `0..=max_q`.
///
/// Per sub-block: `lo = min(0, min x)`, `hi = max x`. The mins `-lo` are quantized
/// first (`dmin` = the f16 at least max(-lo)/63, `m = round(-lo / dmin)`), then the
/// scales: each sub-block needs a step of at least `(hi + dmin*m) / max_q`; `d` is
/// the f16 at least the largest need / 63 and `sc = ceil(need / d)`, so the top of
/// every sub-block is covered. Hence every value is within `d*sc/2` of its
/// reconstruction, or, when it lies below the sub-block's offset `-dmin*m`, within
/// `dmin/2`.
pub(super) fn encode_affine(values: &[f32], max_q: u8) -> AffineBlock {
    let sub = |j: usize| &values[32 * j..32 * (j + 1)];
    let lo: [f64; 8] =
        std::array::from_fn(|j| sub(j).iter().fold(0f64, |a, &v| a.min(f64::from(v))));
    let hi: [f64; 8] =
        std::array::from_fn(|j| sub(j).iter().fold(f64::MIN, |a, &v| a.max(f64::from(v))));

    let dmin = f16_at_least(lo.iter().fold(0f64, |a, &l| a.max(-l)) / 63.0);
    let dmin_f = dmin.to_f64();
    let m: [u8; 8] = std::array::from_fn(|j| quantize_6bit(-lo[j], dmin_f, f64::round));
    let offset: [f64; 8] = std::array::from_fn(|j| dmin_f * f64::from(m[j]));

    let need: [f64; 8] = std::array::from_fn(|j| ((hi[j] + offset[j]) / f64::from(max_q)).max(0.0));
    let d = f16_at_least(need.iter().fold(0f64, |a, &n| a.max(n)) / 63.0);
    let d_f = d.to_f64();
    let sc: [u8; 8] = std::array::from_fn(|j| quantize_6bit(need[j], d_f, f64::ceil));

    let mut q = [0u8; QK_K];
    for (i, (qi, &x)) in q.iter_mut().zip(values).enumerate() {
        let j = i / 32;
        let step = d_f * f64::from(sc[j]);
        if step > 0.0 {
            let t = ((f64::from(x) + offset[j]) / step).round();
            *qi = t.clamp(0.0, f64::from(max_q)) as u8;
        }
    }
    AffineBlock { d, dmin, sc, m, q }
}

/// `round_fn(v / unit)` clamped to 0..=63; 0 when `unit` is 0.
fn quantize_6bit(v: f64, unit: f64, round_fn: fn(f64) -> f64) -> u8 {
    if unit > 0.0 {
        round_fn(v / unit).clamp(0.0, 63.0) as u8
    } else {
        0
    }
}
