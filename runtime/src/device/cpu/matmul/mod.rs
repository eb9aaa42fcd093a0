//! mul_mat on the CPU: `dst[i, j, b2, b3] = dot(src0 row i of matrix
//! (b2 / r2, b3 / r3), src1 row j of matrix (b2, b3))` with src0 `[K, M, ne02,
//! ne03]`, src1 `[K, N, ne12, ne13]`, dst `[M, N, ne12, ne13]` f32, `r2 =
//! ne12 / ne02`, `r3 = ne13 / ne03` (src0 broadcast over src1's batches).
//!
//! Kernels ([`Route`]), chosen once at prepare time by src0's dtype, the
//! precision asked for and, for quantized src0, the number of src1 columns
//! ([`route`]: few columns take the integer route, many the f32 one):
//! - [`quantized`] (Q8_0, Q4_0, Q4_1 src0; Q5_0, Q5_1 weights where the
//!   host repacks them): src1 is quantized once per run to
//!   8-bit blocks of 32 ([`q8`]) into the shared scratch (phase 1, rows split
//!   over threads), then integer dot products in tiles of src0 rows x src1
//!   columns ([`qdot`], SIMD chosen at run time: AVX-512, AVX2 or scalar);
//!   weights are repacked once at load for AVX2 ([`packed`]);
//! - [`kquant`] (Q4_K, Q5_K, Q6_K src0): src1 quantized once per run to
//!   Q8_K blocks of 256 (phase 1), then integer dot products per
//!   super-block with the scales applied per sub-block (AVX2, AVX2 with
//!   AVX512-VNNI, or scalar), in tiles of 4 rows x N for N <= 4 (decode)
//!   and 1 row x 8 columns beyond;
//! - [`panel`] (F32, F16 and BF16 weights on hosts with AVX2 or AVX-512):
//!   weights packed once at load into panels, our own register-tiled f32
//!   micro-kernels;
//! - [`float`] (every other dtype, Q8_0 / Q4_0 / Q4_1 src0 times many
//!   columns, and every quantized src0 in [`Precision::Exact`]):
//!   the `gemm` crate on f32, reading f32
//!   operands in place through their strides (so permuted views cost no copy)
//!   and converting anything else to f32 first ([`convert`]).
//!
//! Invariants:
//! - shapes and dtypes are checked once in [`prepare_mul_mat`] (the same rule
//!   as `ir::rules`); a prepared kernel never fails at run time;
//! - every thread writes only its own dst elements, whose choice depends only
//!   on `(ith, nth)` ([`split`]), so results do not depend on scheduling;
//! - no kernel panics between barriers (all checks happen at prepare time).

pub mod convert;
pub mod float;
pub mod isa;
pub mod kind;
pub mod kquant;
pub mod packed;
pub mod panel;
pub(crate) mod prefetch;
pub mod q8;
pub mod qdot;
pub mod quantized;
pub mod shape;
pub mod split;

#[cfg(test)]
mod tests;

use super::{CpuKernel, RawTensor};
use crate::RuntimeError;
use ir::DType;
use shape::Geometry;

/// Prepares `dst = mul_mat(src0, src1)` for one plan step (tensor addresses
/// baked in). Errors name the dtypes or shapes that are not supported.
pub fn prepare_mul_mat(
    dst: RawTensor,
    src0: RawTensor,
    src1: RawTensor,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    prepare_mul_mat_with(dst, src0, src1, Precision::Fast)
}

/// How quantized weights meet f32 activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// Activations quantized to 8 bits, integer dot products (as llama.cpp).
    #[default]
    Fast,
    /// Weights dequantized to f32 and multiplied in f32: the same function as
    /// the dequantized model (what the fp64 references compute).
    Exact,
}

/// The kernel family of one mul_mat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// src1 quantized to 8 bits, integer dot products ([`quantized`]); only
    /// for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 src0.
    Int8Dot,
    /// src1 quantized to Q8_K, integer dot products with K-quant weights
    /// ([`kquant`]); only for Q4_K, Q5_K and Q6_K src0.
    KQuantDot,
    /// src0 (and src1) widened to f32 in blocks, then `gemm` ([`float`]).
    F32Gemm,
    /// A weight packed in panels at load, our micro-kernels ([`panel`]); for
    /// F32, F16 and BF16 weights only. [`route`] never returns it: a product
    /// on the f32 route takes it when src0 is a weight ([`prepare_mul_mat_weights`]).
    F32Panels,
}

