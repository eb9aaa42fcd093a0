//! The grouped kernel against `kernels::reference` (f64 sums of the
//! dequantized experts) on seeded inputs at odd sizes, dst poisoned with NaN,
//! on pools of 1, 2 and 3 threads: every expert dtype on every route
//! (8-bit activations with experts repacked or in place, f32), one activation
//! row per token or per slot, decode (one token) and 37 tokens, loads where
//! one expert takes most tokens and some take none; every instruction set the
//! host has; planted bugs that the comparison must catch; ids out of range.

use super::{Forced, Mutant, prepare_with};
use crate::device::cpu::matmul::Precision;
use crate::device::cpu::matmul::kquant::Isa as KQuantIsa;
use crate::device::cpu::matmul::packed::RepackCache;
use crate::device::cpu::matmul::qdot::Isa as Int8Isa;
use crate::device::cpu::{RawTensor, ThreadPool};
use ir::{DType, Layout, Op};
use kernels::reference::{Dense, compute, gather, scatter};
use kernels::testing::{Rng, nmse, nmse_threshold};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Bytes aligned to 64 (as the runtime's arenas and scratch are).
struct Buf(Vec<[u64; 8]>);

impl Buf {
    fn new(bytes: usize) -> Buf {
        Buf(vec![[0; 8]; bytes.div_ceil(64).max(1)])
    }
    fn bytes(&mut self) -> &mut [u8] {
        let n = self.0.len() * 64;
        // SAFETY: the Vec owns n bytes; u8 has no alignment or validity needs.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr() as *mut u8, n) }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr() as *mut u8
    }
}

/// A tensor: `layout` over a packed root of `root_ne` holding `values`
/// (rounded to the dtype).
struct Tensor {
    buf: Buf,
    layout: Layout,
}

impl Tensor {
    fn with_root(dtype: DType, values: &Dense, ne: [i64; 4]) -> Tensor {
        let root = Layout::contiguous(dtype, values.ne).expect("valid extents");
        let mut buf = Buf::new(root.span_bytes() as usize);
        scatter(values, buf.bytes(), &root);
        let layout = Layout { ne, ..root };
        Tensor { buf, layout }
    }

    fn filled(rng: &mut Rng, dtype: DType, ne: [i64; 4]) -> Tensor {
        let n = ne.iter().product::<i64>() as usize;
        Tensor::with_root(dtype, &Dense::new(ne, rng.vec(n, -1.0, 1.0)), ne)
    }

    fn poisoned(ne: [i64; 4]) -> Tensor {
        let mut t = Tensor::with_root(DType::F32, &Dense::zeros(ne), ne);
        for w in t.buf.bytes().chunks_exact_mut(4) {
            w.copy_from_slice(&f32::NAN.to_le_bytes());
        }
        t
    }

    fn values(&mut self) -> Dense {
        let layout = self.layout;
        gather(self.buf.bytes(), &layout)
    }

    fn raw(&mut self) -> RawTensor {
        RawTensor {
            data: self.buf.ptr(),
            dtype: self.layout.dtype,
            ne: self.layout.ne,
            nb: self.layout.nb,
        }
    }
}

/// One mul_mat_id's sizes and operands' dtypes.
#[derive(Clone, Copy, Debug)]
struct Case {
    dtype: DType,
    k: i64,
    n: i64,
    n_expert: usize,
    n_used: usize,
    t: usize,
    b1: usize,
    /// Activations' dtype.
    act: DType,
    /// Ids per token in the ids' root (llama.cpp's top-k view of argsort
    /// rows when above `n_used`).
    ids_row: usize,
    /// A `mul_mat_id_part`: (first, experts of the full set).
    part: Option<(i64, i64)>,
}

impl Case {
    fn new(
        dtype: DType,
        k: i64,
        n: i64,
        (n_expert, n_used, t, b1): (usize, usize, usize, usize),
    ) -> Case {
        Case {
            dtype,
            k,
            n,
            n_expert,
            n_used,
            t,
            b1,
            act: DType::F32,
            ids_row: n_used,
            part: None,
        }
    }

    /// The op: `mul_mat_id`, or the part's.
    fn op(&self) -> Op {
        match self.part {
            Some((first, experts)) => Op::MulMatIdPart { first, experts },
            None => Op::MulMatId,
        }
    }
}

/// How the kernel is prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// 8-bit activations, the experts a weight (repacked where the route does).
    FastWeights,
    /// 8-bit activations, the experts read in place.
    FastInPlace,
    /// Quantized experts widened to f32.
    Exact,
}

