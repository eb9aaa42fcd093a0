//! mul_mat with Q4_K, Q5_K or Q6_K weights: integer dot products against
//! activations quantized to Q8_K ([`q8k`]).
//!
//! Phase 1: every src1 row is quantized once per run into the shared scratch
//! (rows split over the threads). Barrier. Phase 2: each thread takes a
//! range of dst rows (weight rows, so each weight byte is read by one
//! thread), through [`Split`]:
//! - N <= [`MATVEC_MAX_C`] (decode): tiles of [`MATVEC_R`] rows x all N
//!   columns, the rows taken from [`MATVEC_R`] equal parts of the thread's
//!   range so that the weights stream from that many places at once (as
//!   `quantized` does: one core keeps more reads in flight);
//! - otherwise (prefill): chunks of rows that stay in L2 ([`CHUNK_BYTES`]),
//!   all columns swept per chunk in tiles of [`PREFILL_R`] x [`PREFILL_C`],
//!   so each weight block is unpacked once per [`PREFILL_C`] columns;
//!   leftover columns go through one-row tiles of their count
//!   ([`tile::edge_tile`]).
//!
//! Dot products ([`tile`]): AVX2 (+FMA) where the host has it, with
//! AVX512-VNNI's or AVX-VNNI's `vpdpbusd` where it has that too (`avx2`), on
//! weights repacked at load and activations permuted alike ([`repack`]); the
//! portable [`scalar`] code otherwise, on the stored layout (also the tests'
//! oracle). [`Isa::detect`] picks.
//!
//! Tile shapes, measured (one thread, 2-core Zen 4, ns per super-block and
//! column with the weights in L2, 2026-11-25): 1 x 8 beat 1 x 4, 2 x 4,
//! 4 x 2 and 1 x 6 for every format (Q4_K 3.4 ns AVX2, 2.9 VNNI, against
//! 4.0 to 4.7); for one column, 4 x 1 reads four streams, which from memory
//! was as fast as 2 or faster than 1 (AVX2, 4096 x 4096 Q4_K 20.6 / 21.2 /
//! 18.5 GB/s, a noisy 2-core host), and with VNNI its four rows run
//! interleaved (`avx2`): 4.6 ns against 5.8 for 1 x 1. Four consecutive
//! rows per tile instead (one stream) were tried on an Intel Xeon with
//! AVX-512 VNNI (2026-11-27, `benches/matmul.rs`, GB/s of weights, 1 / 2
//! threads, alternating runs): 4096 x 4096 Q4_K 7.3-7.5 / 11.9-15.3 against
//! 12.0-13.0 / 29.1-39.7 with four streams; SmolLM2's `ffn_down` (1536 x 576)
//! 5.8-6.4 / 14.1-21.6 against 11.9-12.0 / 19.7-27.7 (Q4_1 repacked, same
//! runs: 13.0-13.2 / 37.5-45.8). So the streams stay. Why the K-quant tiles
//! gained less from a second thread than Q4_1's lanes (found 2026-11-27):
//! with the weights in L2 one thread ran them at half the lane kernel's
//! rate (instruction-bound), so on two threads, where the L3 feeds more
//! than one core takes, they ran out of compute first; and the stored
//! tensors sat on 4 KiB pages, where Q4_1's repacked copies sit on huge
//! pages. The SIMD tiles now read weights repacked ([`repack`]; figures in
//! `avx2`'s doc).
//!
//! Integer bounds (why i16 and i32 suffice): Q8_K quants lie in -127..=127
//! and their sums of 16 in -2032..=2032; weight quants are unsigned (Q4_K
//! 0..=15, Q5_K 0..=31, Q6_K 0..=63, its offset of 32 taken off through the
//! sums), so a `maddubs` pair is at most 2 * 63 * 127 = 16002 < 2^15. Per
//! super-block, Q5_K's scaled sum is at most 256 * 63 * 31 * 127 < 2^26 and
//! its minimum term 8 * 63 * 4064 < 2^21; Q6_K's (signed 8-bit scales)
//! `256 * 128 * 63 * 127 + 32 * 16 * 128 * 2032 < 2^29`. So every integer
//! sum of one super-block is exact; only the f32 work per block rounds.
//!
//! Invariants:
//! - a [`KQuantMatMul`] exists only for Q4_K, Q5_K or Q6_K src0 with K a
//!   multiple of 256, an instruction set the host has and, for every set but
//!   the scalar one, a repacked copy of src0 (checked in
//!   [`KQuantMatMul::with_isa`]); a run never fails or panics;
//! - scratch holds one Q8_K row ([`q8k::row_bytes`]) per src1 row of every
//!   batch, written in phase 1 and only read in phase 2; its quants are in
//!   [`repack`]'s order exactly when the weights are repacked (SIMD sets);
//! - each thread writes only the dst rows of its items.

