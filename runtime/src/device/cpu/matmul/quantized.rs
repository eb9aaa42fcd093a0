//! mul_mat with Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 weights: integer dot products.
//!
//! Phase 1: every src1 row is quantized once per run ([`q8`]) into the shared
//! scratch, the rows split over the threads. Barrier. Phase 2: each thread
//! takes a range of dst rows (weight rows; each weight byte is read by one
//! thread only). For prefill it walks them in chunks that stay in L2,
//! sweeping all src1 columns per chunk in tiles of `LANE_R` x `LANE_C`
//! on repacked rows ([`qdot::lane_tile`]; tall tiles spread a tile's fixed
//! costs over many rows, measured at `LANE_R`), else of [`TILE_R`] x
//! [`TILE_C`] ([`qdot::tile`]), so each loaded block serves several columns.
//! Partial tiles (the ends of a thread's rows, the last columns) run in
//! pieces of at most [`TILE_R`] x [`TILE_C`]; every output is the same sum
//! whatever tile computes it (`tests/quant.rs` checks the bits).
//!
//! For matrix-vector products (N <= [`TILE_C`]) the weights are read once,
//! and the four rows of a tile come from four equal parts of the thread's
//! rows, so they stream from four places at once: one core keeps more
//! memory reads in flight that way (4096 x 4096 Q8_0: 16.6 -> 24 GB/s on
//! this machine's one core). Software prefetch of each stream 2 KiB ahead
//! was tried on top there (an AMD EPYC) and lost a third of that (the
//! hardware prefetchers already follow four streams); on an Intel Xeon a
//! prefetch 4 KiB ahead gained 15-25%, so the lane kernel prefetches where
//! `prefetch::stream_prefetch` says (Intel hosts by default).
//! Full tiles go through a kernel chosen once
//! per call ([`qdot::full_tile`]), with row and dst addresses from one base
//! and stride, which matters for short rows (K = 576).
//!
//! Weights (src0 that never changes, with a [`RepackCache`]) are repacked
//! once at load for the AVX2 lane kernel ([`super::packed`]).
//!
//! Invariant: scratch holds one quantized row ([`q8::row_bytes`]) per src1 row
//! of every batch, written in phase 1 and only read in phase 2.

use super::convert::for_src1_rows;
use super::packed::{PackedWeights, RepackCache};
use super::q8::{self, QK, QRow};
use super::qdot::{self, Isa, RowLayout, TILE_C, TILE_R};
use super::shape::Geometry;
use super::split::Split;
use crate::device::cpu::{CpuKernel, ThreadCtx};
use std::ops::Range;
use std::sync::Arc;

/// Weight bytes per row chunk: the chunk stays in L2 while all columns pass.
const CHUNK_BYTES: usize = 256 << 10;

/// Weight rows per prefill tile on repacked rows (the lane kernel).
///
/// Tall tiles pay a tile's fixed costs (the activations' scales and sums
/// loaded per group, the horizontal sums and scattered dst writes at the
/// end) over more rows; with short rows (K = 640: two groups of 8 blocks
/// and a pair tail) those costs rival the products. Gemma 3 270M's Q5_0
/// `ffn_up` (K = 640, M = 2048, N = 128; `benches/matmul.rs`, one thread,
/// CPU time, 2-core Zen 4, FMA peak 118 GFLOP/s, load average 3-4 from a
/// build on the other core, 2026-11-29), R x C: 4 x 2 (the decode tile,
/// used before) 117-120 GFLOP/s, 1 x 8 121, 2 x 4 116, 4 x 4 136-142,
/// 8 x 4 157, 12 x 4 160, 16 x 4 163-167, 32 x 4 171, 16 x 6 173 (N = 128
/// leaves 2 columns to partial tiles), 8 x 8 157, 16 x 2 133; Q8_0 K = 640,
/// M = 256: 106 at 4 x 2, 127 at 16 x 4. Interleaving the columns'
/// `vpdpbusd` chains (to hide their latency) did not help (136 vs 141 at
/// 4 x 4). Rows without a pair tail run faster (K = 768: 190 at 16 x 4).
const LANE_R: usize = 16;

/// Activation rows (columns of dst) per prefill tile on repacked rows.
const LANE_C: usize = 4;