/// Ids for `n_used` distinct experts per token: expert 1 in most tokens
/// (a heavy expert), never the last two experts (unused ones).
fn skewed_ids(rng: &mut Rng, c: &Case) -> Vec<i32> {
    let usable = c.n_expert.saturating_sub(2).max(c.n_used);
    let mut ids = Vec::with_capacity(c.ids_row * c.t);
    for _ in 0..c.t {
        let mut row: Vec<usize> = Vec::new();
        if usable > 1 && rng.below(5) != 0 {
            row.push(1);
        }
        while row.len() < c.ids_row {
            let e = rng.below(usable.max(c.ids_row));
            if !row.contains(&e) {
                row.push(e);
            }
        }
        ids.extend(row.iter().map(|&e| e as i32));
    }
    ids
}

/// The operands of `c` (ids from `ids`, `ids_row` per token).
fn operands(rng: &mut Rng, c: &Case, ids: &[i32]) -> [Tensor; 3] {
    let a = Tensor::filled(rng, c.dtype, [c.k, c.n, c.n_expert as i64, 1]);
    let b = Tensor::filled(rng, c.act, [c.k, c.b1 as i64, c.t as i64, 1]);
    let root = Dense::new(
        [c.ids_row as i64, c.t as i64, 1, 1],
        ids.iter().map(|&v| f64::from(v)).collect(),
    );
    let ids = Tensor::with_root(DType::I32, &root, [c.n_used as i64, c.t as i64, 1, 1]);
    [a, b, ids]
}

/// Runs the kernel for `mode` on pools of 1, 2 and 3 threads; returns its
/// description and the NMSE of each run against the reference.
fn run(c: &Case, ops: &mut [Tensor; 3], mode: Mode, forced: Forced) -> (String, Vec<f64>) {
    let values: Vec<Dense> = ops.iter_mut().map(Tensor::values).collect();
    let ne = [c.n, c.n_used as i64, c.t as i64, 1];
    let out = Layout::contiguous(DType::F32, ne).unwrap();
    let want = compute(&c.op(), &[&values[0], &values[1], &values[2]], &out);
    let repack = RepackCache::new();
    let (precision, cache) = match mode {
        Mode::FastWeights => (Precision::Fast, Some(&repack)),
        Mode::FastInPlace => (Precision::Fast, None),
        Mode::Exact => (Precision::Exact, None),
    };
    let threads: &[usize] = if forced.mutant == Mutant::None {
        &[1, 2, 3]
    } else {
        &[1]
    };
    let mut what = String::new();
    let mut errors = Vec::new();
    for &nth in threads {
        let mut dst = Tensor::poisoned(ne);
        let srcs: Vec<RawTensor> = ops.iter_mut().map(Tensor::raw).collect();
        // SAFETY: the experts do not change while the kernel lives.
        let kernel = unsafe { prepare_with(&c.op(), dst.raw(), &srcs, precision, cache, forced) }
            .expect("prepared");
        what = kernel.describe();
        let mut scratch = Buf::new(kernel.scratch_bytes());
        let at = scratch.ptr() as usize;
        // SAFETY: the tensors and scratch outlive the run.
        ThreadPool::new(nth).run(&|ctx| unsafe { kernel.run(ctx, at as *mut u8) });
        errors.push(nmse(&want.data, &dst.values().data));
    }
    (what, errors)
}

/// `run` with the host's instruction sets, asserting every NMSE is within
/// mul_mat_id's threshold and the route is `route`.
fn check(rng: &mut Rng, c: &Case, mode: Mode, route: &str) {
    let ids = skewed_ids(rng, c);
    check_ids(rng, c, &ids, mode, route);
}

