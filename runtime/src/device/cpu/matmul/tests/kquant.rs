//! The K-quant route (Q4_K, Q5_K, Q6_K weights, Q8_K activations) through
//! every instruction set the host has, the scalar one included: whole
//! products against the f64 reference, each SIMD dot product against the
//! scalar one, the scalar one against the dequantized weights, and the Q8_K
//! quantizer's two versions against each other and the input.

use super::{Buf, Route, Tensor, check};
use crate::device::cpu::matmul::kquant::q8k::{self, Q8KRow, QK_K, SUM_ELEMS};
use crate::device::cpu::matmul::kquant::scales::{q4k_scales_mins, q5k_fifth_bit, q6k_quant};
use crate::device::cpu::matmul::kquant::tile::{TileFn, full_tile};
use crate::device::cpu::matmul::kquant::{Isa, kind, repack, scalar, weight_kind};
use crate::device::cpu::matmul::packed::RepackCache;
use crate::device::cpu::matmul::{Precision, prepare_mul_mat_weights};
use ir::DType;
use kernels::testing::Rng;

const KQUANTS: [DType; 3] = [DType::Q4_K, DType::Q5_K, DType::Q6_K];

fn routes() -> Vec<Route> {
    let mut v: Vec<Route> = Isa::available().into_iter().map(Route::KQuant).collect();
    v.push(Route::Default);
    v
}

/// `n` f32 values uniform in [lo, hi).
fn values(rng: &mut Rng, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    rng.vec(n, lo, hi).into_iter().map(|v| v as f32).collect()
}

#[test]
fn kquant_odd_sizes_every_isa() {
    let mut rng = Rng::new(30);
    for t in KQUANTS {
        for k in [256, 512, 1536, 2816] {
            for m in [1, 7, 33, 100] {
                for n in [1, 2, 3, 5, 17] {
                    // With few outputs the NMSE is one sum's squared relative
                    // error, which 8-bit activations push past the threshold
                    // when a symmetric sum cancels: there, values whose sums
                    // do not (all routes still see every sign).
                    let lo = if m * n < 16 { -0.5 } else { -1.0 };
                    let mut a = Tensor::new(&mut rng, t, [k, m, 1, 1], [0, 1, 2, 3], lo, 1.0);
                    let mut b =
                        Tensor::new(&mut rng, DType::F32, [k, n, 1, 1], [0, 1, 2, 3], lo, 1.0);
                    for route in routes() {
                        check(&mut a, &mut b, route);
                    }
                }
            }
        }
    }
}

#[test]
fn kquant_offsets_broadcast_and_strided_src1() {
    let mut rng = Rng::new(31);
    for t in KQUANTS {
        // All-positive weights and activations: the minimums (Q4_K, Q5_K)
        // and the offset of 32 (Q6_K) carry most of the result.
        let mut a = Tensor::new(&mut rng, t, [512, 17, 1, 1], [0, 1, 2, 3], 0.5, 2.0);
        let mut b = Tensor::new(&mut rng, DType::F32, [512, 5, 1, 1], [0, 1, 2, 3], 0.0, 1.0);
        // Broadcast over dims 2 and 3 (matrix-vector and prefill).
        let mut c = Tensor::packed(&mut rng, t, [256, 9, 2, 1]);
        let mut d = Tensor::packed(&mut rng, DType::F32, [256, 3, 6, 2]);
        let mut d7 = Tensor::packed(&mut rng, DType::F32, [256, 7, 4, 3]);
        // Transposed f32, packed f16 and bf16 activations.
        let mut e = Tensor::packed(&mut rng, t, [256, 7, 1, 1]);
        let mut f = Tensor::new(
            &mut rng,
            DType::F32,
            [6, 256, 1, 1],
            [1, 0, 2, 3],
            -1.0,
            1.0,
        );
        let mut h = Tensor::packed(&mut rng, DType::F16, [256, 4, 1, 1]);
        let mut g = Tensor::packed(&mut rng, DType::BF16, [256, 9, 1, 1]);
        for route in routes() {
            check(&mut a, &mut b, route);
            check(&mut c, &mut d, route);
            check(&mut c, &mut d7, route);
            check(&mut e, &mut f, route);
            check(&mut e, &mut h, route);
            check(&mut e, &mut g, route);
        }
    }
}