/// From this many src1 columns on, quantized weights of `dtype` take the f32
/// route in [`Precision::Fast`] too: widening a block of weight rows costs
/// O(K) per row against O(K N) multiply-adds, and gemm's f32 micro-kernels
/// then run near the FMA peak, above the integer tiles. Below it, reading the
/// packed weights once (decode) wins. Measured with the crossover rows of
/// `benches/matmul.rs` (2-core AMD EPYC, AVX2, one thread, FMA peak 104
/// GFLOP/s, 2026-11-22, after the repacked integer kernels): Q4_1 576x1536
/// int8 84-86 GFLOP/s flat from N = 2, f32 79 at N = 128, 87 at 256 and 91
/// at 512; Q8_0 576x4096 int8 66-68, f32 66 at N = 48 and 72 at 64.
///
/// K-quants never take it (`usize::MAX`): their integer tiles outrun the
/// FMA peak that bounds gemm. Measured with the same rows (K-quant 1536 x
/// 1536, one thread, FMA peak 118 GFLOP/s with AVX-512, 2026-11-25): int8
/// Q4_K / Q5_K / Q6_K (AVX512-VNNI kernels) 152-160 / 146-154 / 148-154
/// GFLOP/s from N = 8 to 2048, f32 90 / 89 / 88 at N = 512 and 95-100 at
/// N = 2048; the plain AVX2 kernels (`GGPLAN_KQUANT_ISA=avx2`) ran
/// 128-138 / 113-122 / 120-127 from N = 64 to 2048 against f32 at most
/// 97 / 96 / 102. Below N = 8 gemm is 3 to 17 times slower still.
///
/// With the AVX512-VNNI lane kernel (the default where the host has it,
/// [`qdot::Isa::detect`]) the integer route holds longer. Same rows, 2-core
/// Zen 4, one thread, FMA peak 118 GFLOP/s, 2026-11-25: Q4_1 576x1536 int8
/// 114-122 GFLOP/s from N = 1 to 512, f32 97 at N = 128, 105 at 256, 107 at
/// 512; Q8_0 576x4096 int8 106-108, f32 96 at 128, 105 at 256, 107 at 384,
/// 108 at 512 (and gemm runs 59 GFLOP/s on 1536x576 at N = 128).
///
/// Hosts whose cores run 512-bit FMAs at full width ([`full_width_fma512`])
/// give gemm twice Zen 4's f32 peak, and it overtakes the integer lanes much
/// sooner. Same rows, 2-core Intel Xeon (family 6 model 207), one thread,
/// FMA peak 179-185 GFLOP/s, 2026-11-26: Q4_1 int8 94-107 GFLOP/s from N = 1,
/// f32 96 at 48, 111 at 64, 132 at 128, 154 at 256; Q8_0 int8 82-88, f32 84
/// at 32, 105 at 48, 140 at 128; Q5_0 / Q5_1 int8 62-68 from N = 2 (72-80
/// with the byte masks of `qdot::avx2_lane`), f32 61 at 64, 78 at 96, 91 at
/// 128. K-quants still keep their integer route there
/// (N = 128: int8 103-125 GFLOP/s, f32 85-98).
///
/// AVX-VNNI hosts without AVX-512 (Intel client cores from Alder Lake on):
/// their integer lanes are 256-bit VNNI and gemm runs AVX2. Measured on the
/// same Xeon, whose cores are Golden Cove like Alder Lake's performance
/// cores, as such a host: `gemm` built without its AVX-512 kernels and the
/// lane kernel forced to AVX-VNNI (`GGPLAN_QDOT_ISA=avxvnni`), one thread,
/// 2026-11-27, two runs (AVX-512 FMA peak 179 GFLOP/s; AVX2 has half): Q4_1
/// int8 83-85 GFLOP/s from N = 4, f32 72 at 128, 78 at 256, 81-82 at 512;
/// Q8_0 int8 79-81 at 256 against f32 78, at 384 int8 78 against f32 80;
/// Q5_0 / Q5_1 int8 74-76 against f32 74 at 384 (Q5_1 tied there), f32
/// 76-77 at 512. So the AVX512-VNNI thresholds hold for Q4 and Q8_0, and Q5
/// keeps its integer route to 512.
///
/// Q5_0 / Q5_1 thresholds elsewhere (256 with AVX512-VNNI on Zen 4, 64
/// without VNNI) are guesses, set below the Q4 ones because Q5's int8 route
/// ran a quarter to a third slower than Q4_1's on the Xeon.
pub fn f32_route_min_columns(dtype: DType) -> usize {
    let isa = qdot::Isa::detect();
    route_threshold(dtype, isa, full_width_fma512())
}