/// [`check`] with these ids.
fn check_ids(rng: &mut Rng, c: &Case, ids: &[i32], mode: Mode, route: &str) {
    let mut ops = operands(rng, c, ids);
    let (what, errors) = run(c, &mut ops, mode, Forced::default());
    let limit = nmse_threshold("mul_mat_id");
    for (nth, e) in errors.iter().enumerate() {
        assert!(
            *e <= limit,
            "{what} {mode:?} {c:?} on {} threads: NMSE {e:e} > {limit:e}",
            nth + 1
        );
    }
    assert!(
        what.contains(route),
        "{c:?} {mode:?}: {what}, wanted {route}"
    );
}

/// The route mul_mat takes for `dtype` in `mode` on this host (the SIMD
/// routes need AVX2; without it everything but scalar int8 tiles is f32).
fn route_of(dtype: DType, mode: Mode) -> &'static str {
    let simd = Int8Isa::detect() != Int8Isa::Scalar;
    match (dtype, mode) {
        (_, Mode::Exact) => "gemm",
        (DType::Q8_0 | DType::Q4_0 | DType::Q4_1, _) => "int8 dot",
        (DType::Q5_0 | DType::Q5_1, Mode::FastWeights) if simd => "int8 dot",
        (DType::Q4_K | DType::Q5_K | DType::Q6_K, Mode::FastWeights) => "int8",
        _ => "gemm",
    }
}

const DTYPES: [(DType, i64); 11] = [
    (DType::F32, 45),
    (DType::F16, 45),
    (DType::BF16, 45),
    (DType::Q8_0, 288),
    (DType::Q4_0, 288),
    (DType::Q4_1, 96),
    (DType::Q5_0, 288),
    (DType::Q5_1, 96),
    (DType::Q4_K, 512),
    (DType::Q5_K, 256),
    (DType::Q6_K, 512),
];

/// Every expert dtype on every route, b1 == 1 and b1 == n_used, decode and
/// 37 tokens with a heavy expert and unused ones.
#[test]
fn every_expert_dtype_and_route_matches_the_reference() {
    let mut rng = Rng::new(90);
    for (dtype, k) in DTYPES {
        for t in [1, 37] {
            for b1 in [1, 3] {
                let c = Case::new(dtype, k, 19, (7, 3, t, b1));
                for mode in [Mode::FastWeights, Mode::FastInPlace, Mode::Exact] {
                    check(&mut rng, &c, mode, route_of(dtype, mode));
                }
            }
        }
    }
}

/// Shapes past the small ones: rows in several L2 chunks and units shared
/// by threads, an expert with more than 64 columns, long rows (k = 2048)
/// with 8 of 16 experts per token, f16 activations, and ids read through
/// llama.cpp's top-k view.
#[test]
fn larger_shapes_f16_activations_and_strided_ids() {
    let mut rng = Rng::new(91);
    for dtype in [
        DType::Q8_0,
        DType::Q4_1,
        DType::Q4_K,
        DType::Q6_K,
        DType::F32,
    ] {
        let mode = Mode::FastWeights;
        // More columns for one expert than the int8 route's streams take
        // (64): its rows go through the L2 chunks.
        let c = Case::new(dtype, 512, 300, (5, 2, 100, 1));
        let ids = skewed_ids(&mut rng, &c);
        assert!(ids.iter().filter(|&&e| e == 1).count() > 64);
        check_ids(&mut rng, &c, &ids, mode, route_of(dtype, mode));
        for t in [1, 5] {
            let c = Case::new(dtype, 2048, 40, (16, 8, t, 8));
            check(&mut rng, &c, mode, route_of(dtype, mode));
        }
        let mut c = Case::new(dtype, 512, 33, (9, 2, 17, 2));
        c.act = DType::F16;
        c.ids_row = 6;
        check(&mut rng, &c, mode, route_of(dtype, mode));
    }
}