#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod kind;
pub mod q8k;
pub mod repack;
pub mod scalar;
pub mod scales;
pub mod tile;

use super::convert::for_src1_rows;
use super::packed::{PackedWeights, RepackCache};
use super::shape::Geometry;
use super::split::Split;
use super::unsupported;
use crate::RuntimeError;
use crate::device::cpu::{CpuKernel, ThreadCtx};
use q8k::{Q8KRow, QK_K};
use std::ops::Range;
use std::sync::Arc;
use tile::{edge_tile, full_tile};

pub use kind::weight_kind;

/// An instruction set for the K-quant kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust.
    Scalar,
    /// AVX2 + FMA.
    Avx2,
    /// The AVX2 kernels with AVX-VNNI's `vpdpbusd` (the VEX form: hosts
    /// without AVX-512).
    AvxVnni,
    /// The AVX2 kernels with AVX512-VNNI's 256-bit `vpdpbusd` and
    /// AVX512-VL's `vpternlogd` (needs AVX512-F, -VNNI and -VL).
    Avx512Vnni,
}

impl Isa {
    /// The best set this host has. Measured on this repository's 2-core
    /// Zen 4 host (one thread, weights in L2): VNNI ran prefill tiles
    /// 15-20 % faster than plain AVX2 and, rows interleaved, matrix-vector
    /// tiles 10-25 % faster, so it is preferred where present.
    ///
    /// Without AVX-512, AVX-VNNI where present (figures in docs/performance.md, "AVX-VNNI").
    ///
    /// `GGPLAN_KQUANT_ISA` (`scalar`, `avx2`, `avxvnni`, `avx512vnni`) names another
    /// set the host has, to compare them on one machine; a name the host
    /// lacks is ignored.
    pub fn detect() -> Isa {
        let available = Isa::available();
        let wanted = std::env::var("GGPLAN_KQUANT_ISA")
            .ok()
            .and_then(|name| available.iter().copied().find(|isa| isa.label() == name));
        wanted.unwrap_or(*available.last().unwrap_or(&Isa::Scalar))
    }

    /// Every set the host supports, weakest first (tests run them all).
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") {
                v.push(Isa::Avx2);
                if has!("avxvnni") {
                    v.push(Isa::AvxVnni);
                }
                if has!("avx512f") && has!("avx512vnni") && has!("avx512vl") {
                    v.push(Isa::Avx512Vnni);
                }
            }
        }
        v
    }

    /// The name [`KQuantMatMul::describe`] gives (and `GGPLAN_KQUANT_ISA`
    /// takes).
    pub fn label(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }
}

/// Most src1 columns taken by the matrix-vector kernels.
pub const MATVEC_MAX_C: usize = 4;
/// Weight rows per matrix-vector tile (and weight streams per thread).
pub const MATVEC_R: usize = 4;
/// Weight rows per prefill tile.
pub const PREFILL_R: usize = 1;
/// src1 columns per prefill tile.
pub const PREFILL_C: usize = 8;
/// Weight bytes per prefill row chunk: the chunk stays in L2 while all
/// columns pass.
pub const CHUNK_BYTES: usize = 256 << 10;

/// The prepared kernel.
pub struct KQuantMatMul {
    geo: Geometry,
    kind: u8,
    isa: Isa,
    /// Bytes of one quantized src1 row.
    qrow_bytes: usize,
    /// src0 repacked for the SIMD tiles ([`repack`]); `None` with the
    /// scalar set, which reads src0 in place.
    packed: Option<Arc<PackedWeights>>,
}

impl KQuantMatMul {
    /// A kernel for `geo` with the host's best instruction set, src0
    /// repacked through `repack` ([`KQuantMatMul::with_isa`]).
    ///
    /// # Safety
    /// With `repack`, src0's bytes are readable now and never change while
    /// the kernel lives.
    pub unsafe fn new(
        geo: Geometry,
        repack: Option<&RepackCache>,
    ) -> Result<Option<KQuantMatMul>, RuntimeError> {
        // SAFETY: forwarded.
        unsafe { KQuantMatMul::with_isa(geo, Isa::detect(), repack) }
    }