/// [`f32_route_min_columns`] for a host whose lane kernel is `isa` and whose
/// cores run 512-bit FMAs at full width or not.
fn route_threshold(dtype: DType, isa: qdot::Isa, full_width: bool) -> usize {
    let avx512_vnni = isa == qdot::Isa::Avx512 { vnni: true };
    let vnni = avx512_vnni || isa == qdot::Isa::AvxVnni;
    let wide = avx512_vnni && full_width;
    let five_bit = matches!(dtype, DType::Q5_0 | DType::Q5_1);
    match dtype {
        DType::Q4_K | DType::Q5_K | DType::Q6_K => usize::MAX,
        _ if wide && five_bit => 96,
        _ if five_bit && isa == qdot::Isa::AvxVnni => 512,
        _ if five_bit && vnni => 256,
        _ if five_bit => 64,
        DType::Q8_0 if wide => 48,
        DType::Q8_0 if vnni => 384,
        DType::Q8_0 => 56,
        _ if wide => 64,
        _ if vnni => 512,
        _ => 192,
    }
}

/// Whether this host's cores execute 512-bit FMAs at full width (so the f32
/// peak with AVX-512 is twice the AVX2 one): Intel cores with AVX-512 (two
/// 512-bit FMA ports on the server parts this targets) and AMD from Zen 5
/// (family 0x1A) on; not Zen 4 (family 0x19), which splits each 512-bit
/// operation into two 256-bit halves. Read from `cpuid`, so the same host
/// always takes the same routes (and gives the same bits).
pub fn full_width_fma512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return false;
        }
        let (vendor, family) = cpu_vendor_family();
        match &vendor {
            b"GenuineIntel" => true,
            b"AuthenticAMD" => family >= 0x1A,
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether this host is an Intel one (`cpuid`'s vendor string).
pub(crate) fn intel_host() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        &cpu_vendor_family().0 == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `cpuid`'s vendor string and the processor's family (base family plus
/// extended family where the base is 0xF).
#[cfg(target_arch = "x86_64")]
fn cpu_vendor_family() -> ([u8; 12], u32) {
    use std::arch::x86_64::__cpuid;
    // cpuid leaves 0 and 1 exist on every x86_64 processor.
    let (vendor, signature) = (__cpuid(0), __cpuid(1).eax);
    let mut name = [0u8; 12];
    for (i, r) in [vendor.ebx, vendor.edx, vendor.ecx].iter().enumerate() {
        name[4 * i..4 * i + 4].copy_from_slice(&r.to_le_bytes());
    }
    let base = (signature >> 8) & 0xF;
    let family = if base == 0xF {
        base + ((signature >> 20) & 0xFF)
    } else {
        base
    };
    (name, family)
}

/// The route [`prepare_mul_mat_with`] takes for src0 of `dtype` times `n`
/// src1 columns per matrix.
pub fn route(dtype: DType, n: usize, precision: Precision) -> Route {
    let fast = precision == Precision::Fast && n < f32_route_min_columns(dtype);
    match dtype {
        DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 if fast => {
            Route::Int8Dot
        }
        DType::Q4_K | DType::Q5_K | DType::Q6_K if fast => Route::KQuantDot,
        _ => Route::F32Gemm,
    }
}

/// [`prepare_mul_mat`] with the quantized route chosen by `precision` and
/// the number of src1 columns ([`route`]).
pub fn prepare_mul_mat_with(
    dst: RawTensor,
    src0: RawTensor,
    src1: RawTensor,
    precision: Precision,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    // SAFETY: no repacking, so nothing is read now.
    unsafe { prepare(dst, src0, src1, precision, None) }
}

/// [`prepare_mul_mat_with`] for a src0 that never changes (a weight): the
/// kernel may read a copy of it repacked now through `repack` ([`packed`]).
///
/// # Safety
/// src0's bytes are readable now and never change while the kernel lives.
pub unsafe fn prepare_mul_mat_weights(
    dst: RawTensor,
    src0: RawTensor,
    src1: RawTensor,
    precision: Precision,
    repack: &packed::RepackCache,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    // SAFETY: forwarded.
    unsafe { prepare(dst, src0, src1, precision, Some(repack)) }
}

/// Both of the above.
///
/// # Safety
/// With `repack`, as [`prepare_mul_mat_weights`].
unsafe fn prepare(
    dst: RawTensor,
    src0: RawTensor,
    src1: RawTensor,
    precision: Precision,
    repack: Option<&packed::RepackCache>,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    let geo = Geometry::new(dst, src0, src1)?;
    let mut chosen = route(src0.dtype, geo.n, precision);
    // Q5 rows have SIMD kernels only repacked (`qdot`); read in place they
    // would take the scalar ones, slower than widening them for gemm.
    if chosen == Route::Int8Dot
        && matches!(src0.dtype, DType::Q5_0 | DType::Q5_1)
        && (repack.is_none() || !qdot::Isa::detect().repacks())
    {
        chosen = Route::F32Gemm;
    }
    if chosen == Route::F32Gemm
        && repack.is_some()
        && panel::applies(&geo)
        && panel::PanelIsa::detect().is_some()
    {
        chosen = Route::F32Panels;
    }
    // SAFETY: forwarded.
    unsafe { prepare_route(geo, chosen, repack) }
}

/// `dst = mul_mat(src0, src1)` on the given route (benchmarks and tests
/// compare the routes; [`Route::Int8Dot`] needs a Q8_0, Q4_0 or Q4_1 src0),
/// with src0 repacked through `repack` when given.
///
/// # Safety
/// With `repack`, as [`prepare_mul_mat_weights`].
pub unsafe fn prepare_mul_mat_on(
    dst: RawTensor,
    src0: RawTensor,
    src1: RawTensor,
    route: Route,
    repack: Option<&packed::RepackCache>,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    // SAFETY: forwarded.
    unsafe { prepare_route(Geometry::new(dst, src0, src1)?, route, repack) }
}

/// The kernel of `route` for `geo`.
///
/// # Safety
/// With `repack`, as [`prepare_mul_mat_weights`].
unsafe fn prepare_route(
    geo: Geometry,
    route: Route,
    repack: Option<&packed::RepackCache>,
) -> Result<Box<dyn CpuKernel>, RuntimeError> {
    Ok(match route {
        Route::Int8Dot => {
            if qdot::weight_kind(geo.src0.dtype).is_none() {
                return Err(unsupported(format!(
                    "the int8 route needs Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 weights, not {}",
                    geo.src0.dtype
                )));
            }
            // SAFETY: forwarded.
            Box::new(unsafe { quantized::QuantMatMul::new(geo, repack) })
        }
        // SAFETY: forwarded.
        Route::KQuantDot => match unsafe { kquant::KQuantMatMul::new(geo, repack)? } {
            Some(kernel) => Box::new(kernel),
            // The SIMD tiles read src0 repacked at load; without a copy (src0
            // is not a weight, or no memory for one) gemm reads it in place.
            None => Box::new(float::GemmMatMul::new(geo)),
        },
        Route::F32Gemm => Box::new(float::GemmMatMul::new(geo)),
        Route::F32Panels => {
            let isa = panel::PanelIsa::detect()
                .ok_or_else(|| unsupported("the panel route needs AVX2 and FMA".into()))?;
            if !panel::applies(&geo) {
                return Err(unsupported(format!(
                    "the panel route needs a 2-D F32, F16 or BF16 weight and a dst contiguous along M, not {} {}",
                    geo.src0.dtype,
                    ir::layout::fmt_ne(&geo.src0.ne)
                )));
            }
            // SAFETY: src0 is readable now and never changes (forwarded).
            let panels = unsafe {
                match repack {
                    Some(cache) => cache.panels(&geo.src0, isa),
                    None => panel::pack(&geo.src0, isa),
                }
            };
            match panels {
                Some(p) => Box::new(panel::PanelMatMul::new(geo, p)),
                // No memory for the panels: gemm reads the weight in place.
                None => Box::new(float::GemmMatMul::new(geo)),
            }
        }
    })
}

/// The error for anything [`prepare_mul_mat`] refuses.
fn unsupported(detail: String) -> RuntimeError {
    RuntimeError::Unsupported {
        op: "mul_mat".into(),
        detail,
    }
}
