//! K-quant weights repacked once at load for the SIMD tiles (`avx2`): each
//! super-block's 256 quants are reordered so that every 4 bytes the tiles
//! multiply together belong to one sub-block, and the activations' quants
//! ([`permute_activations`]) are reordered the same way.
//!
//! Why: the tiles unpack a block into 8 vectors of 32 unsigned quants and
//! multiply each with 32 activation quants. In the stored order a vector is
//! one sub-block (Q6_K: two), so each vector's products needed the
//! sub-block's scale spread over the vector (a `pshufb`) and a `maddubs` +
//! `madd` pair. Reordered, byte `4 g + r` of vector `v` belongs to sub-block
//! `g` (Q6_K: `g + 8 (v / 4)`), so 32-bit lane `g` of every vector sums one
//! sub-block: one `vpdpbusd` per vector adds the raw products, and the 8
//! scales apply once per block as one vector (plain AVX2: `maddubs` + `madd`
//! with one scale vector for the whole block).
//!
//! Layout: a repacked block has the stored block's size and fields, the
//! scales, minimums and `d` bytes unchanged; its quant fields hold, at the
//! place of stored value `p`, the quant of value [`source`]`(kind, p)`:
//! - Q4_K / Q5_K (sub-blocks of 32): `p = 32 v + 4 g + r` holds value
//!   `32 g + 4 v + r`;
//! - Q6_K (sub-blocks of 16): `p = 32 v + 4 g + r` holds value
//!   `16 (g + 8 (v / 4)) + 4 (v % 4) + r`.
//!
//! The tiles extract vector `v` (positions `32 v .. 32 v + 32`) with the
//! stored format's bit operations, so only where each quant sits changes.
//! Rows keep their offsets and sizes ([`super::super::packed`]'s cache holds
//! the copies). The activations' sums of 16 (`bsums`) and scales keep the
//! stored order: they are indexed by sub-block, not by position.
//!
//! Speed: one thread repacks 1.4-1.6 GB/s of Q4_K and Q6_K blocks and 0.56
//! GB/s of Q5_K (2026-11-27, the 2-core Xeon of `avx2`'s figures, a timing of
//! 20,000 blocks into fresh memory); at those rates SmolLM2 Q4_K_M's 30
//! K-quant matrices (19 MB) add about 13 ms to its load (worked out, not
//! timed: the load times of whole runs moved by more than that).
//!
//! Invariant: `source(kind, .)` is a permutation of `0..256` for each kind
//! (tested), so a repacked block holds exactly the stored block's quants.

use super::kind;
use super::q8k::QK_K;

/// Byte offset of the 4-bit low parts of the quants in a block of `kind`
/// (Q4_K, Q5_K: `qs`; Q6_K: `ql`).
fn low_nibbles_at(kind: u8) -> usize {
    match kind {
        kind::Q4_K => 16,
        kind::Q5_K => 48,
        _ => 0,
    }
}

