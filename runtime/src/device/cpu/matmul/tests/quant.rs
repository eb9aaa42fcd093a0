//! The integer route (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 weights) through every instruction set
//! the host has, the scalar one included. The reference multiplies the same
//! quantized weights in f64; the 8-bit activations are the only extra error.

use super::{Buf, Route, Tensor, check};
use crate::device::cpu::matmul::q8;
use crate::device::cpu::matmul::qdot::Isa;
use ir::DType;
use kernels::testing::Rng;

const QUANTS: [DType; 5] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
];

fn routes() -> Vec<Route> {
    let mut v: Vec<Route> = Isa::available()
        .into_iter()
        .flat_map(|isa| [Route::Quant(isa, false), Route::Quant(isa, true)])
        .collect();
    v.push(Route::Default);
    v
}

#[test]
fn quantized_odd_sizes_every_isa() {
    let mut rng = Rng::new(10);
    for t in QUANTS {
        // At least ~15 outputs per case: the NMSE of a single output is the
        // squared relative error of one sum, which 8-bit activations push
        // past 5e-4 whenever that sum happens to cancel to near zero.
        for (k, m, n) in [
            (32, 1, 17),
            (32, 17, 1),
            (64, 3, 17),
            (96, 17, 3),
            (96, 783, 1),
            (64, 17, 128),
            (4096, 5, 3),
            // Whole groups of 8 blocks plus a tail (the AVX2 group kernel).
            (288, 5, 4),
            (576, 7, 5),
            (512, 3, 2),
            // SmolLM2's K and the 4096 benchmark, matrix-vector (rows split
            // in four streams, odd counts leave a partial tile) and prefill.
            (576, 783, 1),
            (576, 4096, 1),
            (4096, 783, 1),
            (1536, 17, 2),
            (576, 3, 5),
            // The tall prefill tiles of repacked rows (16 x 4): Gemma 3's
            // K (two groups and a pair tail), a group tail of 5, whole and
            // partial tiles both ways.
            (640, 37, 7),
            (640, 48, 131),
            (416, 33, 9),
        ] {
            let mut a = Tensor::packed(&mut rng, t, [k, m, 1, 1]);
            let mut b = Tensor::packed(&mut rng, DType::F32, [k, n, 1, 1]);
            for route in routes() {
                check(&mut a, &mut b, route);
            }
        }
    }
}

#[test]
fn quantized_offsets_broadcast_and_strided_src1() {
    let mut rng = Rng::new(11);
    for t in QUANTS {
        // All-positive weights and activations: Q4_1's minimum and the block
        // sums carry most of the result.
        let mut a = Tensor::new(&mut rng, t, [96, 17, 1, 1], [0, 1, 2, 3], 0.5, 2.0);
        let mut b = Tensor::new(&mut rng, DType::F32, [96, 5, 1, 1], [0, 1, 2, 3], 0.0, 1.0);
        // Broadcast over dims 2 and 3.
        let mut c = Tensor::packed(&mut rng, t, [64, 9, 2, 1]);
        let mut d = Tensor::packed(&mut rng, DType::F32, [64, 3, 6, 2]);
        // Transposed f32 and packed f16 activations.
        let mut e = Tensor::packed(&mut rng, t, [32, 7, 1, 1]);
        let mut f = Tensor::new(&mut rng, DType::F32, [3, 32, 1, 1], [1, 0, 2, 3], -1.0, 1.0);
        let mut h = Tensor::packed(&mut rng, DType::F16, [32, 4, 1, 1]);
        for route in routes() {
            check(&mut a, &mut b, route);
            check(&mut c, &mut d, route);
            check(&mut e, &mut f, route);
            check(&mut e, &mut h, route);
        }
    }
}

