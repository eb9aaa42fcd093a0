//! mul_mat with Q8_0, Q4_0 or Q4_1 weights: integer dot products.
//!
//! Phase 1: every src1 row is quantized once per run ([`q8`]) into the shared
//! scratch, the rows split over the threads. Barrier. Phase 2: each thread
//! takes a range of dst rows (weight rows; each weight byte is read by one
//! thread only) and walks it in chunks that stay in L2, sweeping all src1
//! columns per chunk in tiles of [`TILE_R`] x [`TILE_C`] ([`qdot::tile`]).
//! For matrix-vector products (N = 1) this streams the weights once, four rows
//! side by side; for prefill each loaded block serves several columns.
//!
//! Invariant: scratch holds one quantized row ([`q8::row_bytes`]) per src1 row
//! of every batch, written in phase 1 and only read in phase 2.

use super::convert::row_to_f32;
use super::q8::{self, QK, QRow};
use super::qdot::{self, Isa, TILE_C, TILE_R};
use super::shape::Geometry;
use super::split::Split;
use crate::cpu::{CpuKernel, ThreadCtx};
use ir::DType;
use std::cell::RefCell;
use std::ops::Range;

/// Weight bytes per row chunk: the chunk stays in L2 while all columns pass.
const CHUNK_BYTES: usize = 256 << 10;

thread_local! {
    /// A src1 row widened to f32 when it is not packed f32 already.
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The prepared kernel.
pub struct QuantMatMul {
    geo: Geometry,
    kind: u8,
    isa: Isa,
    /// Bytes of one quantized src1 row.
    qrow_bytes: usize,
}

impl QuantMatMul {
    /// A kernel for `geo` (src0 Q8_0, Q4_0 or Q4_1) with the host's best SIMD.
    pub fn new(geo: Geometry) -> QuantMatMul {
        QuantMatMul::with_isa(geo, Isa::detect())
    }

    /// A kernel that uses `isa` (tests compare every set the host has).
    ///
    /// Panics when src0 is not Q8_0, Q4_0 or Q4_1 or the host lacks `isa`.
    pub fn with_isa(geo: Geometry, isa: Isa) -> QuantMatMul {
        let kind = qdot::weight_kind(geo.src0.dtype).expect("Q8_0, Q4_0 or Q4_1 src0");
        assert!(Isa::available().contains(&isa), "the host lacks {isa:?}");
        QuantMatMul {
            geo,
            kind,
            isa,
            qrow_bytes: q8::row_bytes(geo.k),
        }
    }

    /// Quantizes this thread's share of src1's rows into `scratch`.
    ///
    /// # Safety
    /// `scratch` holds `scratch_bytes()` bytes, aligned to 64.
    unsafe fn quantize_src1(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        let g = &self.geo;
        let packed_f32 = g.src1.dtype == DType::F32 && g.src1.nb[0] == 4;
        ROW.with_borrow_mut(|buf| {
            for r in ctx.share(g.n * g.batches()) {
                let (j, (b2, b3)) = (r % g.n, g.batch_coords(r / g.n));
                // SAFETY: j, b2, b3 are inside src1's extents; a packed f32
                // row is k aligned floats.
                let x: &[f32] = unsafe {
                    let src = g.src1_row(j, b2, b3);
                    if packed_f32 {
                        std::slice::from_raw_parts(src as *const f32, g.k)
                    } else {
                        buf.resize(g.k, 0.0);
                        row_to_f32(g.src1.dtype, src, g.src1.nb[0] as usize, buf);
                        buf
                    }
                };
                // SAFETY: quantized row r lies inside the scratch; only this
                // thread writes it; the host supports self.isa (checked at new).
                unsafe { q8::quantize_row(x, scratch.add(r * self.qrow_bytes), self.isa) };
            }
        });
    }

    /// dst rows `rows` of batch `b`, every column.
    ///
    /// # Safety
    /// `rows` is inside M; `scratch` holds the quantized src1 of phase 1.
    unsafe fn rows(&self, b: usize, rows: Range<usize>, scratch: *const u8) {
        let g = &self.geo;
        let (b2, b3) = g.batch_coords(b);
        let nb = g.k / QK;
        let w_row = nb * qdot::kind::block_bytes(self.kind);
        let chunk = (CHUNK_BYTES / w_row).clamp(TILE_R, 256) / TILE_R * TILE_R;
        let mut out = [[0f32; TILE_C]; TILE_R];
        for c0 in rows.clone().step_by(chunk) {
            let c1 = (c0 + chunk).min(rows.end);
            for j0 in (0..g.n).step_by(TILE_C) {
                let nc = TILE_C.min(g.n - j0);
                // SAFETY: columns j0..j0 + nc of batch b were quantized in phase 1.
                let a: [QRow; TILE_C] = std::array::from_fn(|c| unsafe {
                    let r = b * g.n + (j0 + c).min(g.n - 1);
                    QRow::at(scratch.add(r * self.qrow_bytes), g.k)
                });
                for i0 in (c0..c1).step_by(TILE_R) {
                    let nr = TILE_R.min(c1 - i0);
                    // SAFETY: rows i0..i0 + nr are inside M.
                    let w: [*const u8; TILE_R] = std::array::from_fn(|r| unsafe {
                        g.src0_row((i0 + r).min(c1 - 1), b2, b3)
                    });
                    // SAFETY: nb blocks in each row; self.isa checked at new.
                    unsafe { qdot::tile(self.isa, self.kind, &w[..nr], &a[..nc], nb, &mut out) };
                    for (r, row) in out.iter().enumerate().take(nr) {
                        for (c, &v) in row.iter().enumerate().take(nc) {
                            // SAFETY: (i0 + r, j0 + c) is inside dst; this
                            // thread owns dst rows `rows`.
                            unsafe { *g.dst_at(i0 + r, j0 + c, b2, b3) = v };
                        }
                    }
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
        let split = Split::new(g.batches(), g.m, g.n, ctx.nth, 4 * TILE_R, true);
        for it in ctx.share(split.items()) {
            let (b, rows) = split.item(it);
            // SAFETY: the item's rows are inside M; phase 1 is complete.
            unsafe { self.rows(b, rows, scratch) };
        }
    }

    fn describe(&self) -> String {
        format!(
            "mul_mat {} x {} (int8 dot, {:?})",
            self.geo.src0.dtype, self.geo.src1.dtype, self.isa
        )
    }
}
