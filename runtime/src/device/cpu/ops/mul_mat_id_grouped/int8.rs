//! The int8 route: Q8_0, Q4_0, Q4_1 experts (Q5_0, Q5_1 repacked) against
//! activations quantized to 8-bit blocks of 32 (`matmul::q8`), through
//! mul_mat's `qdot` tiles, on the rows of one expert and its gathered
//! columns, each found through its pair. By the expert's column count:
//! - 1 or 2 ([`Int8::matvec`], decode): `matmul::quantized`'s matrix-vector
//!   loop, tiles of 4 rows from 4 equal parts of the range (4 weight
//!   streams);
//! - 3 to [`STREAM_COLS`] ([`Int8::streams`], an expert's share of a
//!   prefill): the same 4 streams, each tile's rows swept by every pair of
//!   columns while they sit in L1;
//! - more ([`Int8::prefill`]): `matmul::quantized`'s prefill loop, row
//!   chunks that stay in L2 swept by all the columns.
//!
//! Why the middle case: an expert of a prefill gets a few columns (t n_used
//! / n_expert: 8 for Qwen3-30B-A3B at 128 tokens) and its weights come from
//! memory once, so the prefill loop's single stream waited on them. Measured
//! (`benches/moe.rs`, 2-core AMD EPYC Zen 4, AVX512-VNNI, one thread, CPU
//! time, 2026-11-29): Q8_0 experts k = 2048, n = 768, 128 experts, 8 used,
//! 128 tokens: 71-75 GFLOP/s on the prefill loop, 108-110 with the streams
//! (up to 16 columns); k = 1024, n = 512, 32 experts, 4 used (16 columns
//! on average): 98-103 with streams up to 16 columns, 114-115 up to 64.

use super::Moe;
use crate::device::cpu::RawTensor;
use crate::device::cpu::matmul::packed::{PackedWeights, RepackCache};
use crate::device::cpu::matmul::q8::{self, QK, QRow};
use crate::device::cpu::matmul::qdot::{self, Isa, RowLayout, TILE_C, TILE_R};
use std::ops::Range;
use std::sync::Arc;

/// Weight bytes per row chunk (as `matmul::quantized`): the chunk stays in
/// L2 while all of the expert's columns pass.
const CHUNK_BYTES: usize = 256 << 10;

/// Most columns taken by [`Int8::streams`].
const STREAM_COLS: usize = 64;

/// The route's choices, made at prepare time.
pub struct Int8 {
    kind: u8,
    isa: Isa,
    /// The experts repacked for the lane kernel, when they were.
    packed: Option<Arc<PackedWeights>>,
    /// Bytes of one quantized activation row.
    qrow_bytes: usize,
}

impl Int8 {
    /// The route for experts `a` of rows of `k`, as mul_mat's
    /// `QuantMatMul::new` picks it (`isa` forced by tests); `None` for
    /// dtypes it does not take, and for Q5 experts that are not repacked
    /// unless `isa` is forced (mul_mat takes the f32 route for those).
    ///
    /// # Safety
    /// With `repack`, `a`'s bytes are readable and never change while the
    /// route lives.
    pub unsafe fn new(
        a: &RawTensor,
        k: usize,
        repack: Option<&RepackCache>,
        isa: Option<Isa>,
    ) -> Option<Int8> {
        let kind = qdot::weight_kind(a.dtype)?;
        let chosen = isa.or_else(Isa::requested).unwrap_or_else(Isa::detect);
        let packed = match repack {
            // SAFETY: a never changes (caller's contract).
            Some(cache) if chosen.repacks() => unsafe { cache.get(a) },
            _ => None,
        };
        let isa = match (isa, &packed, chosen) {
            // Q5 rows in place have only the scalar kernels.
            (Some(_), None, _) if qdot::kind::five_bit(kind) => Isa::Scalar,
            (None, None, _) if qdot::kind::five_bit(kind) => return None,
            // Rows in place run faster on the AVX2 tiles than on the
            // AVX-512 ones (`QuantMatMul::new`).
            (None, None, Isa::Avx512 { .. }) => Isa::Avx2,
            _ => chosen,
        };
        Some(Int8 {
            kind,
            isa,
            packed,
            qrow_bytes: q8::row_bytes(k),
        })
    }