/// The 256 unsigned quants of `blk` in value order (the layouts of
/// `kernels::quant::{q4_k, q5_k, q6_k}`): Q4_K and Q5_K keep values `64 c +
/// l` and `64 c + 32 + l` in the low and high nibble of byte `l` of chunk
/// `c`, Q5_K their fifth bits as bit `j` of `qh[l]` (value `32 j + l`);
/// Q6_K per half `h`: values `128 h + 32 t + l` take nibble `t / 2` of
/// `ql[64 h + 32 (t % 2) + l]` and bits `2 t, 2 t + 1` of `qh[32 h + l]`.
fn unpack(kind: u8, blk: &[u8]) -> [u8; QK_K] {
    // Fixed-size views: the loops below compile without bounds checks.
    let mut u = [0u8; QK_K];
    if kind == kind::Q6_K {
        let ql: &[u8; 128] = blk[..128].try_into().expect("Q6_K ql");
        let qh: &[u8; 64] = blk[128..192].try_into().expect("Q6_K qh");
        for h in 0..2 {
            for t in 0..4 {
                for l in 0..32 {
                    let low = (ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0x0F;
                    let high = (qh[32 * h + l] >> (2 * t)) & 3;
                    u[128 * h + 32 * t + l] = low | (high << 4);
                }
            }
        }
        return u;
    }
    let at = low_nibbles_at(kind);
    let qs: &[u8; 128] = blk[at..at + 128].try_into().expect("quant nibbles");
    for c in 0..4 {
        for l in 0..32 {
            u[64 * c + l] = qs[32 * c + l] & 0x0F;
            u[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    }
    if kind == kind::Q5_K {
        let qh: &[u8; 32] = blk[16..48].try_into().expect("Q5_K qh");
        for j in 0..8 {
            for l in 0..32 {
                u[32 * j + l] |= ((qh[l] >> j) & 1) << 4;
            }
        }
    }
    u
}

/// Writes the 256 unsigned quants `u` (value order) into the quant fields
/// of `blk`, the inverse of [`unpack`]; other bytes are left as they are.
fn pack(kind: u8, u: &[u8; QK_K], blk: &mut [u8]) {
    if kind == kind::Q6_K {
        let (ql, rest) = blk.split_at_mut(128);
        let ql: &mut [u8; 128] = ql.try_into().expect("Q6_K ql");
        let qh: &mut [u8; 64] = (&mut rest[..64]).try_into().expect("Q6_K qh");
        for h in 0..2 {
            for l in 0..32 {
                let v = |t: usize| u[128 * h + 32 * t + l];
                ql[64 * h + l] = (v(0) & 0x0F) | ((v(2) & 0x0F) << 4);
                ql[64 * h + 32 + l] = (v(1) & 0x0F) | ((v(3) & 0x0F) << 4);
                qh[32 * h + l] =
                    (v(0) >> 4) | ((v(1) >> 4) << 2) | ((v(2) >> 4) << 4) | ((v(3) >> 4) << 6);
            }
        }
        return;
    }
    let at = low_nibbles_at(kind);
    let qs: &mut [u8; 128] = (&mut blk[at..at + 128]).try_into().expect("quant nibbles");
    for c in 0..4 {
        for l in 0..32 {
            qs[32 * c + l] = (u[64 * c + l] & 0x0F) | ((u[64 * c + 32 + l] & 0x0F) << 4);
        }
    }
    if kind == kind::Q5_K {
        let qh: &mut [u8; 32] = (&mut blk[16..48]).try_into().expect("Q5_K qh");
        qh.fill(0);
        for j in 0..8 {
            for l in 0..32 {
                qh[l] |= ((u[32 * j + l] >> 4) & 1) << j;
            }
        }
    }
}

/// The stored value whose quant a repacked block keeps at position `p`
/// (module doc).
pub fn source(kind: u8, p: usize) -> usize {
    let (v, g, r) = (p / 32, (p % 32) / 4, p % 4);
    match kind {
        kind::Q6_K => 16 * (g + 8 * (v / 4)) + 4 * (v % 4) + r,
        _ => 32 * g + 4 * v + r,
    }
}

/// `stored` (256 values in value order) in the repacked order of `kind`:
/// position `p` gets value [`source`]`(kind, p)`, copied in runs of 4
/// (runs of 4 positions hold runs of 4 values).
fn permuted<T: Copy + Default>(kind: u8, stored: &[T; QK_K]) -> [T; QK_K] {
    let mut out = [T::default(); QK_K];
    for (run, to) in out.chunks_exact_mut(4).enumerate() {
        let from = source(kind, 4 * run);
        to.copy_from_slice(&stored[from..from + 4]);
    }
    out
}

/// Repacks one block of `kind` from `src` into `dst` (module doc).
pub fn repack_block(kind: u8, src: &[u8], dst: &mut [u8]) {
    dst.copy_from_slice(src);
    pack(kind, &permuted(kind, &unpack(kind, src)), dst);
}

/// Repacks `rows` rows of `nb` blocks of `kind` from `src` into `dst`.
///
/// # Safety
/// `src` and `dst` hold `rows * nb * block_bytes(kind)` bytes each and do
/// not overlap.
pub unsafe fn repack_rows(kind: u8, src: *const u8, dst: *mut u8, rows: usize, nb: usize) {
    let bytes = kind::block_bytes(kind);
    for b in 0..rows * nb {
        // SAFETY: block b lies inside both buffers (caller's contract).
        let (from, to) = unsafe {
            (
                std::slice::from_raw_parts(src.add(b * bytes), bytes),
                std::slice::from_raw_parts_mut(dst.add(b * bytes), bytes),
            )
        };
        repack_block(kind, from, to);
    }
}

/// Reorders one block's 256 activation quants as [`repack_block`] reorders
/// a weight block's, so position `p` of both holds the same value.
pub fn permute_activations(kind: u8, qs: &mut [i8]) {
    let stored: &[i8; QK_K] = (&qs[..QK_K]).try_into().expect("a whole block");
    let reordered = permuted(kind, stored);
    qs[..QK_K].copy_from_slice(&reordered);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_is_a_permutation_with_whole_sub_blocks_per_lane() {
        for (kind, sub) in [(kind::Q4_K, 32), (kind::Q5_K, 32), (kind::Q6_K, 16)] {
            let mut seen = [false; QK_K];
            for p in 0..QK_K {
                let s = source(kind, p);
                assert!(!seen[s], "kind {kind}: value {s} twice");
                seen[s] = true;
                // Lane g of vector v: sub-block g (Q6_K: g + 8 (v / 4)).
                let (v, g) = (p / 32, (p % 32) / 4);
                let want = if kind == kind::Q6_K {
                    g + 8 * (v / 4)
                } else {
                    g
                };
                assert_eq!(s / sub, want, "kind {kind} position {p}");
            }
        }
    }

    #[test]
    fn repacked_blocks_hold_the_permuted_quants_and_the_same_scales() {
        let mut rng = kernels::testing::Rng::new(40);
        for kind in [kind::Q4_K, kind::Q5_K, kind::Q6_K] {
            let bytes = kind::block_bytes(kind);
            for _ in 0..20 {
                let src: Vec<u8> = (0..bytes).map(|_| rng.below(256) as u8).collect();
                // pack is unpack's inverse.
                let mut again = vec![0u8; bytes];
                pack(kind, &unpack(kind, &src), &mut again);
                let quants = if kind == kind::Q6_K {
                    0..192
                } else {
                    16..bytes
                };
                assert_eq!(src[quants.clone()], again[quants.clone()], "kind {kind}");
                let mut dst = vec![0u8; bytes];
                repack_block(kind, &src, &mut dst);
                let (stored, repacked) = (unpack(kind, &src), unpack(kind, &dst));
                for p in 0..QK_K {
                    assert_eq!(
                        repacked[p],
                        stored[source(kind, p)],
                        "kind {kind} position {p}"
                    );
                }
                // Scales, minimums and d are unchanged.
                for b in (0..bytes).filter(|b| !quants.contains(b)) {
                    assert_eq!(src[b], dst[b], "kind {kind} byte {b}");
                }
            }
        }
    }

    #[test]
    fn unpacking_matches_the_scalar_decoders() {
        use super::super::scales::{q5k_fifth_bit, q6k_quant};
        let mut rng = kernels::testing::Rng::new(41);
        for kind in [kind::Q4_K, kind::Q5_K, kind::Q6_K] {
            let blk: Vec<u8> = (0..kind::block_bytes(kind))
                .map(|_| rng.below(256) as u8)
                .collect();
            let u = unpack(kind, &blk);
            for (i, &got) in u.iter().enumerate() {
                let want = match kind {
                    kind::Q6_K => q6k_quant(&blk, i),
                    _ => {
                        let (j, l) = (i / 32, i % 32);
                        let at = low_nibbles_at(kind);
                        let low = (blk[at + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
                        if kind == kind::Q5_K {
                            low | (q5k_fifth_bit(&blk[16..48], j, l) << 4)
                        } else {
                            low
                        }
                    }
                };
                assert_eq!(got, want, "kind {kind} value {i}");
            }
        }
    }
}