    /// A kernel that uses `isa` (tests compare every set the host has). The
    /// SIMD sets read src0 repacked ([`repack`]): `None` when `repack` is
    /// `None` or cannot make the copy (no memory, src0 not contiguous), so
    /// the caller can read src0 another way.
    /// Errors: src0 is not Q4_K, Q5_K or Q6_K, K is not a multiple of 256,
    /// or the host lacks `isa`.
    ///
    /// # Safety
    /// As [`KQuantMatMul::new`].
    pub unsafe fn with_isa(
        geo: Geometry,
        isa: Isa,
        repack: Option<&RepackCache>,
    ) -> Result<Option<KQuantMatMul>, RuntimeError> {
        let Some(kind) = weight_kind(geo.src0.dtype) else {
            return Err(unsupported(format!(
                "the K-quant route needs Q4_K, Q5_K or Q6_K weights, not {}",
                geo.src0.dtype
            )));
        };
        if !geo.k.is_multiple_of(QK_K) {
            return Err(unsupported(format!(
                "the K-quant route needs K a multiple of {QK_K}, not {}",
                geo.k
            )));
        }
        if !Isa::available().contains(&isa) {
            return Err(unsupported(format!("the host lacks {isa:?}")));
        }
        let packed = match (isa, repack) {
            (Isa::Scalar, _) => None,
            // SAFETY: src0 is readable and never changes (caller's contract).
            (_, Some(cache)) => match unsafe { cache.get(&geo.src0) } {
                Some(copy) => Some(copy),
                None => return Ok(None),
            },
            (_, None) => return Ok(None),
        };
        Ok(Some(KQuantMatMul {
            geo,
            kind,
            isa,
            qrow_bytes: q8k::row_bytes(geo.k),
            packed,
        }))
    }

