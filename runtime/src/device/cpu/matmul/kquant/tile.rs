//! Tiles of dot products (weight rows x Q8_K columns) for one instruction
//! set and weight format, chosen once per kernel: [`full_tile`] gives a
//! monomorphic `R x C` kernel, [`edge_tile`] covers any smaller tile (the
//! edges of a matrix) with one-row kernels.

use super::q8k::Q8KRow;
use super::{Isa, kind, scalar};

/// A kernel for tiles of `R` weight rows x `C` activation rows.
///
/// # Safety
/// Each weight pointer points to `nb` blocks of the kernel's format (for
/// every set but [`Isa::Scalar`], repacked: [`super::repack`]), each
/// activation row has at least `nb` blocks (permuted alike), and the host
/// supports the kernel's instruction set.
pub type TileFn<const R: usize, const C: usize> =
    unsafe fn([*const u8; R], [Q8KRow; C], usize) -> [[f32; C]; R];

/// Scalar dot products, one per output.
///
/// # Safety
/// As [`TileFn`].
unsafe fn scalar_tile<const K: u8, const R: usize, const C: usize>(
    w: [*const u8; R],
    a: [Q8KRow; C],
    nb: usize,
) -> [[f32; C]; R] {
    // SAFETY: forwarded.
    std::array::from_fn(|r| std::array::from_fn(|c| unsafe { scalar::dot(K, w[r], a[c], nb) }))
}

/// The `R x C` kernel for `isa` and the weight format `kind`.
pub fn full_tile<const R: usize, const C: usize>(isa: Isa, kind: u8) -> TileFn<R, C> {
    use kind::{Q4_K, Q5_K, Q6_K};
    match (isa, kind) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, Q4_K) => super::avx2::tile::<Q4_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, Q5_K) => super::avx2::tile::<Q5_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, _) => super::avx2::tile::<Q6_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::AvxVnni, Q4_K) => super::avx2::tile_avx_vnni::<Q4_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::AvxVnni, Q5_K) => super::avx2::tile_avx_vnni::<Q5_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::AvxVnni, _) => super::avx2::tile_avx_vnni::<Q6_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512Vnni, Q4_K) => super::avx2::tile_vnni::<Q4_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512Vnni, Q5_K) => super::avx2::tile_vnni::<Q5_K, R, C>,
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512Vnni, _) => super::avx2::tile_vnni::<Q6_K, R, C>,
        (_, Q4_K) => scalar_tile::<Q4_K, R, C>,
        (_, Q5_K) => scalar_tile::<Q5_K, R, C>,
        _ => scalar_tile::<Q6_K, R, C>,
    }
}

/// Most columns one [`edge_tile`] kernel call takes.
pub const EDGE_MAX_C: usize = 8;

/// `out[..N] = dot(w, a[c])` for the first `N` columns of `a`, one
/// monomorphic kernel call.
///
/// # Safety
/// As [`TileFn`]; `a` has at least `N` columns, `out` at least `N` values.
unsafe fn row_of<const N: usize>(
    isa: Isa,
    kind: u8,
    w: *const u8,
    a: &[Q8KRow],
    nb: usize,
    out: &mut [f32],
) {
    let cols: [Q8KRow; N] = std::array::from_fn(|c| a[c]);
    // SAFETY: forwarded.
    let got = unsafe { full_tile::<1, N>(isa, kind)([w], cols, nb) };
    out[..N].copy_from_slice(&got[0]);
}

/// `out[r][c] = dot(w[r], a[c])` for any `w.len() <= R` and `a.len() <=
/// C`: the edges of a matrix, one row at a time in calls of up to
/// [`EDGE_MAX_C`] columns (so each weight block is unpacked once per call).
///
/// # Safety
/// As [`TileFn`], for every row of `w` and column of `a`.
pub unsafe fn edge_tile<const R: usize, const C: usize>(
    isa: Isa,
    kind: u8,
    w: &[*const u8],
    a: &[Q8KRow],
    nb: usize,
    out: &mut [[f32; C]; R],
) {
    for (r, &wr) in w.iter().enumerate() {
        for c0 in (0..a.len()).step_by(EDGE_MAX_C) {
            let (cols, o) = (&a[c0..], &mut out[r][c0..]);
            // SAFETY: forwarded; each call takes at most the columns left.
            unsafe {
                match cols.len().min(EDGE_MAX_C) {
                    1 => row_of::<1>(isa, kind, wr, cols, nb, o),
                    2 => row_of::<2>(isa, kind, wr, cols, nb, o),
                    3 => row_of::<3>(isa, kind, wr, cols, nb, o),
                    4 => row_of::<4>(isa, kind, wr, cols, nb, o),
                    5 => row_of::<5>(isa, kind, wr, cols, nb, o),
                    6 => row_of::<6>(isa, kind, wr, cols, nb, o),
                    7 => row_of::<7>(isa, kind, wr, cols, nb, o),
                    _ => row_of::<8>(isa, kind, wr, cols, nb, o),
                }
            }
        }
    }
}