/// The prepared kernel.
pub struct QuantMatMul {
    geo: Geometry,
    kind: u8,
    isa: Isa,
    /// Bytes of one quantized src1 row.
    qrow_bytes: usize,
    /// src0 repacked for the lane kernel, when it was.
    packed: Option<Arc<PackedWeights>>,
}

impl QuantMatMul {
    /// A kernel for `geo` (src0 Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1) with the host's best
    /// SIMD; `repack`: src0 never changes and may be repacked through it.
    ///
    /// # Safety
    /// With `repack`, src0's bytes never change while the kernel lives.
    pub unsafe fn new(geo: Geometry, repack: Option<&RepackCache>) -> QuantMatMul {
        let isa = match (Isa::requested(), Isa::detect(), repack) {
            (Some(asked), _, _) => asked,
            // The VNNI set serves repacked weights; rows read in place run
            // faster on the AVX2 tiles than on the AVX-512 ones (qdot doc).
            (None, Isa::Avx512 { .. }, None) => Isa::Avx2,
            (None, isa, _) => isa,
        };
        // SAFETY: forwarded.
        unsafe { QuantMatMul::with_isa(geo, isa, repack) }
    }

    /// A kernel that uses `isa` (tests compare every set the host has).
    /// AVX2, AVX-VNNI and AVX-512 with VNNI repack (the lane kernel, with
    /// `vpdpbusd` under either VNNI); AVX-512 without VNNI keeps its
    /// natural-layout kernels.
    ///
    /// Q5_0 and Q5_1 rows that are not repacked run the scalar kernels.
    ///
    /// Panics when src0 is not Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 or the host
    /// lacks `isa`.
    ///
    /// # Safety
    /// As [`QuantMatMul::new`].
    pub unsafe fn with_isa(geo: Geometry, isa: Isa, repack: Option<&RepackCache>) -> QuantMatMul {
        let kind = qdot::weight_kind(geo.src0.dtype).expect("Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 src0");
        assert!(Isa::available().contains(&isa), "the host lacks {isa:?}");
        let packed = match repack {
            // SAFETY: src0 never changes (caller's contract).
            Some(cache) if isa.repacks() => unsafe { cache.get(&geo.src0) },
            _ => None,
        };
        // Q5 rows read in place have only the scalar kernels (qdot doc).
        let isa = if packed.is_none() && qdot::kind::five_bit(kind) {
            Isa::Scalar
        } else {
            isa
        };
        QuantMatMul {
            geo,
            kind,
            isa,
            qrow_bytes: q8::row_bytes(geo.k),
            packed,
        }
    }

    /// The layout the weight rows are read in.
    fn row_layout(&self) -> RowLayout {
        match self.packed {
            Some(_) => RowLayout::Packed,
            None => RowLayout::Natural,
        }
    }

    /// First byte of weight row `i` for dst batch (b2, b3), in the layout
    /// the kernel reads.
    ///
    /// # Safety
    /// As [`Geometry::src0_row`].
    unsafe fn weight_row(&self, i: usize, b2: usize, b3: usize) -> *const u8 {
        // SAFETY: forwarded; a packed copy keeps the rows' offsets.
        unsafe {
            let row = self.geo.src0_row(i, b2, b3);
            match &self.packed {
                Some(p) => p.row(row),
                None => row,
            }
        }
    }

    /// Quantizes this thread's share of src1's rows into `scratch`.
    ///
    /// # Safety
    /// `scratch` holds `scratch_bytes()` bytes, aligned to 64.
    unsafe fn quantize_src1(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        let rows = ctx.share(self.geo.n * self.geo.batches());
        let quantize = |r: usize, x: &[f32]| {
            // SAFETY: quantized row r lies inside the scratch; only this
            // thread writes it; the host supports self.isa (checked at new).
            unsafe { q8::quantize_row(x, scratch.add(r * self.qrow_bytes), self.isa) };
        };
        // SAFETY: this thread's share of src1's rows.
        unsafe { for_src1_rows(&self.geo, rows, quantize) };
    }

