//! Dot products of quantized weight rows (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) with activation
//! rows quantized by [`super::q8`], in tiles of up to [`TILE_R`] weight rows x
//! [`TILE_C`] activation rows: each weight block loaded (and its nibbles
//! unpacked) serves `TILE_C` columns, each activation block `TILE_R` rows.
//!
//! Per block b of 32 (weights `w`, scale `d0`, Q4_1 minimum `m0`; activations
//! `q`, scale `d1`, `s8 = d1 * sum(q) / 8`):
//! - Q8_0: `d0 d1 sum(w q)`;
//! - Q4_0 (w = u - 8, u the nibble): `d0 (d1 sum(u q) - 64 s8)`;
//! - Q4_1 (value = u d0 + m0): `d0 d1 sum(u q) + 8 m0 s8`;
//! - Q5_0 (w = u - 16, u the 5-bit quant): `d0 (d1 sum(u q) - 128 s8)`;
//! - Q5_1 (value = u d0 + m0): as Q4_1.
//!
//! Q5_0 and Q5_1 run on repacked rows (the lane kernel) or on the scalar
//! path: the natural-layout SIMD tiles take Q8_0 and Q4 only ([`tile`] and
//! [`full_tile`] send natural Q5 rows to the scalar code).
//!
//! The integer sums are exact; only the f32 accumulation over blocks rounds.
//!
//! Instruction sets, chosen at run time ([`Isa::detect`]): AVX-512 (BW, VNNI
//! when present), AVX2 (+FMA, F16C; with AVX-VNNI where present), and a
//! portable scalar path that is also the tests' oracle for the others.
//!
//! Weight rows come in their file layout ([`RowLayout::Natural`]: every
//! kernel) or, for weights, repacked at load ([`RowLayout::Packed`],
//! [`crate::device::cpu::matmul::packed`]: the lane kernel, `avx2_lane`, with
//! `vpdpbusd` on AVX512-VNNI hosts). The AVX-512 tiles read the natural
//! layout: on a Xeon with AVX-512 VNNI (the device machine; one thread,
//! weights from memory) the AVX2 lane kernel on repacked weights ran
//! 1.3-2.7x them (4096 x 4096 Q8_0 19.1 vs 14.8 GB/s, Q4_0 16.8 vs 8.3,
//! Q4_1 17.8 vs 6.6), and 3x on this project's Zen 4 host.
//!
//! Why, from the instructions of the hot loops (the benchmark binary
//! disassembled, 2026-11-25, R x C = 4 x 2 tiles of Q4_1): the natural
//! layout puts each block's scales beside its quants, so the AVX-512 tile
//! gathers them per block (scalar loads, broadcasts, inserts and an F16C
//! conversion per pair of blocks and row, 56 of its 162 loop instructions)
//! and does its float work per pair of blocks: about 10 instructions per
//! block and (row, column). The lane kernel's layout brings 8 blocks'
//! scales in one load and sums 8 blocks in 8 lanes with no horizontal work:
//! 307 instructions per group of 8 blocks, 4.8 per block and (row, column);
//! with `vpdpbusd` 279, 4.4. Zen 4 runs 512-bit vectors as two 256-bit
//! halves, so the wider vectors buy nothing back.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::plane_to_bit4;
#[cfg(target_arch = "x86_64")]
mod avx2_group;
#[cfg(target_arch = "x86_64")]
mod avx2_lane;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;
#[cfg(all(test, target_arch = "x86_64"))]
mod tests_vnni;

use super::q8::QRow;

/// Every f16 bit pattern as f32, built once (256 KiB; the scales of one
/// model touch few entries, which stay in L1).
pub(crate) fn f16_table() -> &'static [f32; 65536] {
    static TABLE: std::sync::OnceLock<Box<[f32; 65536]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0f32; 65536]);
        for (bits, v) in t.iter_mut().enumerate() {
            *v = half::f16::from_bits(bits as u16).to_f32();
        }
        t
    })
}