    /// The first byte of row 0 of batch (`b2`, `b3`) as the tiles read it:
    /// in the repacked copy when there is one.
    ///
    /// # Safety
    /// (`b2`, `b3`) is a batch of src0.
    unsafe fn weight_rows(&self, b2: usize, b3: usize) -> *const u8 {
        // SAFETY: row 0 of the batch is inside src0, and the copy has
        // src0's rows at the same offsets.
        unsafe {
            let row = self.geo.src0_row(0, b2, b3);
            match &self.packed {
                Some(copy) => copy.row(row),
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
            let out = scratch.wrapping_add(r * self.qrow_bytes);
            // SAFETY: quantized row r lies inside the scratch; only this
            // thread writes it; the host has self.isa (checked at new).
            unsafe { q8k::quantize_row(x, out, self.isa) };
            if self.packed.is_some() {
                // The repacked weights' order ([`repack`]); the row's
                // quants are its first `k` bytes.
                // SAFETY: as above.
                let qs = unsafe { std::slice::from_raw_parts_mut(out as *mut i8, x.len()) };
                for block in qs.chunks_exact_mut(QK_K) {
                    repack::permute_activations(self.kind, block);
                }
            }
        };
        // SAFETY: this thread's share of src1's rows.
        unsafe { for_src1_rows(&self.geo, rows, quantize) };
    }

    /// Quantized column `j` of batch `b`.
    ///
    /// # Safety
    /// `j < n`, `b` a batch; `scratch` holds the quantized src1 of phase 1.
    unsafe fn column(&self, scratch: *const u8, b: usize, j: usize) -> Q8KRow {
        // SAFETY: row b n + j of the scratch (caller's contract).
        unsafe {
            Q8KRow::at(
                scratch.add((b * self.geo.n + j) * self.qrow_bytes),
                self.geo.k,
            )
        }
    }

    /// dst rows `rows` of batch `b`, every column.
    ///
    /// # Safety
    /// `rows` is inside M; `scratch` holds the quantized src1 of phase 1.
    unsafe fn rows(&self, b: usize, rows: Range<usize>, scratch: *const u8) {
        // SAFETY: forwarded.
        unsafe {
            match self.geo.n {
                1 => self.matvec::<1>(b, rows, scratch),
                2 => self.matvec::<2>(b, rows, scratch),
                3 => self.matvec::<3>(b, rows, scratch),
                4 => self.matvec::<4>(b, rows, scratch),
                _ => self.prefill(b, rows, scratch),
            }
        }
    }

    /// [`KQuantMatMul::rows`] for `C` = N <= [`MATVEC_MAX_C`] columns: the
    /// tiles' rows come from [`MATVEC_R`] equal parts of the range.
    ///
    /// # Safety
    /// As [`KQuantMatMul::rows`], with `C == N`.
    unsafe fn matvec<const C: usize>(&self, b: usize, rows: Range<usize>, scratch: *const u8) {
        let g = &self.geo;
        let (b2, b3) = g.batch_coords(b);
        let nb = g.k / QK_K;
        // SAFETY: the columns of batch b were quantized in phase 1.
        let a: [Q8KRow; C] = std::array::from_fn(|c| unsafe { self.column(scratch, b, c) });
        // Row i at w0 + i * nb1, dst (i, c) at dst0[c] + i * nb0 (in f32).
        // SAFETY: row 0 and the C columns are inside the extents.
        let (w0, dst0) = unsafe {
            let dst0: [*mut f32; C] = std::array::from_fn(|c| g.dst_at(0, c, b2, b3));
            (self.weight_rows(b2, b3), dst0)
        };
        let (nb1, nb0) = (g.src0.nb[1] as usize, g.dst.nb[0] as usize / 4);
        let full = full_tile::<MATVEC_R, C>(self.isa, self.kind);
        let part = rows.len() / MATVEC_R;
        for t in 0..part {
            let first: [usize; MATVEC_R] = std::array::from_fn(|r| rows.start + r * part + t);
            let w = first.map(|i| w0.wrapping_add(i * nb1));
            // SAFETY: rows first[..] are inside M, nb blocks each; `full`
            // was chosen for this kernel's isa (which the host has) and kind.
            let out = unsafe { full(w, a, nb) };
            for r in 0..MATVEC_R {
                for c in 0..C {
                    // SAFETY: inside dst; this thread owns these rows.
                    unsafe { *dst0[c].add(first[r] * nb0) = out[r][c] };
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
                unsafe { *dst0[c].add(i * nb0) = out[r][c] };
            }
        }
    }

    /// [`KQuantMatMul::rows`] for N > [`MATVEC_MAX_C`]: chunks of rows that
    /// stay in L2, every column swept per chunk in tiles of [`PREFILL_R`] x
    /// [`PREFILL_C`].
    ///
    /// # Safety
    /// As [`KQuantMatMul::rows`].
    unsafe fn prefill(&self, b: usize, rows: Range<usize>, scratch: *const u8) {
        const R: usize = PREFILL_R;
        const C: usize = PREFILL_C;
        let g = &self.geo;
        let (b2, b3) = g.batch_coords(b);
        let nb = g.k / QK_K;
        let row_bytes = nb * kind::block_bytes(self.kind);
        let chunk = (CHUNK_BYTES / row_bytes).clamp(R, 256) / R * R;
        // SAFETY: row 0 and dst (0, 0) are inside the extents.
        let (w0, dst0) = unsafe { (self.weight_rows(b2, b3), g.dst_at(0, 0, b2, b3)) };
        let nb1 = g.src0.nb[1] as usize;
        let (di, dj) = (g.dst.nb[0] as usize / 4, g.dst.nb[1] as usize / 4);
        let full = full_tile::<R, C>(self.isa, self.kind);
        let mut out = [[0f32; C]; R];
        for c0 in rows.clone().step_by(chunk) {
            let c1 = (c0 + chunk).min(rows.end);
            for j0 in (0..g.n).step_by(C) {
                let nc = C.min(g.n - j0);
                // SAFETY: columns j0..j0 + nc of batch b were quantized in
                // phase 1 (the last one stands in for missing columns).
                let a: [Q8KRow; C] = std::array::from_fn(|c| unsafe {
                    self.column(scratch, b, (j0 + c).min(g.n - 1))
                });
                for i0 in (c0..c1).step_by(R) {
                    let nr = R.min(c1 - i0);
                    let w: [*const u8; R] =
                        std::array::from_fn(|r| w0.wrapping_add((i0 + r).min(c1 - 1) * nb1));
                    // SAFETY: rows i0..i0 + nr are inside M, nb blocks each;
                    // the kernels match self.isa (which the host has) and kind.
                    unsafe {
                        if nr == R && nc == C {
                            out = full(w, a, nb);
                        } else {
                            edge_tile(self.isa, self.kind, &w[..nr], &a[..nc], nb, &mut out);
                        }
                    }
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
}

impl CpuKernel for KQuantMatMul {
    fn scratch_bytes(&self) -> usize {
        self.qrow_bytes * self.geo.n * self.geo.batches()
    }

    unsafe fn run(&self, ctx: &ThreadCtx<'_>, scratch: *mut u8) {
        // SAFETY: scratch is scratch_bytes() bytes aligned to 64 (caller's contract).
        unsafe { self.quantize_src1(ctx, scratch) };
        ctx.barrier();
        let g = &self.geo;
        let split = Split::new(g.batches(), g.m, g.n, ctx.nth, 4 * MATVEC_R, true);
        for it in ctx.share(split.items()) {
            let (b, rows) = split.item(it);
            // SAFETY: the item's rows are inside M; phase 1 is complete.
            unsafe { self.rows(b, rows, scratch) };
        }
    }

    fn describe(&self) -> String {
        format!(
            "mul_mat {} x {} (int8 {}{})",
            self.geo.src0.dtype,
            self.geo.src1.dtype,
            self.isa.label(),
            if self.packed.is_some() {
                ", repacked"
            } else {
                ""
            }
        )
    }
}