    /// dst rows `rows` of batch `b`, every column.
    ///
    /// # Safety
    /// `rows` is inside M; `scratch` holds the quantized src1 of phase 1.
    unsafe fn rows(&self, b: usize, rows: Range<usize>, scratch: *const u8) {
        let g = &self.geo;
        if g.n <= TILE_C {
            // SAFETY: forwarded.
            return unsafe { self.matvec_rows(b, rows, scratch) };
        }
        if self.packed.is_some()
            && g.n >= LANE_C
            && let Some(full) = qdot::lane_tile::<LANE_R, LANE_C>(self.isa, self.kind)
        {
            // SAFETY: forwarded; the lane kernel reads the repacked rows.
            return unsafe { self.tiles::<LANE_R, LANE_C>(b, rows, scratch, full) };
        }
        let full = qdot::full_tile::<TILE_C>(self.isa, self.kind, self.row_layout());
        // SAFETY: forwarded; `full` matches this kernel's isa, kind and layout.
        unsafe { self.tiles::<TILE_R, TILE_C>(b, rows, scratch, full) }
    }

    /// [`QuantMatMul::rows`] in tiles of `R` weight rows x `C` columns, full
    /// tiles through `full`, partial ones through [`qdot::tile`] in pieces
    /// of at most [`TILE_R`] x [`TILE_C`].
    ///
    /// # Safety
    /// As [`QuantMatMul::rows`]; `full` is a kernel for this kernel's isa,
    /// weight format and row layout.
    unsafe fn tiles<const R: usize, const C: usize>(
        &self,
        b: usize,
        rows: Range<usize>,
        scratch: *const u8,
        full: qdot::LaneTile<R, C>,
    ) {
        let g = &self.geo;
        let (b2, b3) = g.batch_coords(b);
        let nb = g.k / QK;
        let w_row = nb * qdot::kind::block_bytes(self.kind);
        let chunk = (CHUNK_BYTES / w_row).clamp(R, 256) / R * R;
        // Row i at w0 + i * nb1; dst (i, j) at dst0 + i * di + j * dj (in
        // f32): the address helpers' divisions once per call, not per tile.
        // SAFETY: row 0 and dst (0, 0) are inside the extents.
        let (w0, dst0) = unsafe { (self.weight_row(0, b2, b3), g.dst_at(0, 0, b2, b3)) };
        let nb1 = g.src0.nb[1] as usize;
        let (di, dj) = (g.dst.nb[0] as usize / 4, g.dst.nb[1] as usize / 4);
        let layout = self.row_layout();
        let mut out = [[0f32; C]; R];
        for c0 in rows.clone().step_by(chunk) {
            let c1 = (c0 + chunk).min(rows.end);
            for j0 in (0..g.n).step_by(C) {
                let nc = C.min(g.n - j0);
                // SAFETY: columns j0..j0 + nc of batch b were quantized in phase 1.
                let a: [QRow; C] = std::array::from_fn(|c| unsafe {
                    let r = b * g.n + (j0 + c).min(g.n - 1);
                    QRow::at(scratch.add(r * self.qrow_bytes), g.k)
                });
                for i0 in (c0..c1).step_by(R) {
                    let nr = R.min(c1 - i0);
                    let w: [*const u8; R] =
                        std::array::from_fn(|r| w0.wrapping_add((i0 + r).min(c1 - 1) * nb1));
                    // SAFETY: rows i0..i0 + nr are inside M, nb blocks each;
                    // `full` and self.isa match this kernel (checked at new).
                    unsafe {
                        if nr == R && nc == C {
                            out = full(w, a, nb);
                        } else {
                            partial_tile(
                                self.isa,
                                self.kind,
                                layout,
                                &w[..nr],
                                &a[..nc],
                                nb,
                                &mut out,
                            );
                        }
                    };
                    for (r, row) in out.iter().enumerate().take(nr) {
                        for (c, &v) in row.iter().enumerate().take(nc) {
                            // SAFETY: (i0 + r, j0 + c) is inside dst; this
                            // thread owns dst rows `rows`.
                            unsafe { *dst0.add((i0 + r) * di + (j0 + c) * dj) = v };
                        }
                    }
                }
            }
        }
    }

    /// dst rows `rows` of batch `b` when every column fits one tile: tile
    /// rows are taken from TILE_R equal parts of the range, so the weights
    /// are read as TILE_R long sequential streams.
    ///
    /// # Safety
    /// As [`QuantMatMul::rows`].
    unsafe fn matvec_rows(&self, b: usize, rows: Range<usize>, scratch: *const u8) {
        // SAFETY: forwarded.
        unsafe {
            match self.geo.n {
                1 => self.matvec_cols::<1>(b, rows, scratch),
                _ => self.matvec_cols::<TILE_C>(b, rows, scratch),
            }
        }
    }

