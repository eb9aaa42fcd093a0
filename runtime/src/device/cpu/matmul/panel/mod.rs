//! f32 mul_mat of a weight packed once at load into panels ([`mod@pack`]), by
//! register-tiled micro-kernels of our own (AVX-512F or AVX2 + FMA, the
//! widest the host has: [`PanelIsa::detect`]).
//!
//! Why not `gemm` for these: on this project's AVX-512 host (Zen 4 class,
//! 2026-11-25, `benches/matmul.rs -- llama2l`) gemm's f32 kernels ran
//! llama2l's weight products (K = 512 or 1536, N = 128) at 51-52% of the FMA
//! peak, and gemm packs the weights again on every call although they never
//! change in a plan.
//!
//! A run: the threads pack src1's columns (all batches) into blocks in the
//! shared scratch ([`pack::pack_columns`]), meet at a barrier, then each takes
//! a contiguous range of panels and, for each depth block of [`KC`] and each
//! column block, runs one tile: `rows x cols` accumulators in registers (one
//! column: four panels per call, [`Matvec4`]).
//!
//! Prefetching: while a thread's tiles run over one panel's depth block,
//! each prefetches its share of the next panel's block into L2, a line
//! every few depth steps (`NextPanel`); the first panel of a thread's
//! range, which nothing prefetched, has its first tile prefetch it 4 KiB
//! ahead of its reads ([`Tile::prefetch`]). Why (2026-11-27, 2-core Xeon,
//! family 6 model 207, `benches/matmul.rs -- "f32 llama2l"`, one thread,
//! GFLOP/s): one product repeated, whose weights stay partly in L2, ran
//! llama2l's shapes at 85-89% of the FMA peak, but 32 distinct products in
//! turn (weights from L3, as in the model, where `mul_mat` ran at 68%) at
//! 70-74%: the first tile over each panel waited on it. Prefetching 4 KiB
//! ahead in every panel's first tile gave 76-81%; the next panel trickled
//! into L2 as well, 77-85% (alternating runs: 138.6-152.6 against
//! 126.2-137.2 GFLOP/s without the trickle). The same prefetches of the
//! next panel issued as one burst per tile, or the panels on huge pages,
//! changed nothing measurable. AVX2 tiles on the same host: +3-7%.
//!
//! Invariants:
//! - each dst element is one chain of fused multiply-adds over `kk = 0..K`
//!   in order, starting from +0 (between depth blocks the accumulator goes
//!   through dst unchanged), so its bits depend only on its weight row and
//!   its activation column: not on M, N, batches, the thread split or the
//!   ISA, and they equal `f32::mul_add` applied in the same order (the
//!   tests' oracle);
//! - only weights (never written after load) are packed;
//! - a thread writes only the dst rows of its own panels.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod isa;
pub mod pack;

use super::shape::Geometry;
use crate::device::cpu::{CpuKernel, RawTensor, ThreadCtx};
use ir::DType;
pub use isa::PanelIsa;
pub use pack::{PanelValue, Panels};
use std::sync::Arc;

/// Depth per block: a 32-row panel's block (64 KiB) and 128 columns' block
/// (256 KiB) stay in L2 while the block's tiles run.
pub const KC: usize = 512;

/// Most columns of any ISA's tile.
pub(crate) const MAX_NR: usize = 14;

/// One micro-kernel call.
pub struct Tile {
    /// The weight panel at the first depth of the block.
    pub a: *const u8,
    /// The activation block at the first depth of the block.
    pub b: *const f32,
    /// dst of the tile's first row, for each of its columns (`cols` set).
    pub dst: [*mut f32; MAX_NR],
    /// Weight rows (`1..=mr`).
    pub rows: usize,
    /// Columns (`1..=nr`).
    pub cols: usize,
    /// Depth steps.
    pub depth: usize,
    /// Continue the chains stored in dst (every depth block but the first).
    pub load: bool,
    /// Prefetch the panel ahead of the reads (a hint, never a fault): the
    /// first tile over a panel's depth block reads it from L3 or memory;
    /// the later ones find it in L2 (module doc).
    pub prefetch: bool,
    /// This tile's share of the panel the thread takes next (same depth
    /// block), prefetched into L2 a line at a time over the depth steps
    /// (`NextPanel`).
    pub next: *const u8,
    /// Lines (64 bytes) of `next` to prefetch (0: none).
    pub next_lines: usize,
}

/// A tile's prefetch of its share of the next panel: one line every few
/// depth steps, so the lines trickle in while the tile computes (a burst
/// of them at the tile's start stalled its loads and gained nothing).
pub(crate) struct NextPanel {
    at: *const u8,
    left: usize,
    every: usize,
    countdown: usize,
}