    /// Bytes of one quantized activation row.
    pub fn row_bytes(&self) -> usize {
        self.qrow_bytes
    }

    /// Quantizes activation row `x` into `out`.
    ///
    /// # Safety
    /// `out` has [`Int8::row_bytes`] writable bytes, aligned to 4.
    pub unsafe fn quantize(&self, x: &[f32], out: *mut u8) {
        // SAFETY: forwarded; the host has self.isa (detected or checked).
        unsafe { q8::quantize_row(x, out, self.isa) }
    }

    fn layout(&self) -> RowLayout {
        match self.packed {
            Some(_) => RowLayout::Packed,
            None => RowLayout::Natural,
        }
    }

    /// Row 0 of expert `e` in the layout the tiles read.
    ///
    /// # Safety
    /// `e < n_expert`.
    unsafe fn weights(&self, moe: &Moe, e: usize) -> *const u8 {
        // SAFETY: a copy keeps the rows' offsets.
        unsafe {
            let row = moe.expert(e);
            match &self.packed {
                Some(p) => p.row(row),
                None => row,
            }
        }
    }

    /// dst rows `rows` of expert `e` for each of its `pairs`.
    ///
    /// # Safety
    /// `e < n_expert`; `rows` inside `0..n`; `pairs` non-empty, each below
    /// `n_pairs`; `scratch` holds the quantized activations of phase 1; no
    /// other thread writes these dst elements.
    pub unsafe fn rows(
        &self,
        moe: &Moe,
        e: usize,
        rows: Range<usize>,
        pairs: &[u32],
        scratch: *const u8,
    ) {
        // SAFETY: forwarded.
        unsafe {
            match pairs.len() {
                1 => self.matvec::<1>(moe, e, rows, pairs, scratch),
                TILE_C => self.matvec::<TILE_C>(moe, e, rows, pairs, scratch),
                c if c <= STREAM_COLS => self.streams(moe, e, rows, pairs, scratch),
                _ => self.prefill(moe, e, rows, pairs, scratch),
            }
        }
    }

    /// The quantized activation row of pair `p`.
    ///
    /// # Safety
    /// As [`Int8::rows`].
    unsafe fn column(&self, moe: &Moe, p: u32, scratch: *const u8) -> QRow {
        // SAFETY: row act_index(p) < b1 * t of the scratch.
        unsafe { QRow::at(scratch.add(moe.act_index(p) * self.qrow_bytes), moe.shape.k) }
    }

