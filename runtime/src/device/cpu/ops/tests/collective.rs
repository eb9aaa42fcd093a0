//! all_reduce_sum, all_gather and reduce_scatter_sum: against the reference
//! at odd sizes, the all-reduce and every reduce-scatter slice to the bit
//! against a sequential f32 sum in part order (what makes every
//! participant's copy identical, and an all-gather of the slices equal to the
//! all-reduce), and what prepare refuses.

use super::harness::*;
use crate::RuntimeError;
use crate::device::cpu::ops::prepare_op;
use ir::{DType, Op};
use kernels::reference::Dense;
use kernels::testing::Rng;

/// Odd extents; 1025 elements cross the kernel's 1024-element work unit, so
/// two or three threads each take a share.
const SHAPES: [[i64; 4]; 4] = [[1, 1, 1, 1], [37, 5, 3, 1], [1025, 1, 1, 1], [17, 3, 2, 3]];

const REDUCE: Op = Op::AllReduceSum {
    group: 0,
    rank: 0,
    ranks: 3,
};

fn gather_along(dim: u8) -> Op {
    Op::AllGather {
        dim,
        group: 0,
        rank: 1,
        ranks: 3,
    }
}

#[test]
fn all_reduce_sum_of_one_two_and_three_parts() {
    let mut rng = Rng::new(60);
    for ne in SHAPES {
        for n_parts in 1..=3 {
            let parts: Vec<T> = (0..n_parts)
                .map(|_| filled(&mut rng, DType::F32, ne))
                .collect();
            let dst = poisoned(DType::F32, ne);
            let what = format!("all_reduce_sum of {n_parts} parts {ne:?}");
            check(&what, REDUCE, parts, Dst::Own(dst), Expect::Nmse);
        }
    }
}

/// The bits of `values` stored as f32.
fn f32_bits(values: impl IntoIterator<Item = f32>) -> Vec<u32> {
    values.into_iter().map(f32::to_bits).collect()
}

/// Part values whose f32 sum depends on the order of the additions: large
/// and small magnitudes of both signs, so rounding differs by order.
fn uneven(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let scale = [1e-3, 1.0, 3e3][rng.below(3)];
            (rng.uniform(-1.0, 1.0) * scale) as f32
        })
        .collect()
}

#[test]
fn all_reduce_sum_is_the_sequential_f32_sum_in_part_order_to_the_bit() {
    let mut rng = Rng::new(61);
    for ne in SHAPES {
        let n = ne.iter().product::<i64>() as usize;
        let values: Vec<Vec<f32>> = (0..3).map(|_| uneven(&mut rng, n)).collect();
        let sum_in = |order: &[usize]| -> Vec<f32> {
            let mut acc = values[order[0]].clone();
            for &p in &order[1..] {
                for (a, &v) in acc.iter_mut().zip(&values[p]) {
                    *a += v;
                }
            }
            acc
        };
        let want = f32_bits(sum_in(&[0, 1, 2]));
        if n > 100 {
            // The test can tell orders apart: another order changes some bits.
            assert_ne!(want, f32_bits(sum_in(&[2, 1, 0])), "{ne:?}");
        }
        let mut parts: Vec<T> = values
            .iter()
            .map(|v| {
                dense(
                    DType::F32,
                    &Dense::new(ne, v.iter().map(|&x| x.into()).collect()),
                )
            })
            .collect();
        for pool in pools() {
            let mut out = poisoned(DType::F32, ne);
            let raws: Vec<_> = parts.iter_mut().map(T::raw).collect();
            let kernel = prepare_op(&REDUCE, out.raw(), &raws).expect("prepared");
            assert_eq!(kernel.scratch_bytes(), 0);
            // SAFETY: the parts and `out` live across the run; no scratch.
            pool.run(&|ctx| unsafe { kernel.run(ctx, std::ptr::null_mut()) });
            let got = f32_bits(out.values().data.iter().map(|&v| v as f32));
            assert_eq!(got, want, "{ne:?} on {} threads", pool.n_threads());
        }
    }
}

#[test]
fn all_gather_along_every_dim_with_unequal_parts() {
    let mut rng = Rng::new(62);
    let base = [5, 3, 2, 3];
    // Extents of each part along the gathered dim: one, two and three parts,
    // unequal (a part of one, an odd one, a larger one).
    let splits: [&[i64]; 3] = [&[3], &[1, 4], &[2, 1, 5]];
    for dim in 0..4u8 {
        for extents in splits {
            let parts: Vec<T> = extents
                .iter()
                .map(|&e| {
                    let mut ne = base;
                    ne[dim as usize] = e;
                    filled(&mut rng, DType::F32, ne)
                })
                .collect();
            let mut ne = base;
            ne[dim as usize] = extents.iter().sum();
            let dst = poisoned(DType::F32, ne);
            let what = format!("all_gather dim {dim} of {extents:?}");
            check(
                &what,
                gather_along(dim),
                parts,
                Dst::Own(dst),
                Expect::Bytes,
            );
        }
    }
    // A long gather, so several threads share the outer index range.
    let parts = vec![
        filled(&mut rng, DType::F32, [7, 300, 1, 1]),
        filled(&mut rng, DType::F32, [9, 300, 1, 1]),
    ];
    let dst = poisoned(DType::F32, [16, 300, 1, 1]);
    check(
        "all_gather dim 0, 300 rows",
        gather_along(0),
        parts,
        Dst::Own(dst),
        Expect::Bytes,
    );
}

fn scatter(dim: u8, start: i64, len: i64) -> Op {
    Op::ReduceScatterSum {
        dim,
        start,
        len,
        group: 0,
        rank: 0,
        ranks: 3,
    }
}