impl NextPanel {
    /// The prefetch schedule of `t`.
    pub(crate) fn new(t: &Tile) -> NextPanel {
        let every = t.depth.checked_div(t.next_lines).unwrap_or(1).max(1);
        NextPanel {
            at: t.next,
            left: t.next_lines,
            every,
            countdown: 0,
        }
    }

    /// Called once per depth step: prefetches the next line when it is due.
    #[inline(always)]
    pub(crate) fn step(&mut self) {
        if self.left == 0 {
            return;
        }
        if self.countdown == 0 {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint: it never faults, and these lines
            // are inside the panels.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T1>(self.at as *const i8);
            }
            self.at = self.at.wrapping_add(64);
            self.left -= 1;
            self.countdown = self.every;
        }
        self.countdown -= 1;
    }
}

/// One column (N = 1) against four panels at once: four weight streams in
/// flight, where one panel after another is one (decode).
pub struct Matvec4 {
    /// Each panel at the first depth of the block.
    pub a: [*const u8; 4],
    /// The column's block at the first depth (values `nr` apart).
    pub b: *const f32,
    /// dst of each panel's first row.
    pub dst: [*mut f32; 4],
    /// Each panel's rows (`1..=mr`).
    pub rows: [usize; 4],
    /// Depth steps.
    pub depth: usize,
    /// Continue the chains stored in dst.
    pub load: bool,
}