/// f16 super-block scales the dot tests plant: ordinary, the largest
/// finite, the smallest normal and subnormal, negative.
const F16_SCALES: [f32; 6] = [1.0, 0.0123, 65504.0, 6.1035156e-5, 5.9604645e-8, -2.5];

/// Random bytes (every pattern is a valid block: all 6-bit scales and mins,
/// Q6_K's signed scales down to -128) with planted f16 scales.
fn random_block(rng: &mut Rng, kind: u8) -> Vec<u8> {
    let mut blk: Vec<u8> = (0..kind::block_bytes(kind))
        .map(|_| rng.below(256) as u8)
        .collect();
    let f16_at = if kind == kind::Q6_K {
        vec![208]
    } else {
        vec![0, 2]
    };
    for at in f16_at {
        let v = F16_SCALES[rng.below(F16_SCALES.len())];
        blk[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
    }
    blk
}

/// Activations for `nb` blocks with varied magnitudes, and blocks that
/// test the quantizer's edges: all zero (d = 0), constant (every quant
/// -127), and equal magnitudes of both signs (the first one sets the sign).
fn random_activations(rng: &mut Rng, nb: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(nb * QK_K);
    for b in 0..nb {
        let scale = [1.0, 1e-20, 1e20, 3.0e-3, 7.0][rng.below(5)];
        let mut blk = values(rng, QK_K, -scale, scale);
        match b % 7 {
            3 => blk.fill(0.0),
            4 => blk.fill(scale as f32 * 0.5),
            5 => {
                blk[10] = -scale as f32 * 2.0;
                blk[200] = scale as f32 * 2.0;
            }
            _ => {}
        }
        x.extend(blk);
    }
    x
}

/// The f32 values `kernels` decodes from a weight row of `nb` blocks.
fn dequantized(kind: u8, row: &[u8]) -> Vec<f32> {
    let dtype = [DType::Q4_K, DType::Q5_K, DType::Q6_K][kind as usize];
    let mut out = vec![0f32; row.len() / kind::block_bytes(kind) * QK_K];
    kernels::quant::dequantize_row(dtype, row, &mut out);
    out
}

/// Sum over the row of |dy q| times the magnitudes of the terms of each
/// weight value (|d sc u| + |dmin m|, or |d sc (u - 32)|): the size that
/// f32 rounding of a dot product is relative to.
fn magnitude(kind: u8, row: &[u8], a: Q8KRow) -> f64 {
    let bytes = kind::block_bytes(kind);
    let f16 =
        |b: &[u8], at: usize| f64::from(half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32());
    let mut sum = 0f64;
    for (b, blk) in row.chunks_exact(bytes).enumerate() {
        // SAFETY: the row has block b.
        let (q, dy) = unsafe {
            (
                std::slice::from_raw_parts(a.qs.add(b * QK_K), QK_K),
                f64::from(*a.d.add(b)),
            )
        };
        for (v, &qv) in q.iter().enumerate() {
            let w = match kind {
                kind::Q6_K => {
                    let sc = f64::from(blk[192 + v / 16] as i8);
                    (f16(blk, 208) * sc * (f64::from(q6k_quant(blk, v)) - 32.0)).abs()
                }
                _ => {
                    let (sc, m) = q4k_scales_mins(blk[4..16].try_into().unwrap());
                    let (j, l) = (v / 32, v % 32);
                    let at = if kind == kind::Q4_K { 16 } else { 48 };
                    let mut u = (blk[at + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
                    if kind == kind::Q5_K {
                        u |= q5k_fifth_bit(&blk[16..48], j, l) << 4;
                    }
                    (f16(blk, 0) * f64::from(sc[j]) * f64::from(u)).abs()
                        + (f16(blk, 2) * f64::from(m[j])).abs()
                }
            };
            sum += w * (dy * f64::from(qv)).abs();
        }
    }
    sum
}

/// Every field decoder of `scales` against the crate's block decoders, on
/// random blocks.
#[test]
fn kquant_fields_match_the_reference_decoders() {
    let mut rng = Rng::new(32);
    for _ in 0..50 {
        for k in [kind::Q4_K, kind::Q5_K, kind::Q6_K] {
            let blk = random_block(&mut rng, k);
            let want = dequantized(k, &blk);
            let f16 = |at: usize| half::f16::from_le_bytes([blk[at], blk[at + 1]]).to_f32();
            for (v, &w) in want.iter().enumerate() {
                let got = if k == kind::Q6_K {
                    let sc = f32::from(blk[192 + v / 16] as i8);
                    f16(208) * sc * f32::from(i16::from(q6k_quant(&blk, v)) - 32)
                } else {
                    let (sc, m) = q4k_scales_mins(blk[4..16].try_into().unwrap());
                    let (j, l) = (v / 32, v % 32);
                    let at = if k == kind::Q4_K { 16 } else { 48 };
                    let mut u = (blk[at + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
                    if k == kind::Q5_K {
                        u |= q5k_fifth_bit(&blk[16..48], j, l) << 4;
                    }
                    f16(0) * f32::from(sc[j]) * f32::from(u) - f16(2) * f32::from(m[j])
                };
                assert_eq!(
                    got.to_bits(),
                    w.to_bits(),
                    "kind {k} value {v}: {got} vs {w}"
                );
            }
        }
    }
}

/// The scalar dot product against the dequantized weights times the Q8_K
/// values in f64, and every SIMD tile shape against the scalar dot product,
/// on random blocks with extreme scales.
#[test]
fn kquant_simd_dots_match_scalar_and_dequantized() {
    const R: usize = 4;
    const C: usize = 8;
    let mut rng = Rng::new(33);
    for k in [kind::Q4_K, kind::Q5_K, kind::Q6_K] {
        for nb in [1, 2, 3, 7, 11] {
            let kk = nb * QK_K;
            let wbytes = nb * kind::block_bytes(k);
            let w: Vec<Vec<u8>> = (0..R)
                .map(|_| (0..nb).flat_map(|_| random_block(&mut rng, k)).collect())
                .collect();
            let mut act = Buf::new(q8k::row_bytes(kk) * C);
            for c in 0..C {
                let xc = random_activations(&mut rng, nb);
                // SAFETY: row c of the buffer, aligned to 64.
                unsafe {
                    q8k::quantize_row(&xc, act.ptr().add(c * q8k::row_bytes(kk)), Isa::Scalar)
                };
            }
            // SAFETY: rows inside the buffer.
            let a: [Q8KRow; C] = std::array::from_fn(|c| unsafe {
                Q8KRow::at(act.ptr().add(c * q8k::row_bytes(kk)), kk)
            });
            let wp: [*const u8; R] = std::array::from_fn(|r| w[r].as_ptr());
            let mut want = [[0f32; C]; R];
            let mut mag = [[0f64; C]; R];
            for r in 0..R {
                assert_eq!(w[r].len(), wbytes);
                let deq = dequantized(k, &w[r]);
                for c in 0..C {
                    // SAFETY: nb blocks in both rows.
                    want[r][c] = unsafe { scalar::dot(k, wp[r], a[c], nb) };
                    mag[r][c] = magnitude(k, &w[r], a[c]);
                    let mut exact = 0f64;
                    for (v, &wv) in deq.iter().enumerate() {
                        // SAFETY: value v and its block's scale are inside row c.
                        let (q, dy) = unsafe { (*a[c].qs.add(v), *a[c].d.add(v / QK_K)) };
                        exact += f64::from(wv) * f64::from(q) * f64::from(dy);
                    }
                    let err = (f64::from(want[r][c]) - exact).abs();
                    assert!(
                        err <= 1e-5 * mag[r][c] + 1e-35,
                        "kind {k} nb {nb} [{r}][{c}]: scalar {} vs dequantized {exact} (magnitude {})",
                        want[r][c],
                        mag[r][c]
                    );
                }
            }
            // The SIMD tiles read repacked weights and activations permuted
            // alike (`kquant::repack`).
            let w_rep: Vec<Vec<u8>> = w
                .iter()
                .map(|row| {
                    let mut out = vec![0u8; row.len()];
                    // SAFETY: both hold nb blocks.
                    unsafe { repack::repack_rows(k, row.as_ptr(), out.as_mut_ptr(), 1, nb) };
                    out
                })
                .collect();
            let mut act_p = Buf::new(q8k::row_bytes(kk) * C);
            act_p.bytes().copy_from_slice(act.bytes());
            for c in 0..C {
                let at = c * q8k::row_bytes(kk);
                for block in act_p.bytes()[at..at + kk].chunks_exact_mut(QK_K) {
                    // SAFETY: i8 and u8 have one layout.
                    let block: &mut [i8] = unsafe { &mut *(block as *mut [u8] as *mut [i8]) };
                    repack::permute_activations(k, block);
                }
            }
            // SAFETY: rows inside the buffer.
            let a_p: [Q8KRow; C] = std::array::from_fn(|c| unsafe {
                Q8KRow::at(act_p.ptr().add(c * q8k::row_bytes(kk)), kk)
            });
            let wp_rep: [*const u8; R] = std::array::from_fn(|r| w_rep[r].as_ptr());
            // Every SIMD set computes the same integer sums and f32 steps.
            let mut simd_bits: Option<Vec<u32>> = None;
            for isa in Isa::available() {
                let (wp, a) = match isa {
                    Isa::Scalar => (wp, a),
                    _ => (wp_rep, a_p),
                };
                let mut bits = Vec::new();
                let mut compare = |shape: (usize, usize), got: &dyn Fn(usize, usize) -> f32| {
                    for r in 0..shape.0 {
                        for c in 0..shape.1 {
                            let (x, y) = (want[r][c], got(r, c));
                            bits.push(y.to_bits());
                            assert!(
                                f64::from((x - y).abs()) <= 1e-5 * mag[r][c] + 1e-35,
                                "kind {k} {isa:?} nb {nb} tile {shape:?} [{r}][{c}]: scalar {x} vs {y} (magnitude {})",
                                mag[r][c]
                            );
                        }
                    }
                };
                /// One tile shape's outputs.
                fn run<const TR: usize, const TC: usize>(
                    f: TileFn<TR, TC>,
                    w: [*const u8; R],
                    a: [Q8KRow; C],
                    nb: usize,
                ) -> [[f32; TC]; TR] {
                    // SAFETY: every row and column has nb blocks; the host has
                    // the isa `f` was chosen for.
                    unsafe {
                        f(
                            std::array::from_fn(|r| w[r]),
                            std::array::from_fn(|c| a[c]),
                            nb,
                        )
                    }
                }
                let t = run(full_tile::<4, 1>(isa, k), wp, a, nb);
                compare((4, 1), &|r, c| t[r][c]);
                let t = run(full_tile::<4, 2>(isa, k), wp, a, nb);
                compare((4, 2), &|r, c| t[r][c]);
                let t = run(full_tile::<4, 3>(isa, k), wp, a, nb);
                compare((4, 3), &|r, c| t[r][c]);
                let t = run(full_tile::<4, 4>(isa, k), wp, a, nb);
                compare((4, 4), &|r, c| t[r][c]);
                let t = run(full_tile::<2, 4>(isa, k), wp, a, nb);
                compare((2, 4), &|r, c| t[r][c]);
                let t = run(full_tile::<1, 4>(isa, k), wp, a, nb);
                compare((1, 4), &|r, c| t[r][c]);
                let t = run(full_tile::<1, 1>(isa, k), wp, a, nb);
                compare((1, 1), &|r, c| t[r][c]);
                let t = run(full_tile::<2, 2>(isa, k), wp, a, nb);
                compare((2, 2), &|r, c| t[r][c]);
                let t = run(full_tile::<3, 1>(isa, k), wp, a, nb);
                compare((3, 1), &|r, c| t[r][c]);
                let t = run(full_tile::<1, 8>(isa, k), wp, a, nb);
                compare((1, 8), &|r, c| t[r][c]);
                if isa != Isa::Scalar {
                    match &simd_bits {
                        None => simd_bits = Some(bits),
                        Some(first) => assert!(
                            *first == bits,
                            "kind {k} nb {nb}: {isa:?} differs from the first SIMD set"
                        ),
                    }
                }
            }
        }
    }
}

#[test]
fn q8k_simd_quantizer_matches_scalar_and_rounds_to_nearest() {
    let mut rng = Rng::new(34);
    for nb in [1, 3, 11] {
        let k = nb * QK_K;
        let x = random_activations(&mut rng, nb);
        let mut want = Buf::new(q8k::row_bytes(k));
        // SAFETY: the buffer holds row_bytes(k) bytes aligned to 64.
        unsafe { q8k::quantize_row(&x, want.ptr(), Isa::Scalar) };
        for isa in Isa::available() {
            let mut got = Buf::new(q8k::row_bytes(k));
            // SAFETY: as above; the host has `isa`.
            unsafe { q8k::quantize_row(&x, got.ptr(), isa) };
            assert_eq!(want.bytes(), got.bytes(), "{isa:?} nb {nb}");
        }
        // SAFETY: the row written above.
        let row = unsafe { Q8KRow::at(want.ptr(), k) };
        for b in 0..nb {
            // SAFETY: block b of the row.
            let (q, bsums, d) = unsafe {
                (
                    std::slice::from_raw_parts(row.qs.add(b * QK_K), QK_K),
                    std::slice::from_raw_parts(row.bsums.add(b * 16), 16),
                    *row.d.add(b),
                )
            };
            let xb = &x[b * QK_K..(b + 1) * QK_K];
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(
                (f64::from(d.abs()) - f64::from(amax) / 127.0).abs() <= 1e-6 * f64::from(amax),
                "nb {nb} block {b}: d {d} for amax {amax}"
            );
            // ggml's sign convention: the first value of largest magnitude
            // becomes -127.
            if let Some(first) = xb.iter().position(|v| v.abs() == amax && amax > 0.0) {
                assert_eq!(q[first], -127, "nb {nb} block {b}");
            }
            for (i, (&qi, &xi)) in q.iter().zip(xb).enumerate() {
                assert!((-127..=127).contains(&qi), "block {b} quant {i}: {qi}");
                let err = (f64::from(qi) * f64::from(d) - f64::from(xi)).abs();
                assert!(
                    err <= f64::from(d.abs()) * (0.5 + 5e-5),
                    "nb {nb} block {b} value {i}: {xi} quantized to {qi} x {d}"
                );
            }
            for (j, &s) in bsums.iter().enumerate() {
                let sum: i32 = q[SUM_ELEMS * j..SUM_ELEMS * (j + 1)]
                    .iter()
                    .map(|&v| i32::from(v))
                    .sum();
                assert_eq!(i32::from(s), sum, "nb {nb} block {b} sum {j}");
            }
        }
    }
}

#[test]
fn kquant_default_route_is_the_integer_kernel_on_weights() {
    let mut rng = Rng::new(36);
    for t in KQUANTS {
        for n in [1, 9] {
            let mut a = Tensor::packed(&mut rng, t, [256, 3, 1, 1]);
            let mut b = Tensor::packed(&mut rng, DType::F32, [256, n, 1, 1]);
            let mut dst = Tensor::packed(&mut rng, DType::F32, [3, n, 1, 1]);
            let repack = RepackCache::new();
            // SAFETY: a's bytes do not change while the kernel lives.
            let kernel = unsafe {
                prepare_mul_mat_weights(dst.raw(), a.raw(), b.raw(), Precision::Fast, &repack)
            }
            .unwrap();
            let isa = Isa::detect();
            let want = match isa {
                Isa::Scalar => "(int8 scalar)".to_string(),
                _ => format!("(int8 {}, repacked)", isa.label()),
            };
            assert!(kernel.describe().ends_with(&want), "{}", kernel.describe());
            // Not a weight (no repacked copy): the SIMD sets leave it to gemm.
            let kernel =
                crate::device::cpu::matmul::prepare_mul_mat(dst.raw(), a.raw(), b.raw()).unwrap();
            assert_eq!(
                kernel.describe().contains("int8"),
                isa == Isa::Scalar,
                "{}",
                kernel.describe()
            );
        }
    }
}

#[test]
fn kquant_prepare_refuses_other_weights() {
    use crate::device::cpu::matmul::kquant::KQuantMatMul;
    use crate::device::cpu::matmul::shape::Geometry;
    let mut rng = Rng::new(35);
    let mut a = Tensor::packed(&mut rng, DType::Q8_0, [256, 3, 1, 1]);
    let mut b = Tensor::packed(&mut rng, DType::F32, [256, 2, 1, 1]);
    let mut dst = Tensor::packed(&mut rng, DType::F32, [3, 2, 1, 1]);
    let geo = Geometry::new(dst.raw(), a.raw(), b.raw()).unwrap();
    // SAFETY: a's bytes do not change while the kernel lives.
    assert!(unsafe { KQuantMatMul::new(geo, Some(&RepackCache::new())) }.is_err());
    assert!(weight_kind(DType::Q4_K).is_some() && weight_kind(DType::Q4_1).is_none());
}
