//! The lane kernel with `vpdpbusd` (AVX512-VNNI's and AVX-VNNI's), with and
//! without GFNI for the Q5 fifth bits, gives the AVX2 lane kernel's bits:
//! the integer sums are the same numbers, and the float work is the same
//! code.

use super::LaneTile;
use super::avx2_lane::{host_gfni, kernel};
use super::{Isa, TILE_C, TILE_R, kind, weight_kind};
use crate::device::cpu::matmul::packed::repack_rows;
use crate::device::cpu::matmul::q8::{self, QK, QRow};
use ir::DType;
use kernels::testing::Rng;

/// 64-byte aligned zeroed bytes.
fn buf(bytes: usize) -> Vec<[u64; 8]> {
    vec![[0; 8]; bytes.div_ceil(64).max(1)]
}

#[test]
fn vnni_lanes_equal_avx2_lanes_to_the_bit() {
    let mut checked = 0;
    for vnni in [Isa::Avx512 { vnni: true }, Isa::AvxVnni] {
        if !Isa::available().contains(&vnni) {
            eprintln!(
                "this host has no {}: its lane kernel is not checked here",
                vnni.name()
            );
            continue;
        }
        for gfni in [false, true] {
            if gfni && !host_gfni() {
                eprintln!("this host has no GFNI: the Q5 affine steps are not checked here");
                continue;
            }
            lanes_equal_avx2_lanes(vnni, gfni);
            checked += 1;
        }
    }
    eprintln!("{checked} VNNI lane kernels checked against the AVX2 one");
}

/// The lane kernel for (`isa`, `gfni`) over format `k`, in full tiles.
fn full(isa: Isa, gfni: bool, k: u8) -> LaneTile<TILE_R, TILE_C> {
    match k {
        kind::Q8_0 => kernel::<{ kind::Q8_0 }, TILE_R, TILE_C>(isa, gfni),
        kind::Q4_0 => kernel::<{ kind::Q4_0 }, TILE_R, TILE_C>(isa, gfni),
        kind::Q5_0 => kernel::<{ kind::Q5_0 }, TILE_R, TILE_C>(isa, gfni),
        kind::Q5_1 => kernel::<{ kind::Q5_1 }, TILE_R, TILE_C>(isa, gfni),
        _ => kernel::<{ kind::Q4_1 }, TILE_R, TILE_C>(isa, gfni),
    }
}

/// The lane kernel of `vnni` (with GFNI when `gfni`) against the AVX2 one,
/// bit for bit.
fn lanes_equal_avx2_lanes(vnni: Isa, gfni: bool) {
    let mut rng = Rng::new(29);
    let quants = [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
    ];
    for t in quants {
        let kind = weight_kind(t).unwrap();
        for nb in [1, 2, 3, 5, 8, 9, 13, 18, 64] {
            let k = nb * QK;
            let wbytes = t.row_bytes(k as u64).unwrap() as usize;
            let (mut w, mut packed) = (buf(wbytes * TILE_R), buf(wbytes * TILE_R));
            let mut a = buf(q8::row_bytes(k) * TILE_C);
            let (wp, pp, ap) = (
                w.as_mut_ptr() as *mut u8,
                packed.as_mut_ptr() as *mut u8,
                a.as_mut_ptr() as *mut u8,
            );
            for r in 0..TILE_R {
                // Extreme values too: a row of large magnitudes saturates nothing.
                let scale = if r == 0 { 1e3 } else { 1.0 };
                let x: Vec<f32> = rng
                    .vec(k, -scale, scale)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                // SAFETY: row r of the buffer.
                let row = unsafe { std::slice::from_raw_parts_mut(wp.add(r * wbytes), wbytes) };
                kernels::quant::quantize_row(t, &x, row);
            }
            for c in 0..TILE_C {
                let x: Vec<f32> = rng
                    .vec(k, -1.0, 1.0)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                // SAFETY: row c of the buffer, aligned to 64.
                unsafe { q8::quantize_row(&x, ap.add(c * q8::row_bytes(k)), Isa::Scalar) };
            }
            // SAFETY: both buffers hold TILE_R rows of nb blocks.
            unsafe { repack_rows(kind, wp, pp, TILE_R, nb) };
            // SAFETY: rows inside the buffers.
            let rows: [*const u8; TILE_R] =
                std::array::from_fn(|r| unsafe { pp.add(r * wbytes) as *const u8 });
            // SAFETY: as above.
            let cols: [QRow; TILE_C] =
                std::array::from_fn(|c| unsafe { QRow::at(ap.add(c * q8::row_bytes(k)), k) });
            let run = |isa, gfni| {
                // SAFETY: repacked rows of nb blocks, quantized rows of k; the
                // host has isa (and GFNI when asked).
                let out = unsafe { full(isa, gfni, kind)(rows, cols, nb) };
                out.map(|r| r.map(f32::to_bits))
            };
            assert_eq!(
                run(vnni, gfni),
                run(Isa::Avx2, false),
                "{} gfni {gfni} {t} nb {nb}",
                vnni.name()
            );
        }
    }
}