/// Runs one [`Matvec4`] on `isa` with panel values of type `value`.
///
/// # Safety
/// As [`run_tile`] for each of the four panels with one column.
pub unsafe fn run_matvec4(isa: PanelIsa, value: PanelValue, t: &Matvec4) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded.
    unsafe {
        match (isa, value) {
            (PanelIsa::Avx2, PanelValue::F32) => avx2::matvec4::<false>(t),
            (PanelIsa::Avx2, PanelValue::F16) => avx2::matvec4::<true>(t),
            (PanelIsa::Avx512, PanelValue::F32) => avx512::matvec4::<false>(t),
            (PanelIsa::Avx512, PanelValue::F16) => avx512::matvec4::<true>(t),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (isa, value, t);
}

/// Runs one tile on `isa` with panel values of type `value`.
///
/// # Safety
/// The host has `isa`; `a` holds `depth` steps of `isa.mr()` values (32-byte
/// aligned), `b` `depth` steps of `isa.nr()` f32 with the first `cols` set;
/// each `dst[j]` (`j < cols`) has `rows` writable f32, no other thread
/// touches them during the call.
pub unsafe fn run_tile(isa: PanelIsa, value: PanelValue, t: &Tile) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded.
    unsafe {
        match (isa, value) {
            (PanelIsa::Avx2, PanelValue::F32) => avx2::tile::<false>(t),
            (PanelIsa::Avx2, PanelValue::F16) => avx2::tile::<true>(t),
            (PanelIsa::Avx512, PanelValue::F32) => avx512::tile::<false>(t),
            (PanelIsa::Avx512, PanelValue::F16) => avx512::tile::<true>(t),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (isa, value, t);
}

/// Whether the panel kernel serves a product of this shape: a 2-D F32, F16 or
/// BF16 weight (no batches of weights) and a dst contiguous along M.
pub fn applies(geo: &Geometry) -> bool {
    matches!(geo.src0.dtype, DType::F32 | DType::F16 | DType::BF16)
        && geo.src0.ne[2] == 1
        && geo.src0.ne[3] == 1
        && geo.dst.nb[0] == 4
}

/// The prepared kernel.
pub struct PanelMatMul {
    geo: Geometry,
    panels: Arc<Panels>,
}

impl PanelMatMul {
    /// A kernel for `geo` reading `panels`, which were packed from its src0.
    pub fn new(geo: Geometry, panels: Arc<Panels>) -> PanelMatMul {
        debug_assert!(applies(&geo) && panels.m == geo.m && panels.k == geo.k);
        PanelMatMul { geo, panels }
    }

    fn columns(&self) -> usize {
        self.geo.n * self.geo.batches()
    }

    /// dst of row `i`, flat column `c`.
    ///
    /// # Safety
    /// `i < m`, `c < columns()`.
    unsafe fn dst(&self, i: usize, c: usize) -> *mut f32 {
        let (j, b2, b3) = pack::column_coords(&self.geo, c);
        // SAFETY: inside the extents.
        unsafe { self.geo.dst_at(i, j, b2, b3) }
    }
}

impl CpuKernel for PanelMatMul {
    fn scratch_bytes(&self) -> usize {
        4 * pack::column_block_floats(&self.geo, self.panels.isa.nr())
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        let (g, p) = (&self.geo, &*self.panels);
        let (isa, mr, nr) = (p.isa, p.isa.mr(), p.isa.nr());
        let columns = self.columns();
        let blocks = columns.div_ceil(nr);
        let packed = scratch as *mut f32;
        for b in ctx.share(blocks) {
            // SAFETY: scratch holds every block; this thread writes only its share.
            unsafe { pack::pack_columns(g, nr, b, packed) };
        }
        ctx.barrier();
        let mine = ctx.share(p.count());
        let step_bytes = mr * p.value.bytes();
        // Every column block of one panel over one depth block; `next`: the
        // panel this thread takes after it (its block is prefetched over these
        // tiles); `first`: nothing prefetched this one.
        let panel_block = |k0: usize, panel: usize, next: Option<usize>, first: bool| {
            let i0 = panel * mr;
            let depth = KC.min(g.k - k0);
            let lines = (depth * step_bytes).div_ceil(64);
            for b in 0..blocks {
                let (from, to) = (lines * b / blocks, lines * (b + 1) / blocks);
                let next_at = match next {
                    // SAFETY: next < count(), k0 < k.
                    Some(n) => unsafe { p.at(n, k0) }.wrapping_add(64 * from),
                    None => std::ptr::null(),
                };
                let c0 = b * nr;
                let mut t = Tile {
                    // SAFETY: panel < count(), k0 < k.
                    a: unsafe { p.at(panel, k0) },
                    // SAFETY: block b's depth k0 inside the scratch.
                    b: unsafe { packed.add((b * g.k + k0) * nr) },
                    dst: [std::ptr::null_mut(); MAX_NR],
                    rows: mr.min(g.m - i0),
                    cols: nr.min(columns - c0),
                    depth,
                    load: k0 > 0,
                    prefetch: b == 0 && first,
                    next: next_at,
                    next_lines: if next.is_some() { to - from } else { 0 },
                };
                for (j, d) in t.dst.iter_mut().take(t.cols).enumerate() {
                    // SAFETY: i0 < m, c0 + j < columns.
                    *d = unsafe { self.dst(i0, c0 + j) };
                }
                // SAFETY: the panels were packed for `isa`, detected on this
                // host; the tile's dst rows belong to this thread.
                unsafe { run_tile(isa, p.value, &t) };
            }
        };
        // Loop orders (each element's chain runs in depth order in all):
        // one column (decode): four panels at a time, four weight streams;
        // one column block: panel after panel, one stream; otherwise depth
        // blocks outside, so a block of every column stays in L2 while the
        // panels pass.
        if columns == 1 {
            // Four panels from the four quarters of this thread's range,
            // the rest one by one.
            let q = mine.len() / 4;
            for i in 0..q {
                let panels: [usize; 4] = std::array::from_fn(|s| mine.start + s * q + i);
                for k0 in (0..g.k).step_by(KC) {
                    let t = Matvec4 {
                        // SAFETY: each panel < count(), k0 < k.
                        a: panels.map(|pn| unsafe { p.at(pn, k0) }),
                        b: packed.wrapping_add(k0 * nr),
                        // SAFETY: row pn * mr < m, column 0.
                        dst: panels.map(|pn| unsafe { self.dst(pn * mr, 0) }),
                        rows: panels.map(|pn| mr.min(g.m - pn * mr)),
                        depth: KC.min(g.k - k0),
                        load: k0 > 0,
                    };
                    // SAFETY: as the tiles below; the four panels are this thread's.
                    unsafe { run_matvec4(isa, p.value, &t) };
                }
            }
            for panel in mine.start + 4 * q..mine.end {
                for k0 in (0..g.k).step_by(KC) {
                    panel_block(k0, panel, None, true);
                }
            }
        } else if blocks == 1 {
            for panel in mine {
                for k0 in (0..g.k).step_by(KC) {
                    panel_block(k0, panel, None, true);
                }
            }
        } else {
            for k0 in (0..g.k).step_by(KC) {
                for panel in mine.clone() {
                    let next = (panel + 1 < mine.end).then_some(panel + 1);
                    panel_block(k0, panel, next, panel == mine.start);
                }
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "mul_mat {} x {} (panels {})",
            self.geo.src0.dtype,
            self.geo.src1.dtype,
            self.panels.isa.name()
        )
    }
}

/// The panels of weight `src0` for `isa`, packed now (for callers without a
/// [`super::packed::RepackCache`]: tests and benchmarks).
///
/// # Safety
/// `src0` is readable.
pub unsafe fn pack(src0: &RawTensor, isa: PanelIsa) -> Option<Arc<Panels>> {
    // SAFETY: forwarded.
    unsafe { pack::pack_weights(src0, isa) }.map(Arc::new)
}
