//! The K-quant route: Q4_K, Q5_K, Q6_K experts against activations
//! quantized to Q8_K (`matmul::kquant::q8k`), through mul_mat's K-quant
//! tiles, on the rows of one expert and its gathered columns. The loops are
//! `matmul::kquant`'s (decode: [`MATVEC_R`] rows from as many streams x up
//! to [`MATVEC_MAX_C`] columns; beyond: [`PREFILL_R`] x [`PREFILL_C`] tiles
//! over row chunks in L2), with each column found through its pair.

use super::Moe;
use crate::device::cpu::RawTensor;
use crate::device::cpu::matmul::kquant::q8k::{self, Q8KRow, QK_K};
use crate::device::cpu::matmul::kquant::tile::{edge_tile, full_tile};
use crate::device::cpu::matmul::kquant::{
    CHUNK_BYTES, Isa, MATVEC_MAX_C, MATVEC_R, PREFILL_C, PREFILL_R, kind, repack, weight_kind,
};
use crate::device::cpu::matmul::packed::{PackedWeights, RepackCache};
use std::ops::Range;
use std::sync::Arc;

/// The route's choices, made at prepare time.
pub struct KQuant {
    kind: u8,
    isa: Isa,
    /// The experts repacked for the SIMD tiles; `None` with the scalar set,
    /// which reads them in place.
    packed: Option<Arc<PackedWeights>>,
    /// Bytes of one quantized activation row.
    qrow_bytes: usize,
}

impl KQuant {
    /// The route for experts `a` of rows of `k`, as mul_mat's
    /// `KQuantMatMul::with_isa` picks it (`isa` forced by tests): `None`
    /// for other dtypes, `k` not a multiple of 256, or a SIMD set without a
    /// repacked copy (mul_mat then takes the f32 route).
    ///
    /// # Safety
    /// With `repack`, `a`'s bytes are readable and never change while the
    /// route lives.
    pub unsafe fn new(
        a: &RawTensor,
        k: usize,
        repack: Option<&RepackCache>,
        isa: Option<Isa>,
    ) -> Option<KQuant> {
        let kind = weight_kind(a.dtype)?;
        let isa = isa.unwrap_or_else(Isa::detect);
        if !k.is_multiple_of(QK_K) || !Isa::available().contains(&isa) {
            return None;
        }
        let packed = match isa {
            Isa::Scalar => None,
            // SAFETY: a never changes (caller's contract).
            _ => Some(unsafe { repack?.get(a) }?),
        };
        Some(KQuant {
            kind,
            isa,
            packed,
            qrow_bytes: q8k::row_bytes(k),
        })
    }

    /// Bytes of one quantized activation row.
    pub fn row_bytes(&self) -> usize {
        self.qrow_bytes
    }

    /// Quantizes activation row `x` into `out`, in the repacked weights'
    /// order when they are.
    ///
    /// # Safety
    /// `out` has [`KQuant::row_bytes`] writable bytes, aligned to 4.
    pub unsafe fn quantize(&self, x: &[f32], out: *mut u8) {
        // SAFETY: forwarded; the host has self.isa (checked at new).
        unsafe { q8k::quantize_row(x, out, self.isa) };
        if self.packed.is_some() {
            // SAFETY: the row's quants are its first k bytes.
            let qs = unsafe { std::slice::from_raw_parts_mut(out as *mut i8, x.len()) };
            for block in qs.chunks_exact_mut(QK_K) {
                repack::permute_activations(self.kind, block);
            }
        }
    }

    /// Row 0 of expert `e` as the tiles read it.
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