/// Every instruction set the host has, on the int8 and K-quant routes.
#[test]
fn every_instruction_set_the_host_has() {
    let mut rng = Rng::new(92);
    let limit = nmse_threshold("mul_mat_id");
    for (dtype, k) in DTYPES.into_iter().filter(|(d, _)| d.is_quantized()) {
        let c = Case::new(dtype, k, 21, (6, 2, 13, 1));
        let ids = skewed_ids(&mut rng, &c);
        let mut ops = operands(&mut rng, &c, &ids);
        let forced: Vec<Forced> = if matches!(dtype, DType::Q4_K | DType::Q5_K | DType::Q6_K) {
            KQuantIsa::available()
                .into_iter()
                .map(|isa| Forced {
                    kquant: Some(isa),
                    ..Forced::default()
                })
                .collect()
        } else {
            Int8Isa::available()
                .into_iter()
                .map(|isa| Forced {
                    int8: Some(isa),
                    ..Forced::default()
                })
                .collect()
        };
        for f in forced {
            let (what, errors) = run(&c, &mut ops, Mode::FastWeights, f);
            assert!(
                errors.iter().all(|&e| e <= limit),
                "{what} {c:?}: NMSE {errors:?}"
            );
        }
    }
}

/// What `prepare_op` gets (it knows neither precision nor weights): the
/// f32 route, whose NMSE is that of f32 sums, far below 8-bit activations'.
#[test]
fn prepare_op_takes_the_precise_route() {
    let mut rng = Rng::new(93);
    for (dtype, k) in [(DType::Q4_K, 512), (DType::Q8_0, 288)] {
        let c = Case::new(dtype, k, 19, (7, 3, 37, 1));
        let ids = skewed_ids(&mut rng, &c);
        let mut ops = operands(&mut rng, &c, &ids);
        let values: Vec<Dense> = ops.iter_mut().map(Tensor::values).collect();
        let ne = [c.n, 3, 37, 1];
        let out = Layout::contiguous(DType::F32, ne).unwrap();
        let want = compute(&c.op(), &[&values[0], &values[1], &values[2]], &out);
        let mut dst = Tensor::poisoned(ne);
        let srcs: Vec<RawTensor> = ops.iter_mut().map(Tensor::raw).collect();
        let kernel = crate::device::cpu::ops::prepare_op(&Op::MulMatId, dst.raw(), &srcs).unwrap();
        let mut scratch = Buf::new(kernel.scratch_bytes());
        let at = scratch.ptr() as usize;
        // SAFETY: the tensors and scratch outlive the run.
        ThreadPool::new(2).run(&|ctx| unsafe { kernel.run(ctx, at as *mut u8) });
        let e = nmse(&want.data, &dst.values().data);
        assert!(e < 1e-10, "{}: NMSE {e:e}", kernel.describe());
        assert!(kernel.describe().contains("gemm"), "{}", kernel.describe());
        let (fast, errors) = run(&c, &mut ops, Mode::FastWeights, Forced::default());
        assert!(
            errors.iter().all(|&f| f > e),
            "{fast}: {errors:?} against {e:e}"
        );
    }
}

/// Planted bugs (results scattered to the wrong dst rows; every slot
/// reading its token's first activation row) fail the comparison, on every
/// route: the tests above can fail.
#[test]
fn planted_bugs_fail_the_comparison() {
    let mut rng = Rng::new(94);
    let limit = nmse_threshold("mul_mat_id");
    for (dtype, k) in [(DType::Q4_1, 96), (DType::Q4_K, 512), (DType::F16, 45)] {
        for t in [1, 37] {
            let c = Case::new(dtype, k, 19, (7, 3, t, 3));
            let ids = skewed_ids(&mut rng, &c);
            let mut ops = operands(&mut rng, &c, &ids);
            for mutant in [Mutant::None, Mutant::WrongScatter, Mutant::WrongGather] {
                let forced = Forced {
                    mutant,
                    ..Forced::default()
                };
                let (what, errors) = run(&c, &mut ops, Mode::FastWeights, forced);
                let caught = errors.iter().all(|&e| e > limit);
                assert_eq!(
                    caught,
                    mutant != Mutant::None,
                    "{what} {mutant:?} {c:?}: NMSE {errors:?}"
                );
            }
        }
    }
}