    /// [`QuantMatMul::matvec_rows`] for `C` = N columns.
    ///
    /// # Safety
    /// As [`QuantMatMul::rows`], with `C == N`.
    unsafe fn matvec_cols<const C: usize>(&self, b: usize, rows: Range<usize>, scratch: *const u8) {
        let g = &self.geo;
        let (b2, b3) = g.batch_coords(b);
        let nb = g.k / QK;
        // SAFETY: the columns of batch b were quantized in phase 1.
        let a: [QRow; C] = std::array::from_fn(|c| unsafe {
            QRow::at(scratch.add((b * g.n + c) * self.qrow_bytes), g.k)
        });
        // Row i of this matrix at w0 + i * nb1, dst (i, c) at dst0[c] + i * nb0:
        // the address helpers' divisions once per call, not per tile.
        // SAFETY: row 0 and the C columns are inside the extents.
        let (w0, dst0) = unsafe {
            let dst0: [*mut f32; C] = std::array::from_fn(|c| g.dst_at(0, c, b2, b3));
            (self.weight_row(0, b2, b3), dst0)
        };
        let (nb1, nb0) = (g.src0.nb[1] as usize, g.dst.nb[0] as usize / 4);
        let layout = self.row_layout();
        let full = qdot::full_tile::<C>(self.isa, self.kind, layout);
        let part = rows.len() / TILE_R;
        for t in 0..part {
            let first: [usize; TILE_R] = std::array::from_fn(|r| rows.start + r * part + t);
            let w = first.map(|i| w0.wrapping_add(i * nb1));
            // SAFETY: rows first[..] are inside M, nb blocks each; `full`
            // was chosen for this kernel's isa, kind and layout.
            let out = unsafe { full(w, a, nb) };
            for r in 0..TILE_R {
                for c in 0..C {
                    // SAFETY: inside dst; this thread owns these rows.
                    unsafe { *dst0[c].add(first[r] * nb0) = out[r][c] };
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
                    unsafe { *dst0[c].add((rest.start + r) * nb0) = row[c] };
                }
            }
        }
    }
}

/// `out[r][c] = dot(w[r], a[c])` for any `w.len() <= R`, `a.len() <= C`,
/// through [`qdot::tile`] in pieces of at most [`TILE_R`] x [`TILE_C`].
///
/// # Safety
/// As [`qdot::tile`] for every piece.
unsafe fn partial_tile<const R: usize, const C: usize>(
    isa: Isa,
    kind: u8,
    layout: RowLayout,
    w: &[*const u8],
    a: &[QRow],
    nb: usize,
    out: &mut [[f32; C]; R],
) {
    let mut piece = [[0f32; TILE_C]; TILE_R];
    for (i, wi) in w.chunks(TILE_R).enumerate() {
        for (j, aj) in a.chunks(TILE_C).enumerate() {
            // SAFETY: forwarded.
            unsafe { qdot::tile(isa, kind, layout, wi, aj, nb, &mut piece) };
            for (r, row) in piece.iter().enumerate().take(wi.len()) {
                for (c, &v) in row.iter().enumerate().take(aj.len()) {
                    out[i * TILE_R + r][j * TILE_C + c] = v;
                }
            }
        }
    }
}

impl CpuKernel for QuantMatMul {
    fn scratch_bytes(&self) -> usize {
        self.qrow_bytes * self.geo.n * self.geo.batches()
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        // SAFETY: scratch is scratch_bytes() bytes aligned to 64 (caller's contract).
        unsafe { self.quantize_src1(ctx, scratch) };
        ctx.barrier();
        let g = &self.geo;
        // Ranges start at multiples of a tall tile, so only a range's end is partial.
        let split = Split::new(g.batches(), g.m, g.n, ctx.nth, LANE_R, true);
        for it in ctx.share(split.items()) {
            let (b, rows) = split.item(it);
            // SAFETY: the item's rows are inside M; phase 1 is complete.
            unsafe { self.rows(b, rows, scratch) };
        }
    }

    fn describe(&self) -> String {
        let packed = match &self.packed {
            Some(_) if qdot::lane_gfni(self.isa, self.kind) => "+gfni, repacked",
            Some(_) => ", repacked",
            None => "",
        };
        format!(
            "mul_mat {} x {} (int8 dot, {}{packed})",
            self.geo.src0.dtype,
            self.geo.src1.dtype,
            self.isa.name()
        )
    }
}