/// Weight rows per full tile.
pub const TILE_R: usize = 4;
/// Activation rows per full tile.
pub const TILE_C: usize = 2;

pub(crate) use super::isa::Isa;
pub(crate) use super::kind;
pub use super::kind::weight_kind;

/// Whether the lane kernel of `isa` over repacked `kind` rows takes its
/// fifth bits with GFNI on this host (Q5 formats under a VNNI set; named in
/// kernel descriptions, since it is a different instruction mix).
pub fn lane_gfni(isa: Isa, kind: u8) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        kind::five_bit(kind)
            && matches!(isa, Isa::Avx512 { vnni: true } | Isa::AvxVnni)
            && avx2_lane::host_gfni()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, kind);
        false
    }
}

/// How weight rows are laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowLayout {
    /// As in the file (ggml's blocks).
    Natural,
    /// Repacked for the AVX2 lane kernel ([`crate::device::cpu::matmul::packed`]).
    Packed,
}

/// `out[r][c] = dot(weight row w[r], activation row a[c])` over `nb` blocks,
/// for `w.len() <= TILE_R` and `a.len() <= TILE_C`.
///
/// # Safety
/// Each `w[r]` points to `nb` blocks of format `kind` laid out as `rows`
/// says; each `a[c]` to a quantized row of exactly `nb` blocks; the host
/// supports `isa`; `Packed` rows only with a SIMD `isa`.
pub unsafe fn tile(
    isa: Isa,
    kind: u8,
    rows: RowLayout,
    w: &[*const u8],
    a: &[QRow],
    nb: usize,
    out: &mut [[f32; TILE_C]; TILE_R],
) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar && (rows == RowLayout::Packed || !kind::five_bit(kind)) {
        // SAFETY: forwarded; the host supports AVX2 (every non-scalar set includes it).
        unsafe { simd_tile(isa, kind, rows, w, a, nb, out) };
        return;
    }
    assert_eq!(rows, RowLayout::Natural, "packed rows need a SIMD kernel");
    for (r, &wr) in w.iter().enumerate() {
        for (c, &ac) in a.iter().enumerate() {
            // SAFETY: forwarded from the caller.
            out[r][c] = unsafe { scalar::dot(kind, wr, ac, nb) };
        }
    }
}

/// A kernel for full tiles of [`TILE_R`] weight rows x `C` activation rows,
/// chosen once for an instruction set, weight format and row layout
/// ([`full_tile`]), so that a matrix-vector product with short rows does not
/// pay [`tile`]'s dispatch on every tile. Safety contract: [`tile`]'s.
pub type FullTile<const C: usize> =
    unsafe fn([*const u8; TILE_R], [QRow; C], usize) -> [[f32; C]; TILE_R];