    /// `C` = all of the expert's columns: tiles of [`TILE_R`] rows from as
    /// many equal parts of the range (that many weight streams).
    ///
    /// # Safety
    /// As [`Int8::rows`], with `pairs.len() == C`.
    unsafe fn matvec<const C: usize>(
        &self,
        moe: &Moe,
        e: usize,
        rows: Range<usize>,
        pairs: &[u32],
        scratch: *const u8,
    ) {
        let nb = moe.shape.k / QK;
        // SAFETY: the pairs are valid (caller's contract).
        let (a, dst): ([QRow; C], [*mut f32; C]) = unsafe {
            (
                std::array::from_fn(|c| self.column(moe, pairs[c], scratch)),
                std::array::from_fn(|c| moe.dst_col(pairs[c])),
            )
        };
        // SAFETY: e < n_expert.
        let w0 = unsafe { self.weights(moe, e) };
        let (nb1, di) = (moe.a.nb[1] as usize, moe.di);
        let layout = self.layout();
        let full = qdot::full_tile::<C>(self.isa, self.kind, layout);
        let part = rows.len() / TILE_R;
        for t in 0..part {
            let first: [usize; TILE_R] = std::array::from_fn(|r| rows.start + r * part + t);
            let w = first.map(|i| w0.wrapping_add(i * nb1));
            // SAFETY: rows first[..] are inside the expert, nb blocks each;
            // `full` was chosen for this route's isa, kind and layout.
            let out = unsafe { full(w, a, nb) };
            for r in 0..TILE_R {
                for c in 0..C {
                    // SAFETY: inside dst; this thread owns these rows.
                    unsafe { *dst[c].add(first[r] * di) = out[r][c] };
                }
            }
        }
        let rest = rows.start + TILE_R * part..rows.end;
        let nr = rest.len();
        if nr > 0 {
            let w: [*const u8; TILE_R] =
                std::array::from_fn(|r| w0.wrapping_add((rest.start + r.min(nr - 1)) * nb1));
            let mut out = [[0f32; TILE_C]; TILE_R];
            // SAFETY: as above, through the general dispatch.
            unsafe { qdot::tile(self.isa, self.kind, layout, &w[..nr], &a, nb, &mut out) };
            for (r, row) in out.iter().enumerate().take(nr) {
                for c in 0..C {
                    // SAFETY: as above.
                    unsafe { *dst[c].add((rest.start + r) * di) = row[c] };
                }
            }
        }
    }

    /// A few columns (up to [`STREAM_COLS`]): tiles of [`TILE_R`] rows from
    /// as many equal parts of the range (weight streams, as [`Int8::matvec`]),
    /// each tile's rows swept by every pair of columns while in L1.
    ///
    /// # Safety
    /// As [`Int8::rows`], with `pairs.len() <= STREAM_COLS`.
    unsafe fn streams(
        &self,
        moe: &Moe,
        e: usize,
        rows: Range<usize>,
        pairs: &[u32],
        scratch: *const u8,
    ) {
        let nb = moe.shape.k / QK;
        let n_cols = pairs.len();
        // SAFETY: the pairs are valid (caller's contract); places past
        // n_cols repeat the last column and are never written.
        let (a, dst): ([QRow; STREAM_COLS], [*mut f32; STREAM_COLS]) = unsafe {
            let pair = |c: usize| pairs[c.min(n_cols - 1)];
            (
                std::array::from_fn(|c| self.column(moe, pair(c), scratch)),
                std::array::from_fn(|c| moe.dst_col(pair(c))),
            )
        };
        // SAFETY: e < n_expert.
        let w0 = unsafe { self.weights(moe, e) };
        let (nb1, di) = (moe.a.nb[1] as usize, moe.di);
        let layout = self.layout();
        let two = qdot::full_tile::<TILE_C>(self.isa, self.kind, layout);
        let one = qdot::full_tile::<1>(self.isa, self.kind, layout);
        let part = rows.len() / TILE_R;
        for t in 0..part {
            let first: [usize; TILE_R] = std::array::from_fn(|r| rows.start + r * part + t);
            let w = first.map(|i| w0.wrapping_add(i * nb1));
            for j0 in (0..n_cols).step_by(TILE_C) {
                let nc = TILE_C.min(n_cols - j0);
                // SAFETY: rows first[..] are inside the expert, nb blocks
                // each; the kernels match this route.
                let out: [[f32; TILE_C]; TILE_R] = unsafe {
                    if nc == TILE_C {
                        two(w, [a[j0], a[j0 + 1]], nb)
                    } else {
                        one(w, [a[j0]], nb).map(|r| [r[0], 0.0])
                    }
                };
                for r in 0..TILE_R {
                    for c in 0..nc {
                        // SAFETY: inside dst; this thread owns these rows.
                        unsafe { *dst[j0 + c].add(first[r] * di) = out[r][c] };
                    }
                }
            }
        }
        let rest = rows.start + TILE_R * part..rows.end;
        let nr = rest.len();
        if nr > 0 {
            let w: [*const u8; TILE_R] =
                std::array::from_fn(|r| w0.wrapping_add((rest.start + r.min(nr - 1)) * nb1));
            let mut out = [[0f32; TILE_C]; TILE_R];
            for j0 in (0..n_cols).step_by(TILE_C) {
                let nc = TILE_C.min(n_cols - j0);
                let (w, a) = (&w[..nr], &a[j0..j0 + nc]);
                // SAFETY: as above, through the general dispatch.
                unsafe { qdot::tile(self.isa, self.kind, layout, w, a, nb, &mut out) };
                for (r, row) in out.iter().enumerate().take(nr) {
                    for (c, &v) in row.iter().enumerate().take(nc) {
                        // SAFETY: as above.
                        unsafe { *dst[j0 + c].add((rest.start + r) * di) = v };
                    }
                }
            }
        }
    }

