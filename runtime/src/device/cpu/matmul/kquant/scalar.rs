//! Portable dot products of K-quant weight rows with Q8_K rows: the fallback
//! on hosts without AVX2, and the oracle the SIMD kernels are tested against.
//!
//! Per super-block (activations: quants `q`, scale `dy`, sums of 16 `bsums`):
//! - Q4_K / Q5_K (value = `d sc_j u - dmin m_j`, sub-blocks j of 32):
//!   `dy (d sum_j sc_j S_j - dmin sum_j m_j B_j)` with `S_j = sum(u q)` over
//!   sub-block j and `B_j = bsums[2 j] + bsums[2 j + 1]`;
//! - Q6_K (value = `d sc_s (u - 32)`, sub-blocks s of 16, `sc_s` signed):
//!   `dy d sum_s sc_s (S_s - 32 bsums[s])`.
//!
//! Every integer sum is exact in i32 (module doc of [`super`] bounds them);
//! only the conversions to f32 and the f32 accumulation round.

use super::kind;
use super::q8k::{Q8KRow, QK_K, SUM_ELEMS};
use super::scales::{q4k_scales_mins, q5k_fifth_bit, q6k_quant};
use half::f16;

/// The f16 at byte `at` of `blk`, as f32.
fn f16_at(blk: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([blk[at], blk[at + 1]])).to_f32()
}

/// dot(weight row `w`, activation row `a`) over `nb` super-blocks.
///
/// # Safety
/// `w` points to `nb` blocks of format `kind`; `a` to a row of at least `nb`
/// blocks.
pub unsafe fn dot(kind: u8, w: *const u8, a: Q8KRow, nb: usize) -> f32 {
    let bytes = kind::block_bytes(kind);
    let mut sum = 0f32;
    for b in 0..nb {
        // SAFETY: block b of both rows is inside them.
        let (blk, q, bsums, dy) = unsafe {
            (
                std::slice::from_raw_parts(w.add(b * bytes), bytes),
                std::slice::from_raw_parts(a.qs.add(b * QK_K), QK_K),
                std::slice::from_raw_parts(a.bsums.add(b * (QK_K / SUM_ELEMS)), QK_K / SUM_ELEMS),
                *a.d.add(b),
            )
        };
        sum += match kind {
            kind::Q6_K => q6k_block(blk, q, bsums, dy),
            _ => affine_block(kind, blk, q, bsums, dy),
        };
    }
    sum
}

/// One Q4_K or Q5_K super-block times one Q8_K block.
fn affine_block(kind: u8, blk: &[u8], q: &[i8], bsums: &[i16], dy: f32) -> f32 {
    let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
    let (sc, m) = q4k_scales_mins(blk[4..16].try_into().expect("12 scale bytes"));
    let (qh, qs) = match kind {
        kind::Q4_K => (None, &blk[16..144]),
        _ => (Some(&blk[16..48]), &blk[48..176]),
    };
    let (mut sumi, mut summ) = (0i32, 0i32);
    for j in 0..8 {
        // Sub-block j: values 32 j.., nibbles of bytes 32 (j / 2).. (low
        // nibbles for even j, high for odd).
        let (chunk, shift) = (&qs[32 * (j / 2)..32 * (j / 2) + 32], 4 * (j % 2));
        let s: i32 = (0..32)
            .map(|l| {
                let mut u = (chunk[l] >> shift) & 0x0F;
                if let Some(qh) = qh {
                    u |= q5k_fifth_bit(qh, j, l) << 4;
                }
                i32::from(u) * i32::from(q[32 * j + l])
            })
            .sum();
        sumi += i32::from(sc[j]) * s;
        summ += i32::from(m[j]) * (i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]));
    }
    dy * (d * sumi as f32 - dmin * summ as f32)
}

/// One Q6_K super-block times one Q8_K block.
fn q6k_block(blk: &[u8], q: &[i8], bsums: &[i16], dy: f32) -> f32 {
    let d = f16_at(blk, 208);
    let mut sumi = 0i32;
    for s in 0..QK_K / SUM_ELEMS {
        let sc = i32::from(blk[192 + s] as i8);
        let dot: i32 = (16 * s..16 * s + 16)
            .map(|v| i32::from(q6k_quant(blk, v)) * i32::from(q[v]))
            .sum();
        sumi += sc * (dot - 32 * i32::from(bsums[s]));
    }
    dy * d * sumi as f32
}