/// An expert id outside `0..n_expert` stops the run with a panic naming
/// it, on every route and pool size (the pool re-raises it).
#[test]
fn an_expert_id_out_of_range_panics_naming_it() {
    let mut rng = Rng::new(95);
    for (dtype, k, mode) in [
        (DType::Q4_K, 512, Mode::FastWeights),
        (DType::Q8_0, 64, Mode::FastWeights),
        (DType::F32, 45, Mode::Exact),
    ] {
        for bad in [7, -1] {
            let c = Case::new(dtype, k, 19, (7, 2, 3, 1));
            let mut ops = operands(&mut rng, &c, &[0, 1, 2, bad, 4, 5]);
            for nth in [1, 2] {
                let got = catch_unwind(AssertUnwindSafe(|| {
                    let mut dst = Tensor::poisoned([c.n, 2, 3, 1]);
                    let srcs: Vec<RawTensor> = ops.iter_mut().map(Tensor::raw).collect();
                    let (precision, repack) = match mode {
                        Mode::Exact => (Precision::Exact, None),
                        _ => (Precision::Fast, Some(RepackCache::new())),
                    };
                    // SAFETY: the experts do not change while the kernel lives.
                    let kernel = unsafe {
                        prepare_with(
                            &Op::MulMatId,
                            dst.raw(),
                            &srcs,
                            precision,
                            repack.as_ref(),
                            Forced::default(),
                        )
                    }
                    .unwrap();
                    let mut scratch = Buf::new(kernel.scratch_bytes());
                    let at = scratch.ptr() as usize;
                    // SAFETY: the tensors and scratch outlive the run.
                    ThreadPool::new(nth).run(&|ctx| unsafe { kernel.run(ctx, at as *mut u8) });
                }))
                .expect_err("an id out of range must stop the run");
                let msg = got.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(
                    msg.contains(&format!("expert id {bad} (slot 1, token 1)"))
                        && msg.contains("outside 0..7"),
                    "{dtype} on {nth} threads: {msg:?}"
                );
            }
        }
    }
}

/// A `mul_mat_id_part` (experts 2..5 of 8, expert parallelism) on every
/// expert dtype and route: slots routed to another part's experts are rows
/// of zeros (dst is poisoned, so a row left unwritten fails), decode with
/// no slot here, and 37 tokens with some slots here.
#[test]
fn a_part_of_the_experts_gives_zeros_for_the_other_parts_slots() {
    let mut rng = Rng::new(93);
    for (dtype, k) in DTYPES {
        for t in [1, 37] {
            for b1 in [1, 3] {
                let mut c = Case::new(dtype, k, 19, (3, 3, t, b1));
                c.part = Some((2, 8));
                // Decode routes only to other parts' experts (0, 6, 7).
                let ids: Vec<i32> = if t == 1 {
                    vec![6, 0, 7]
                } else {
                    (0..t)
                        .flat_map(|tok| {
                            let first = (tok % 8) as i32;
                            [first, (first + 3) % 8, (first + 5) % 8]
                        })
                        .collect()
                };
                for mode in [Mode::FastWeights, Mode::FastInPlace, Mode::Exact] {
                    check_ids(&mut rng, &c, &ids, mode, route_of(dtype, mode));
                }
            }
        }
    }
}

/// A part refuses an id outside the full set, as mul_mat_id does, and
/// takes any id inside it.
#[test]
fn a_part_refuses_an_id_outside_the_full_set() {
    let mut rng = Rng::new(94);
    let mut c = Case::new(DType::Q8_0, 64, 5, (2, 1, 2, 1));
    c.part = Some((4, 6));
    for (ids, ok) in [([5, 0], true), ([6, 0], false), ([0, -1], false)] {
        let mut ops = operands(&mut rng, &c, &ids);
        let got = catch_unwind(AssertUnwindSafe(|| {
            run(&c, &mut ops, Mode::Exact, Forced::default())
        }));
        assert_eq!(got.is_ok(), ok, "ids {ids:?}");
    }
}