/// The [`FullTile`] kernel for (`isa`, `kind`, `rows`), under the same
/// conditions as [`tile`] (`Packed` only with a SIMD set).
pub fn full_tile<const C: usize>(isa: Isa, kind: u8, rows: RowLayout) -> FullTile<C> {
    /// Scalar dot products, one per output.
    ///
    /// # Safety
    /// As [`tile`].
    unsafe fn scalar_full<const K: u8, const C: usize>(
        w: [*const u8; TILE_R],
        a: [QRow; C],
        nb: usize,
    ) -> [[f32; C]; TILE_R] {
        // SAFETY: forwarded.
        std::array::from_fn(|r| std::array::from_fn(|c| unsafe { scalar::dot(K, w[r], a[c], nb) }))
    }
    #[cfg(target_arch = "x86_64")]
    {
        /// AVX-512 for one format.
        ///
        /// # Safety
        /// As [`tile`].
        unsafe fn avx512_full<const VNNI: bool, const K: u8, const C: usize>(
            w: [*const u8; TILE_R],
            a: [QRow; C],
            nb: usize,
        ) -> [[f32; C]; TILE_R] {
            // SAFETY: forwarded.
            unsafe { avx512::tile::<TILE_R, C>(VNNI, K, w, a, nb) }
        }
        use kind::{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
        let k = kind;
        match (isa, rows) {
            (Isa::Scalar, _) => {}
            // Natural Q5 rows have no SIMD tiles (module doc).
            (_, RowLayout::Natural) if kind::five_bit(k) => {}
            (_, RowLayout::Packed) => {
                let gfni = lane_gfni(isa, k);
                return match k {
                    Q8_0 => avx2_lane::kernel::<Q8_0, TILE_R, C>(isa, gfni),
                    Q4_0 => avx2_lane::kernel::<Q4_0, TILE_R, C>(isa, gfni),
                    Q5_0 => avx2_lane::kernel::<Q5_0, TILE_R, C>(isa, gfni),
                    Q5_1 => avx2_lane::kernel::<Q5_1, TILE_R, C>(isa, gfni),
                    _ => avx2_lane::kernel::<Q4_1, TILE_R, C>(isa, gfni),
                };
            }
            (Isa::Avx512 { vnni: true }, _) if k == Q8_0 => return avx512_full::<true, Q8_0, C>,
            (Isa::Avx512 { vnni: true }, _) if k == Q4_0 => return avx512_full::<true, Q4_0, C>,
            (Isa::Avx512 { vnni: true }, _) => return avx512_full::<true, Q4_1, C>,
            (Isa::Avx512 { .. }, _) if k == Q8_0 => return avx512_full::<false, Q8_0, C>,
            (Isa::Avx512 { .. }, _) if k == Q4_0 => return avx512_full::<false, Q4_0, C>,
            (Isa::Avx512 { .. }, _) => return avx512_full::<false, Q4_1, C>,
            (Isa::Avx2 | Isa::AvxVnni, _) if k == Q8_0 => {
                return avx2_group::tile::<Q8_0, TILE_R, C>;
            }
            (Isa::Avx2 | Isa::AvxVnni, _) if k == Q4_0 => {
                return avx2_group::tile::<Q4_0, TILE_R, C>;
            }
            (Isa::Avx2 | Isa::AvxVnni, _) => return avx2_group::tile::<Q4_1, TILE_R, C>,
        }
    }
    assert_eq!(rows, RowLayout::Natural, "packed rows need a SIMD kernel");
    match kind {
        kind::Q8_0 => scalar_full::<{ kind::Q8_0 }, C>,
        kind::Q4_0 => scalar_full::<{ kind::Q4_0 }, C>,
        kind::Q5_0 => scalar_full::<{ kind::Q5_0 }, C>,
        kind::Q5_1 => scalar_full::<{ kind::Q5_1 }, C>,
        _ => scalar_full::<{ kind::Q4_1 }, C>,
    }
}

/// A lane kernel tile: `out[r][c] = dot(w[r], a[c])` over `nb` blocks for
/// `R` repacked weight rows and `C` activation rows ([`lane_tile`]). Safety:
/// the host has the kernel's instruction sets; each `w[r]` points to a
/// repacked row of `nb` blocks, each `a[c]` to a quantized row of exactly
/// `nb` blocks.
pub type LaneTile<const R: usize, const C: usize> =
    unsafe fn([*const u8; R], [QRow; C], usize) -> [[f32; C]; R];

/// The lane kernel of `isa` for full tiles of `R` x `C` over repacked `kind`
/// rows, for any tile shape (prefill sweeps many columns per loaded weight
/// row: [`crate::device::cpu::matmul::quantized`]); `None` for a set that
/// does not repack ([`Isa::repacks`]).
pub fn lane_tile<const R: usize, const C: usize>(isa: Isa, kind: u8) -> Option<LaneTile<R, C>> {
    if !isa.repacks() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use kind::{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
        let gfni = lane_gfni(isa, kind);
        Some(match kind {
            Q8_0 => avx2_lane::kernel::<Q8_0, R, C>(isa, gfni),
            Q4_0 => avx2_lane::kernel::<Q4_0, R, C>(isa, gfni),
            Q5_0 => avx2_lane::kernel::<Q5_0, R, C>(isa, gfni),
            Q5_1 => avx2_lane::kernel::<Q5_1, R, C>(isa, gfni),
            _ => avx2_lane::kernel::<Q4_1, R, C>(isa, gfni),
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kind;
        None
    }
}

/// [`tile`] for AVX2 and AVX-512: full tiles in one kernel call, partial ones
/// as columns of rows or rows of columns.
///
/// # Safety
/// As [`tile`]; `isa` is not scalar.
#[cfg(target_arch = "x86_64")]
unsafe fn simd_tile(
    isa: Isa,
    kind: u8,
    rows: RowLayout,
    w: &[*const u8],
    a: &[QRow],
    nb: usize,
    out: &mut [[f32; TILE_C]; TILE_R],
) {
    /// One monomorphic tile of R x C.
    ///
    /// # Safety
    /// As [`tile`].
    unsafe fn one<const R: usize, const C: usize>(
        isa: Isa,
        kind: u8,
        rows: RowLayout,
        w: [*const u8; R],
        a: [QRow; C],
        nb: usize,
    ) -> [[f32; C]; R] {
        // SAFETY: forwarded from the caller, who checked the host's features.
        unsafe {
            match (isa, rows) {
                (_, RowLayout::Packed) => {
                    let gfni = lane_gfni(isa, kind);
                    let kernel = match kind {
                        kind::Q8_0 => avx2_lane::kernel::<{ kind::Q8_0 }, R, C>(isa, gfni),
                        kind::Q4_0 => avx2_lane::kernel::<{ kind::Q4_0 }, R, C>(isa, gfni),
                        kind::Q5_0 => avx2_lane::kernel::<{ kind::Q5_0 }, R, C>(isa, gfni),
                        kind::Q5_1 => avx2_lane::kernel::<{ kind::Q5_1 }, R, C>(isa, gfni),
                        _ => avx2_lane::kernel::<{ kind::Q4_1 }, R, C>(isa, gfni),
                    };
                    kernel(w, a, nb)
                }
                (Isa::Avx512 { vnni }, _) => avx512::tile::<R, C>(vnni, kind, w, a, nb),
                _ => match kind {
                    kind::Q8_0 => avx2_group::tile::<{ kind::Q8_0 }, R, C>(w, a, nb),
                    kind::Q4_0 => avx2_group::tile::<{ kind::Q4_0 }, R, C>(w, a, nb),
                    _ => avx2_group::tile::<{ kind::Q4_1 }, R, C>(w, a, nb),
                },
            }
        }
    }
    let (nr, nc) = (w.len(), a.len());
    // SAFETY: every call below is forwarded from the caller, with rows and
    // columns taken from `w` and `a`.
    unsafe {
        if nr == TILE_R && nc == TILE_C {
            let t = one::<TILE_R, TILE_C>(
                isa,
                kind,
                rows,
                w.try_into().unwrap(),
                a.try_into().unwrap(),
                nb,
            );
            *out = t;
        } else if nr == TILE_R {
            for (c, &ac) in a.iter().enumerate() {
                let t = one::<TILE_R, 1>(isa, kind, rows, w.try_into().unwrap(), [ac], nb);
                for r in 0..TILE_R {
                    out[r][c] = t[r][0];
                }
            }
        } else if nc == TILE_C {
            for (r, &wr) in w.iter().enumerate() {
                out[r] = one::<1, TILE_C>(isa, kind, rows, [wr], a.try_into().unwrap(), nb)[0];
            }
        } else {
            for (r, &wr) in w.iter().enumerate() {
                for (c, &ac) in a.iter().enumerate() {
                    out[r][c] = one::<1, 1>(isa, kind, rows, [wr], [ac], nb)[0][0];
                }
            }
        }
    }
}