    /// The quantized activation row of pair `p`.
    ///
    /// # Safety
    /// As [`KQuant::rows`].
    unsafe fn column(&self, moe: &Moe, p: u32, scratch: *const u8) -> Q8KRow {
        // SAFETY: row act_index(p) < b1 * t of the scratch.
        unsafe { Q8KRow::at(scratch.add(moe.act_index(p) * self.qrow_bytes), moe.shape.k) }
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
                2 => self.matvec::<2>(moe, e, rows, pairs, scratch),
                3 => self.matvec::<3>(moe, e, rows, pairs, scratch),
                MATVEC_MAX_C => self.matvec::<MATVEC_MAX_C>(moe, e, rows, pairs, scratch),
                _ => self.prefill(moe, e, rows, pairs, scratch),
            }
        }
    }

    /// `C` <= [`MATVEC_MAX_C`] columns: tiles of [`MATVEC_R`] rows from as
    /// many equal parts of the range.
    ///
    /// # Safety
    /// As [`KQuant::rows`], with `pairs.len() == C`.
    unsafe fn matvec<const C: usize>(
        &self,
        moe: &Moe,
        e: usize,
        rows: Range<usize>,
        pairs: &[u32],
        scratch: *const u8,
    ) {
        let nb = moe.shape.k / QK_K;
        // SAFETY: the pairs are valid (caller's contract).
        let (a, dst): ([Q8KRow; C], [*mut f32; C]) = unsafe {
            (
                std::array::from_fn(|c| self.column(moe, pairs[c], scratch)),
                std::array::from_fn(|c| moe.dst_col(pairs[c])),
            )
        };
        // SAFETY: e < n_expert.
        let w0 = unsafe { self.weights(moe, e) };
        let (nb1, di) = (moe.a.nb[1] as usize, moe.di);
        let full = full_tile::<MATVEC_R, C>(self.isa, self.kind);
        let part = rows.len() / MATVEC_R;
        for t in 0..part {
            let first: [usize; MATVEC_R] = std::array::from_fn(|r| rows.start + r * part + t);
            let w = first.map(|i| w0.wrapping_add(i * nb1));
            // SAFETY: rows first[..] are inside the expert, nb blocks each;
            // `full` was chosen for this route's isa (the host has it) and kind.
            let out = unsafe { full(w, a, nb) };
            for r in 0..MATVEC_R {
                for c in 0..C {
                    // SAFETY: inside dst; this thread owns these rows.
                    unsafe { *dst[c].add(first[r] * di) = out[r][c] };
                }
            }
        }
        let rest = rows.start + MATVEC_R * part..rows.end;
        let w: [*const u8; MATVEC_R] =
            std::array::from_fn(|r| w0.wrapping_add((rest.start + r) * nb1));
        let mut out = [[0f32; C]; MATVEC_R];
        // SAFETY: as above, the rest's rows (fewer than MATVEC_R).
        unsafe { edge_tile(self.isa, self.kind, &w[..rest.len()], &a, nb, &mut out) };
        for (r, i) in rest.enumerate() {
            for c in 0..C {
                // SAFETY: as above.
                unsafe { *dst[c].add(i * di) = out[r][c] };
            }
        }
    }

    /// More than [`MATVEC_MAX_C`] columns: chunks of rows that stay in L2,
    /// every column swept per chunk in tiles of [`PREFILL_R`] x [`PREFILL_C`].
    ///
    /// # Safety
    /// As [`KQuant::rows`].
    unsafe fn prefill(
        &self,
        moe: &Moe,
        e: usize,
        rows: Range<usize>,
        pairs: &[u32],
        scratch: *const u8,
    ) {
        const R: usize = PREFILL_R;
        const C: usize = PREFILL_C;
        let nb = moe.shape.k / QK_K;
        let row_bytes = nb * kind::block_bytes(self.kind);
        let chunk = (CHUNK_BYTES / row_bytes).clamp(R, 256) / R * R;
        // SAFETY: e < n_expert.
        let w0 = unsafe { self.weights(moe, e) };
        let (nb1, di) = (moe.a.nb[1] as usize, moe.di);
        let full = full_tile::<R, C>(self.isa, self.kind);
        let n_cols = pairs.len();
        let mut out = [[0f32; C]; R];
        for c0 in rows.clone().step_by(chunk) {
            let c1 = (c0 + chunk).min(rows.end);
            for j0 in (0..n_cols).step_by(C) {
                let nc = C.min(n_cols - j0);
                // The last column stands in for missing ones.
                let pair = |c: usize| pairs[(j0 + c).min(n_cols - 1)];
                // SAFETY: the pairs are valid (caller's contract).
                let (a, dst): ([Q8KRow; C], [*mut f32; C]) = unsafe {
                    (
                        std::array::from_fn(|c| self.column(moe, pair(c), scratch)),
                        std::array::from_fn(|c| moe.dst_col(pair(c))),
                    )
                };
                for i0 in (c0..c1).step_by(R) {
                    let nr = R.min(c1 - i0);
                    let w: [*const u8; R] =
                        std::array::from_fn(|r| w0.wrapping_add((i0 + r).min(c1 - 1) * nb1));
                    // SAFETY: rows i0..i0 + nr are inside the expert, nb
                    // blocks each; the kernels match this route.
                    unsafe {
                        if nr == R && nc == C {
                            out = full(w, a, nb);
                        } else {
                            edge_tile(self.isa, self.kind, &w[..nr], &a[..nc], nb, &mut out);
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
        let packed = if self.packed.is_some() {
            ", repacked"
        } else {
            ""
        };
        format!("int8 {}{packed}", self.isa.label())
    }
}