    /// More columns than a tile: chunks of rows that stay in L2, every
    /// column swept per chunk in tiles of [`TILE_R`] x [`TILE_C`].
    ///
    /// # Safety
    /// As [`Int8::rows`].
    unsafe fn prefill(
        &self,
        moe: &Moe,
        e: usize,
        rows: Range<usize>,
        pairs: &[u32],
        scratch: *const u8,
    ) {
        let nb = moe.shape.k / QK;
        let w_row = nb * qdot::kind::block_bytes(self.kind);
        let chunk = (CHUNK_BYTES / w_row).clamp(TILE_R, 256) / TILE_R * TILE_R;
        // SAFETY: e < n_expert.
        let w0 = unsafe { self.weights(moe, e) };
        let (nb1, di) = (moe.a.nb[1] as usize, moe.di);
        let layout = self.layout();
        let full = qdot::full_tile::<TILE_C>(self.isa, self.kind, layout);
        let n_cols = pairs.len();
        let mut out = [[0f32; TILE_C]; TILE_R];
        for c0 in rows.clone().step_by(chunk) {
            let c1 = (c0 + chunk).min(rows.end);
            for j0 in (0..n_cols).step_by(TILE_C) {
                let nc = TILE_C.min(n_cols - j0);
                // The last column stands in for missing ones.
                let pair = |c: usize| pairs[(j0 + c).min(n_cols - 1)];
                // SAFETY: the pairs are valid (caller's contract).
                let (a, dst): ([QRow; TILE_C], [*mut f32; TILE_C]) = unsafe {
                    (
                        std::array::from_fn(|c| self.column(moe, pair(c), scratch)),
                        std::array::from_fn(|c| moe.dst_col(pair(c))),
                    )
                };
                for i0 in (c0..c1).step_by(TILE_R) {
                    let nr = TILE_R.min(c1 - i0);
                    let w: [*const u8; TILE_R] =
                        std::array::from_fn(|r| w0.wrapping_add((i0 + r).min(c1 - 1) * nb1));
                    // SAFETY: rows i0..i0 + nr are inside the expert, nb
                    // blocks each; the kernels match this route.
                    unsafe {
                        if nr == TILE_R && nc == TILE_C {
                            out = full(w, a, nb);
                        } else {
                            let (w, a) = (&w[..nr], &a[..nc]);
                            qdot::tile(self.isa, self.kind, layout, w, a, nb, &mut out);
                        }
                    }
                    for (r, row) in out.iter().enumerate().take(nr) {
                        for (c, &v) in row.iter().enumerate().take(nc) {
                            // SAFETY: inside dst; this thread owns these rows.
                            unsafe { *dst[c].add((i0 + r) * di) = v };
                        }
                    }
                }
            }
        }
    }

    /// How the route reads the experts, for descriptions.
    pub fn describe(&self) -> String {
        let packed = match &self.packed {
            Some(_) if qdot::lane_gfni(self.isa, self.kind) => "+gfni, repacked",
            Some(_) => ", repacked",
            None => "",
        };
        format!("int8 dot, {}{packed}", self.isa.name())
    }
}