#[test]
fn simd_quantizer_matches_scalar() {
    let mut rng = Rng::new(12);
    let k = 96;
    let mut x: Vec<f32> = rng
        .vec(k, -3.0, 3.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    x[32..64].fill(0.0); // an all-zero block: d = 0
    let mut want = Buf::new(q8::row_bytes(k));
    // SAFETY: the buffer holds row_bytes(k) bytes aligned to 64.
    unsafe { q8::quantize_row(&x, want.ptr(), Isa::Scalar) };
    for isa in Isa::available() {
        let mut got = Buf::new(q8::row_bytes(k));
        // SAFETY: as above; the host has `isa`.
        unsafe { q8::quantize_row(&x, got.ptr(), isa) };
        assert_eq!(want.bytes(), got.bytes(), "{isa:?}");
    }
}

/// The SIMD tiles against the scalar dot products on the same quantized
/// inputs (only f32 summation order differs), for every tile shape the
/// kernel uses and block counts with and without whole groups of 8.
/// The tall lane tiles of prefill (`qdot::lane_tile`, 16 x 4) give, for
/// every output, the bits of the lane kernel run on that row and column
/// alone (each output is the same chain of integer sums and f32 adds), and
/// the scalar dot within rounding, at block counts with and without whole
/// groups and with either tail.
#[test]
fn tall_lane_tiles_match_single_lane_tiles() {
    use crate::device::cpu::matmul::packed::repack_rows;
    use crate::device::cpu::matmul::qdot::{self, RowLayout};
    const R: usize = 16;
    const C: usize = 4;
    let mut rng = Rng::new(14);
    for t in QUANTS {
        let kind = qdot::weight_kind(t).unwrap();
        for nb in [1, 3, 4, 5, 8, 13, 18, 20] {
            let k = nb * q8::QK;
            let wbytes = t.row_bytes(k as u64).unwrap() as usize;
            let (mut w, mut packed) = (Buf::new(wbytes * R), Buf::new(wbytes * R));
            let mut a = Buf::new(q8::row_bytes(k) * C);
            for r in 0..R {
                let x: Vec<f32> = rng
                    .vec(k, -1.0, 1.0)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                kernels::quant::quantize_row(t, &x, &mut w.bytes()[r * wbytes..(r + 1) * wbytes]);
            }
            for c in 0..C {
                let x: Vec<f32> = rng
                    .vec(k, -1.0, 1.0)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                // SAFETY: row c of the buffer, aligned to 64.
                unsafe { q8::quantize_row(&x, a.ptr().add(c * q8::row_bytes(k)), Isa::Scalar) };
            }
            // SAFETY: both buffers hold R rows of nb blocks.
            unsafe { repack_rows(kind, w.ptr(), packed.ptr(), R, nb) };
            // SAFETY: rows inside the buffers.
            let (wn, wp): ([*const u8; R], [*const u8; R]) = unsafe {
                (
                    std::array::from_fn(|r| w.ptr().add(r * wbytes) as *const u8),
                    std::array::from_fn(|r| packed.ptr().add(r * wbytes) as *const u8),
                )
            };
            // SAFETY: as above.
            let ap: [q8::QRow; C] = std::array::from_fn(|c| unsafe {
                q8::QRow::at(a.ptr().add(c * q8::row_bytes(k)), k)
            });
            for isa in Isa::available() {
                let Some(tall) = qdot::lane_tile::<R, C>(isa, kind) else {
                    assert!(!isa.repacks(), "{isa:?} repacks but has no lane tile");
                    continue;
                };
                // SAFETY: nb blocks in every repacked row; the host has isa.
                let got = unsafe { tall(wp, ap, nb) };
                for r in 0..R {
                    for c in 0..C {
                        let (mut one, mut want) = ([[f32::NAN; 2]; 4], [[f32::NAN; 2]; 4]);
                        // SAFETY: as above; scalar runs anywhere.
                        unsafe {
                            qdot::tile(
                                isa,
                                kind,
                                RowLayout::Packed,
                                &wp[r..=r],
                                &ap[c..=c],
                                nb,
                                &mut one,
                            );
                            qdot::tile(
                                Isa::Scalar,
                                kind,
                                RowLayout::Natural,
                                &wn[r..=r],
                                &ap[c..=c],
                                nb,
                                &mut want,
                            );
                        }
                        let (g, x) = (got[r][c], want[0][0]);
                        assert_eq!(
                            g.to_bits(),
                            one[0][0].to_bits(),
                            "{t} {isa:?} nb {nb} [{r}][{c}]"
                        );
                        assert!(
                            (x - g).abs() <= 1e-4 * (1.0 + x.abs()),
                            "{t} {isa:?} nb {nb} [{r}][{c}]: {x} vs {g}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn simd_tiles_match_scalar_dots() {
    use crate::device::cpu::matmul::packed::repack_rows;
    use crate::device::cpu::matmul::qdot::{self, RowLayout, TILE_C, TILE_R};
    let mut rng = Rng::new(13);
    for t in QUANTS {
        let kind = qdot::weight_kind(t).unwrap();
        for nb in [1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 18, 48, 128] {
            let k = nb * q8::QK;
            let wbytes = t.row_bytes(k as u64).unwrap() as usize;
            let mut w = Buf::new(wbytes * TILE_R);
            let mut a = Buf::new(q8::row_bytes(k) * TILE_C);
            for r in 0..TILE_R {
                let x: Vec<f32> = rng
                    .vec(k, -1.0, 1.0)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                kernels::quant::quantize_row(t, &x, &mut w.bytes()[r * wbytes..(r + 1) * wbytes]);
            }
            for c in 0..TILE_C {
                let x: Vec<f32> = rng
                    .vec(k, -1.0, 1.0)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                // SAFETY: row c of the buffer, aligned to 64.
                unsafe { q8::quantize_row(&x, a.ptr().add(c * q8::row_bytes(k)), Isa::Scalar) };
            }
            // SAFETY: rows inside the buffers.
            let wp: [*const u8; TILE_R] =
                std::array::from_fn(|r| unsafe { w.ptr().add(r * wbytes) as *const u8 });
            // SAFETY: as above.
            let ap: [q8::QRow; TILE_C] = std::array::from_fn(|c| unsafe {
                q8::QRow::at(a.ptr().add(c * q8::row_bytes(k)), k)
            });
            // The same rows repacked (module `packed`).
            let mut packed = Buf::new(wbytes * TILE_R);
            // SAFETY: both buffers hold TILE_R rows of nb blocks.
            unsafe { repack_rows(kind, w.ptr(), packed.ptr(), TILE_R, nb) };
            let layouts = [RowLayout::Natural, RowLayout::Packed];
            let mut want = [[0f32; TILE_C]; TILE_R];
            // SAFETY: nb blocks in every row; scalar runs anywhere.
            unsafe {
                qdot::tile(
                    Isa::Scalar,
                    kind,
                    RowLayout::Natural,
                    &wp,
                    &ap,
                    nb,
                    &mut want,
                )
            };
            let simd = Isa::available().into_iter().filter(|&i| i != Isa::Scalar);
            let cases = std::iter::once((Isa::Scalar, RowLayout::Natural))
                .chain(simd.flat_map(|i| layouts.iter().map(move |&l| (i, l))));
            for (isa, layout) in cases {
                let base = match layout {
                    RowLayout::Natural => w.ptr(),
                    RowLayout::Packed => packed.ptr(),
                };
                // SAFETY: rows inside the buffer.
                let wp: [*const u8; TILE_R] =
                    std::array::from_fn(|r| unsafe { base.add(r * wbytes) as *const u8 });
                for (nr, nc) in [(TILE_R, TILE_C), (TILE_R, 1), (1, TILE_C), (1, 1), (3, 1)] {
                    let mut got = [[f32::NAN; TILE_C]; TILE_R];
                    // SAFETY: as above; the host has isa.
                    unsafe { qdot::tile(isa, kind, layout, &wp[..nr], &ap[..nc], nb, &mut got) };
                    for r in 0..nr {
                        for c in 0..nc {
                            let (x, y) = (want[r][c], got[r][c]);
                            assert!(
                                (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                                "{t} {isa:?} {layout:?} nb {nb} tile {nr}x{nc} [{r}][{c}]: {x} vs {y}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn fast_precision_takes_the_f32_route_from_many_columns() {
    use crate::device::cpu::matmul::{Precision, Route as R, f32_route_min_columns, route};
    for t in QUANTS {
        let n = f32_route_min_columns(t);
        assert_eq!(route(t, 1, Precision::Fast), R::Int8Dot);
        assert_eq!(route(t, n - 1, Precision::Fast), R::Int8Dot);
        assert_eq!(route(t, n, Precision::Fast), R::F32Gemm);
        assert_eq!(route(t, 1, Precision::Exact), R::F32Gemm);
    }
    // K-quants stay on their integer route at any N (f32_route_min_columns).
    for t in [DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        for n in [1, 4, 5, 128, 4096] {
            assert_eq!(route(t, n, Precision::Fast), R::KQuantDot, "{t} N={n}");
        }
        assert_eq!(f32_route_min_columns(t), usize::MAX);
        assert_eq!(route(t, 1, Precision::Exact), R::F32Gemm);
        assert_eq!(route(t, 4096, Precision::Exact), R::F32Gemm);
    }
    assert_eq!(route(DType::F16, 1, Precision::Fast), R::F32Gemm);
    assert_eq!(route(DType::F32, 1, Precision::Fast), R::F32Gemm);
}

#[test]
fn avx_vnni_hosts_keep_the_integer_route_where_it_measured_faster() {
    use crate::device::cpu::matmul::qdot::Isa;
    use crate::device::cpu::matmul::route_threshold;
    // The AVX-VNNI crossovers `f32_route_min_columns` records: the integer
    // route was faster at N = 256 for Q8_0 and at N = 384 for Q4_1 and Q5_0
    // (Q5_1 tied); gemm (AVX2) overtook it at 384 and 512.
    let at = |t| route_threshold(t, Isa::AvxVnni, false);
    assert!(
        (257..=384).contains(&at(DType::Q8_0)),
        "{}",
        at(DType::Q8_0)
    );
    for t in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1] {
        assert!((385..=512).contains(&at(t)), "{t}: {}", at(t));
    }
    // Plain AVX2 hosts keep theirs (measured on an AMD EPYC).
    let avx2 = |t| route_threshold(t, Isa::Avx2, false);
    assert_eq!(
        [DType::Q4_1, DType::Q8_0, DType::Q5_0].map(avx2),
        [192, 56, 64]
    );
}
