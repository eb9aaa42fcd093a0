//! Rows of any src dtype as f32: for src0 dtypes without their own kernel and
//! for src1 that is not f32.
//!
//! Invariant: the values are exactly `kernels::quant::dequantize_row`'s (f16
//! and bf16 widen exactly; quantized rows go through that very function).

use super::shape::Geometry;
use half::{bf16, f16};
use ir::DType;
use std::cell::RefCell;
use std::ops::Range;

thread_local! {
    /// One src1 row widened to f32 (kept across runs).
    static SRC1_ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Calls `f(r, values)` for each flat src1 row `r` in `rows` (row `j` of
/// batch `(b2, b3)` is `r = j + n * batch`), with the row's K values as f32:
/// packed f32 rows in place, every other row widened into a per-thread
/// buffer (the integer kernels' phase 1, before they quantize the row).
///
/// # Safety
/// `rows` is inside `0..geo.n * geo.batches()`; src1 is readable.
pub unsafe fn for_src1_rows(geo: &Geometry, rows: Range<usize>, mut f: impl FnMut(usize, &[f32])) {
    let packed_f32 = geo.src1.dtype == DType::F32 && geo.src1.nb[0] == 4;
    SRC1_ROW.with_borrow_mut(|buf| {
        for r in rows {
            let (j, (b2, b3)) = (r % geo.n, geo.batch_coords(r / geo.n));
            // SAFETY: j, b2, b3 are inside src1's extents (caller); a packed
            // f32 row is k aligned floats.
            let x: &[f32] = unsafe {
                let src = geo.src1_row(j, b2, b3);
                if packed_f32 {
                    std::slice::from_raw_parts(src as *const f32, geo.k)
                } else {
                    buf.resize(geo.k, 0.0);
                    row_to_f32(geo.src1.dtype, src, geo.src1.nb[0] as usize, buf);
                    buf
                }
            };
            f(r, x);
        }
    });
}

/// Writes the `out.len()` values of the row that starts at `src` (element
/// stride `nb0` bytes for plain dtypes; quantized rows are packed) as f32.
///
/// # Safety
/// `src` points to a readable row of `out.len()` values of `dtype` with that
/// stride; `dtype` is not I32 and quantized rows are whole blocks.
pub unsafe fn row_to_f32(dtype: DType, src: *const u8, nb0: usize, out: &mut [f32]) {
    let k = out.len();
    let size = dtype.block_bytes() as usize;
    if dtype.is_quantized() {
        let bytes = k / dtype.block_elems() as usize * size;
        // SAFETY: the row is `bytes` readable bytes by the caller's contract.
        let row = unsafe { std::slice::from_raw_parts(src, bytes) };
        #[cfg(target_arch = "x86_64")]
        if matches!(dtype, DType::Q8_0 | DType::Q4_0 | DType::Q4_1)
            && std::arch::is_x86_feature_detected!("avx2")
        {
            // SAFETY: avx2 was detected; `row` holds whole blocks of `dtype`.
            unsafe { x86::quant_row(dtype, row, out) };
            return;
        }
        kernels::quant::dequantize_row(dtype, row, out);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if dtype == DType::F16 && nb0 == 2 && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: f16c was detected; the row is readable by the caller's contract.
        unsafe { x86::f16_row(src, out) };
        return;
    }
    // Element x < k of the row (wrapping: only dereferenced for x < k, which
    // the caller guarantees readable).
    let at = |x: usize| src.wrapping_add(x * nb0);
    match dtype {
        DType::F32 => {
            for (x, o) in out.iter_mut().enumerate() {
                // SAFETY: see `at`; unaligned reads need no alignment.
                *o = unsafe { (at(x) as *const f32).read_unaligned() };
            }
        }
        DType::F16 => {
            for (x, o) in out.iter_mut().enumerate() {
                // SAFETY: see `at`.
                *o = f16::from_bits(unsafe { (at(x) as *const u16).read_unaligned() }).to_f32();
            }
        }
        DType::BF16 => {
            for (x, o) in out.iter_mut().enumerate() {
                // SAFETY: see `at`.
                *o = bf16::from_bits(unsafe { (at(x) as *const u16).read_unaligned() }).to_f32();
            }
        }
        other => unreachable!("row_to_f32: {other} rows are not converted (checked at prepare)"),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use half::f16;
    use ir::DType;
    use std::arch::x86_64::*;

    /// Q8_0, Q4_0 or Q4_1 blocks to f32, 8 values per instruction, with the
    /// reference's exact arithmetic: integers convert exactly, then one
    /// multiply by the scale and (Q4_1) one add of the minimum, each rounded
    /// once as the scalar code does (no FMA, which would round once for both).
    ///
    /// # Safety
    /// AVX2 is available; `row` holds `out.len() / 32` whole blocks of `dtype`,
    /// which is one of the three.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quant_row(dtype: DType, row: &[u8], out: &mut [f32]) {
        let size = dtype.block_bytes() as usize;
        for (block, out) in row.chunks_exact(size).zip(out.chunks_exact_mut(32)) {
            let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
            let o = out.as_mut_ptr();
            // SAFETY: `block` has `size` bytes and `out` 32 values; every
            // load and store below stays inside them.
            unsafe {
                let vd = _mm256_set1_ps(d);
                match dtype {
                    DType::Q8_0 => {
                        let qs = block.as_ptr().add(2);
                        for j in 0..4 {
                            let q = _mm_loadl_epi64(qs.add(8 * j) as *const __m128i);
                            let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                            _mm256_storeu_ps(o.add(8 * j), _mm256_mul_ps(v, vd));
                        }
                    }
                    DType::Q4_0 | DType::Q4_1 => {
                        let at = if dtype == DType::Q4_0 { 2 } else { 4 };
                        let qs = _mm_loadu_si128(block.as_ptr().add(at) as *const __m128i);
                        let mask = _mm_set1_epi8(0x0F);
                        // Bytes j: low nibbles are values j, high nibbles j + 16.
                        let low = _mm_and_si128(qs, mask);
                        let high = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
                        let offset = _mm256_set1_epi32(if dtype == DType::Q4_0 { 8 } else { 0 });
                        let m = if dtype == DType::Q4_1 {
                            f16::from_le_bytes([block[2], block[3]]).to_f32()
                        } else {
                            0.0
                        };
                        let vm = _mm256_set1_ps(m);
                        for (j, half) in
                            [low, _mm_srli_si128(low, 8), high, _mm_srli_si128(high, 8)]
                                .into_iter()
                                .enumerate()
                        {
                            let q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(half), offset);
                            let v = _mm256_mul_ps(_mm256_cvtepi32_ps(q), vd);
                            // Q4_0 has no minimum to add.
                            let v = if dtype == DType::Q4_1 {
                                _mm256_add_ps(v, vm)
                            } else {
                                v
                            };
                            _mm256_storeu_ps(o.add(8 * j), v);
                        }
                    }
                    _ => unreachable!("quant_row: {dtype} (callers pass Q8_0, Q4_0 or Q4_1)"),
                }
            }
        }
    }

    /// Packed f16 row to f32, 8 values per instruction.
    ///
    /// # Safety
    /// `src` holds `out.len()` f16 values.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn f16_row(src: *const u8, out: &mut [f32]) {
        let k = out.len();
        let mut x = 0;
        while x + 8 <= k {
            // SAFETY: values x..x + 8 are in the row and in `out`.
            unsafe {
                let h = _mm_loadu_si128(src.add(2 * x) as *const __m128i);
                _mm256_storeu_ps(out.as_mut_ptr().add(x), _mm256_cvtph_ps(h));
            }
            x += 8;
        }
        for (x, o) in out.iter_mut().enumerate().skip(x) {
            // SAFETY: x < k.
            *o =
                f16::from_bits(unsafe { (src.add(2 * x) as *const u16).read_unaligned() }).to_f32();
        }
    }
}
