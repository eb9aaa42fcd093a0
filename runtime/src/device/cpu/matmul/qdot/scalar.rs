//! Portable dot products (the fallback, and the oracle for the SIMD kernels).

use super::kind;
use crate::device::cpu::matmul::q8::{QK, QRow};
use half::f16;

/// The f16 at `p`, as f32.
///
/// # Safety
/// `p` has two readable bytes.
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: forwarded.
    f16::from_bits(unsafe { (p as *const u16).read_unaligned() }).to_f32()
}

/// dot(weight row `w`, activation row `a`) over `nb` blocks.
///
/// # Safety
/// `w` points to `nb` blocks of format `kind`; `a` to a row of at least `nb` blocks.
pub(super) unsafe fn dot(kind: u8, w: *const u8, a: QRow, nb: usize) -> f32 {
    let bytes = kind::block_bytes(kind);
    let mut sum = 0f32;
    for b in 0..nb {
        // SAFETY: block b of both rows is inside them.
        unsafe {
            let blk = w.add(b * bytes);
            let q = std::slice::from_raw_parts(a.qs.add(b * QK), QK);
            let (d0, d1) = (f16_at(blk), *a.d.add(b));
            match kind {
                kind::Q8_0 => {
                    let ws = std::slice::from_raw_parts(blk.add(2) as *const i8, QK);
                    let isum: i32 = ws
                        .iter()
                        .zip(q)
                        .map(|(&x, &y)| i32::from(x) * i32::from(y))
                        .sum();
                    sum += d0 * d1 * isum as f32;
                }
                kind::Q4_0 => {
                    let isum = nibble_dot(std::slice::from_raw_parts(blk.add(2), QK / 2), q, 8);
                    sum += d0 * d1 * isum as f32;
                }
                kind::Q5_0 => {
                    let isum = five_bit_dot(std::slice::from_raw_parts(blk.add(2), 20), q, 16);
                    sum += d0 * d1 * isum as f32;
                }
                kind::Q5_1 => {
                    let isum = five_bit_dot(std::slice::from_raw_parts(blk.add(4), 20), q, 0);
                    sum += d0 * d1 * isum as f32 + f16_at(blk.add(2)) * 8.0 * *a.s8.add(b);
                }
                _ => {
                    let isum = nibble_dot(std::slice::from_raw_parts(blk.add(4), QK / 2), q, 0);
                    sum += d0 * d1 * isum as f32 + f16_at(blk.add(2)) * 8.0 * *a.s8.add(b);
                }
            }
        }
    }
    sum
}

/// `sum((u - offset) q)` over one block of nibbles (low nibble of byte j is
/// value j, high nibble value j + 16).
fn nibble_dot(nibbles: &[u8], q: &[i8], offset: i32) -> i32 {
    let (lo, hi) = q.split_at(QK / 2);
    nibbles
        .iter()
        .zip(lo.iter().zip(hi))
        .map(|(&x, (&l, &h))| {
            (i32::from(x & 15) - offset) * i32::from(l)
                + (i32::from(x >> 4) - offset) * i32::from(h)
        })
        .sum()
}

/// `sum((u - offset) q)` over one block of 5-bit quants: `qh_qs` is the
/// little-endian u32 of fifth bits (bit j: value j), then the nibbles as
/// [`nibble_dot`] reads them.
fn five_bit_dot(qh_qs: &[u8], q: &[i8], offset: i32) -> i32 {
    let qh = u32::from_le_bytes([qh_qs[0], qh_qs[1], qh_qs[2], qh_qs[3]]);
    let (lo, hi) = q.split_at(QK / 2);
    let value = |nibble: u8, j: usize| i32::from(nibble) + 16 * ((qh >> j) & 1) as i32 - offset;
    qh_qs[4..20]
        .iter()
        .zip(lo.iter().zip(hi))
        .enumerate()
        .map(|(j, (&x, (&l, &h)))| {
            value(x & 15, j) * i32::from(l) + value(x >> 4, j + 16) * i32::from(h)
        })
        .sum()
}