#[test]
fn reduce_scatter_slices_are_the_all_reduce_sum_to_the_bit_along_every_dim() {
    let mut rng = Rng::new(64);
    // Odd extents, and a long one so several threads share the outer range.
    for ne in [[5, 3, 4, 3], [7, 300, 1, 1], [1025, 2, 1, 1]] {
        let n = ne.iter().product::<i64>() as usize;
        let values: Vec<Vec<f32>> = (0..3).map(|_| uneven(&mut rng, n)).collect();
        let mut sum = values[0].clone();
        for v in &values[1..] {
            for (a, &x) in sum.iter_mut().zip(v) {
                *a += x;
            }
        }
        let sum = Dense::new(ne, sum.iter().map(|&x| x.into()).collect());
        let mut parts: Vec<T> = values
            .iter()
            .map(|v| {
                let d = Dense::new(ne, v.iter().map(|&x| x.into()).collect());
                dense(DType::F32, &d)
            })
            .collect();
        for dim in 0..4u8 {
            let extent = ne[dim as usize];
            // Three slices tiling the axis where it is long enough: unequal,
            // the last one odd.
            let cuts: Vec<(i64, i64)> = match extent {
                1 => vec![(0, 1)],
                2 => vec![(0, 1), (1, 1)],
                e => vec![(0, 1), (1, e / 2), (1 + e / 2, e - 1 - e / 2)],
            };
            for (start, len) in cuts {
                let mut out_ne = ne;
                out_ne[dim as usize] = len;
                let want: Vec<u32> = f32_bits(
                    Dense::from_fn(out_ne, |mut idx| {
                        idx[dim as usize] += start;
                        sum.get(idx)
                    })
                    .data
                    .iter()
                    .map(|&v| v as f32),
                );
                for pool in pools() {
                    let mut out = poisoned(DType::F32, out_ne);
                    let raws: Vec<_> = parts.iter_mut().map(T::raw).collect();
                    let op = scatter(dim, start, len);
                    let kernel = prepare_op(&op, out.raw(), &raws).expect("prepared");
                    // SAFETY: the parts and `out` live across the run; no scratch.
                    pool.run(&|ctx| unsafe { kernel.run(ctx, std::ptr::null_mut()) });
                    let got = f32_bits(out.values().data.iter().map(|&v| v as f32));
                    assert_eq!(
                        got,
                        want,
                        "{ne:?} dim {dim} [{start}, +{len}) on {} threads",
                        pool.n_threads()
                    );
                }
            }
        }
    }
}

fn refused(op: Op, dst: DstAt, mut parts: Vec<T>) -> String {
    let raws: Vec<_> = parts.iter_mut().map(T::raw).collect();
    let dst = match dst {
        DstAt::Own(mut t) => t.raw(),
        DstAt::Part(i) => raws[i],
    };
    match prepare_op(&op, dst, &raws) {
        Ok(k) => panic!("{op} was prepared ({}) but should be refused", k.describe()),
        Err(e @ RuntimeError::Unsupported { .. }) => e.to_string(),
        Err(e) => panic!("{op}: wrong error kind: {e}"),
    }
}

/// Where a refused step's destination is.
enum DstAt {
    Own(T),
    Part(usize),
}

#[test]
fn collectives_refuse_other_dtypes_mismatched_parts_and_writing_over_a_part() {
    let mut rng = Rng::new(63);
    let f32s = |rng: &mut Rng, ne| filled(rng, DType::F32, ne);
    let msg = refused(
        REDUCE,
        DstAt::Own(poisoned(DType::F32, [4, 3, 1, 1])),
        vec![filled(&mut rng, DType::F16, [4, 3, 1, 1])],
    );
    assert!(
        msg.contains("packed f32") && msg.contains("src0 f16"),
        "{msg}"
    );
    let msg = refused(
        REDUCE,
        DstAt::Own(poisoned(DType::F32, [4, 3, 1, 1])),
        vec![f32s(&mut rng, [4, 3, 1, 1]), f32s(&mut rng, [3, 4, 1, 1])],
    );
    assert!(msg.contains("must all be [4, 3, 1, 1]"), "{msg}");
    let msg = refused(
        gather_along(1),
        DstAt::Own(poisoned(DType::F32, [4, 5, 1, 1])),
        vec![f32s(&mut rng, [4, 3, 1, 1]), f32s(&mut rng, [4, 1, 1, 1])],
    );
    assert!(msg.contains("do not join along dim 1"), "{msg}");
    // Written over its second part, a sum would add the first part twice.
    let msg = refused(
        REDUCE,
        DstAt::Part(1),
        vec![f32s(&mut rng, [4, 3, 1, 1]), f32s(&mut rng, [4, 3, 1, 1])],
    );
    assert!(msg.contains("dst overlaps part 1"), "{msg}");
    // A slice past the parts' end, and a destination of the wrong extent.
    let msg = refused(
        scatter(1, 2, 2),
        DstAt::Own(poisoned(DType::F32, [4, 2, 1, 1])),
        vec![f32s(&mut rng, [4, 3, 1, 1]), f32s(&mut rng, [4, 3, 1, 1])],
    );
    assert!(
        msg.contains("cut to [2, 2 + 2) along dim 1 do not give [4, 2, 1, 1]"),
        "{msg}"
    );
    let msg = refused(
        scatter(1, 1, 2),
        DstAt::Own(poisoned(DType::F32, [4, 3, 1, 1])),
        vec![f32s(&mut rng, [4, 3, 1, 1]), f32s(&mut rng, [4, 3, 1, 1])],
    );
    assert!(msg.contains("do not give [4, 3, 1, 1]"), "{msg}");
}
