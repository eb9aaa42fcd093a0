//! Tensor parallelism on a hand-made plan ([`super::tensor_parallel_plan`]):
//! the valid plan passes the whole checker, and each broken invariant of the
//! collective (family 10) and shard (family 11) families, and family 3's rule
//! on reading parts in place, is refused with its own message.

use super::*;
use compiler::check::{PlanViolation, ViolationKind as K, check_plan};
use ir::plan::DeviceKind;
use ir::plan::{parse_plan, plan_to_ron};

fn listed(v: &[PlanViolation]) -> String {
    v.iter().map(|x| format!("  [{}] {x}\n", x.what)).collect()
}

/// Every violation of `p`, op support on `cpu0+cpu1` included.
fn violations(p: &Plan) -> Vec<PlanViolation> {
    let target = Target::preset("cpu0+cpu1").expect("preset");
    check_plan(p, Some(&target))
}

/// Asserts that `p` has exactly one violation, of `kind`, whose text
/// (`name: message`) is `text`.
fn only(p: &Plan, kind: K, text: &str) -> PlanViolation {
    let v = violations(p);
    assert_eq!(v.len(), 1, "expected only `{text}`, got:\n{}", listed(&v));
    assert_eq!((v[0].what, v[0].to_string().as_str()), (kind, text));
    v[0].clone()
}

/// Asserts that one violation of `v` is of `kind` with text `text`.
fn has(v: &[PlanViolation], kind: K, text: &str) {
    assert!(
        v.iter().any(|x| x.what == kind && x.to_string() == text),
        "expected [{kind}] `{text}`, got:\n{}",
        listed(v)
    );
}

const T_UP1: usize = 2;
const T_DOWN1: usize = 4;
const T_H0: usize = 5;
const T_P0: u32 = 9;
const T_Y1: usize = 12;
const T_X_COPY: usize = 13;

#[test]
fn a_tensor_parallel_plan_passes_the_whole_checker() {
    let p = tensor_parallel_plan();
    let v = violations(&p);
    assert!(v.is_empty(), "{}", listed(&v));
    let v = check_plan(&p, None);
    assert!(v.is_empty(), "{}", listed(&v));
    // Its text parses back to the same plan (shards and collectives included).
    let text = plan_to_ron(&p);
    assert!(text.contains("ffn_down"), "{text}");
    assert_eq!(parse_plan(&text, "tp.ron").expect("parses"), p);
    // The compiler's sync pass finds events the checker accepts as well.
    let v = violations(&resync(p));
    assert!(v.is_empty(), "{}", listed(&v));
}

#[test]
fn every_stated_wait_is_needed() {
    // Each wait orders a read of bytes written on another stream: the copy of
    // x, and each participant's read of the other group's part.
    let p = tensor_parallel_plan();
    for (s, k) in [(1, 0), (1, 1), (2, 0)] {
        let mut q = p.clone();
        let wait = q.splits[s].waits.remove(k);
        let v = check_plan(&q, None);
        assert!(
            !v.is_empty() && v.iter().all(|x| x.what == K::Race),
            "split {s} without {wait:?}:\n{}",
            listed(&v)
        );
    }
}

#[test]
fn a_plain_weight_named_like_a_sharded_source_is_fine() {
    // Tied embeddings: the whole 'ffn_up' read by get_rows beside its shards.
    let mut p = tensor_parallel_plan();
    let whole = at(
        "ffn_up",
        DType::F32,
        [16, 32, 1, 1],
        Role::Weight,
        CORES0,
        1,
        2048,
    );
    add_graph_tensor(&mut p, whole);
    grow_arena(&mut p, 1, 2048);
    let v = violations(&p);
    assert!(v.is_empty(), "{}", listed(&v));
}

#[test]
fn overlapping_shards() {
    // 'ffn_up' is 24 wide; up#1 starts at 8: [8, 16) is loaded twice.
    let mut p = tensor_parallel_plan();
    for t in [1, T_UP1] {
        p.tensors[t].shard.as_mut().expect("shard").full_ne = [16, 24, 1, 1];
    }
    p.tensors[T_UP1].shard.as_mut().expect("shard").start = 8;
    only(
        &p,
        K::Shard,
        "source 'ffn_up': shards of 'ffn_up' along axis 1 overlap on [8, 16) \
         ('up#0' (t1) and 'up#1' (t2))",
    );
}

#[test]
fn a_gap_between_shards_and_a_missing_shard() {
    // 'ffn_down' is 40 long; down#1 starts at 24: [16, 24) is never loaded.
    let mut p = tensor_parallel_plan();
    for t in [3, T_DOWN1] {
        p.tensors[t].shard.as_mut().expect("shard").full_ne = [40, 16, 1, 1];
    }
    p.tensors[T_DOWN1].shard.as_mut().expect("shard").start = 24;
    only(
        &p,
        K::Shard,
        "source 'ffn_down': shards of 'ffn_down' along axis 0 leave [16, 24) uncovered",
    );

    // down#1 is no shard any more: the second half of 'ffn_down' is missing.
    let mut p = tensor_parallel_plan();
    p.tensors[T_DOWN1].shard = None;
    only(
        &p,
        K::Shard,
        "source 'ffn_down': shards of 'ffn_down' along axis 0 leave [16, 32) uncovered",
    );
}

#[test]
fn shards_that_disagree_on_their_source() {
    let mut p = tensor_parallel_plan();
    p.tensors[T_UP1].shard.as_mut().expect("shard").full_ne = [16, 48, 1, 1];
    only(
        &p,
        K::Shard,
        "source 'ffn_up': shards of 'ffn_up' disagree: 'up#1' (t2) says 'ffn_up' is \
         [16, 48, 1, 1], but 'up#0' (t1) says [16, 32, 1, 1]",
    );
}

#[test]
fn a_shard_that_is_no_weight() {
    let slice = |t: &PlanTensor| shard(t.clone(), "ffn_up", [16, 32, 1, 1], 1, 0);
    let mut p = tensor_parallel_plan();
    p.tensors[T_H0] = slice(&p.tensors[T_H0]);
    only(
        &p,
        K::Shard,
        "tensor 'h#0' (t5): is a shard of 'ffn_up', but its role is intermediate: \
         only weights are shards",
    );

    let mut p = tensor_parallel_plan();
    p.tensors[T_X_COPY] = slice(&p.tensors[T_X_COPY]);
    only(
        &p,
        K::Shard,
        "tensor 'x@cpu1' (t13): is a shard of 'ffn_up', but it is not a graph tensor \
         (t13 >= n_graph_tensors 13): only graph weights are shards",
    );

    // A slice outside its source (WeightShard::problem).
    let mut p = tensor_parallel_plan();
    p.tensors[T_UP1].shard.as_mut().expect("shard").start = 20;
    let v = violations(&p);
    has(
        &v,
        K::Shard,
        "tensor 'up#1' (t2): is a shard of 'ffn_up', but shard [20, 36) along axis 1 is \
         outside 'ffn_up' [16, 32, 1, 1]",
    );
}

/// `p` with graph tensor `z` [16, 4] (or the extents of `ne`) on cpu0 at
/// compute offset 1024, computed by `step(z)` after the rank-0 all-reduce.
fn with_reader_of_a_part(p: &mut Plan, ne: [i64; 4], step: impl FnOnce(u32) -> Step) -> u32 {
    let z = at("z", DType::F32, ne, Role::Output, CORES0, 3, 1024);
    let z = add_graph_tensor(p, z);
    grow_arena(p, 3, 256);
    p.splits[2].steps.push(step(z));
    z
}

#[test]
fn a_partial_sum_read_by_silu() {
    let mut p = tensor_parallel_plan();
    with_reader_of_a_part(&mut p, [16, 4, 1, 1], |z| op(Op::Silu, z, &[T_P0]));
    let v = only(
        &p,
        K::Collective,
        "tensor 'p#0' (t9): is a partial sum (part of collective group 1) but split 2 step 1 \
         (silu) reads it; only the collective adding it up (all_reduce_sum, \
         reduce_scatter_sum) may read it",
    );
    assert_eq!(v.tensor, Some(T_P0));

    // Through a view of its first row.
    let mut p = tensor_parallel_plan();
    let row = at(
        "p#0.row",
        DType::F32,
        [16, 1, 1, 1],
        Role::Intermediate,
        CORES0,
        3,
        0,
    );
    let view = Placement::View {
        of: T_P0,
        offset: 0,
    };
    let row = add_graph_tensor(&mut p, with(row, view));
    with_reader_of_a_part(&mut p, [16, 1, 1, 1], |z| op(Op::Silu, z, &[row]));
    only(
        &p,
        K::Collective,
        "tensor 'p#0' (t9): is a partial sum (part of collective group 1) but split 2 step 1 \
         (silu) reads it through 'p#0.row' (t13); only the collective adding it up \
         (all_reduce_sum, reduce_scatter_sum) may read it",
    );
}

#[test]
fn a_partial_sum_handed_out_as_a_graph_output() {
    // A linear step (scale without bias) keeps p#0 a partial sum; its result
    // is a graph output that no all-reduce adds up.
    let mut p = tensor_parallel_plan();
    let z = with_reader_of_a_part(&mut p, [16, 4, 1, 1], |z| {
        let scale = Op::Scale {
            scale: 2.0,
            bias: 0.0,
        };
        op(scale, z, &[T_P0])
    });
    p.tensors[z as usize].part = Some(ir::plan::SplitPart::Partial { of: "p".into() });
    only(
        &p,
        K::Collective,
        "tensor 'z' (t13): is a graph output but a partial sum that no all_reduce_sum or \
         reduce_scatter_sum adds up: the caller would read one device's share as the value",
    );
    // Not marked partial, the scale is a non-linear reader (the rule above).
    let mut p = tensor_parallel_plan();
    with_reader_of_a_part(&mut p, [16, 4, 1, 1], |z| {
        op(
            Op::Scale {
                scale: 2.0,
                bias: 0.0,
            },
            z,
            &[T_P0],
        )
    });
    let v = violations(&p);
    assert!(
        v.iter().all(|x| !x.to_string().contains("graph output")),
        "{}",
        listed(&v)
    );
}

#[test]
fn a_partial_sum_read_by_a_fused_kernel() {
    let mut p = tensor_parallel_plan();
    let z = with_reader_of_a_part(&mut p, [16, 4, 1, 1], |_| Step::Fused { kernel: 0 });
    p.kernels = vec![FusedKernel {
        inputs: vec![T_P0],
        output: z,
        nodes: vec![z],
        body: vec![Expr::Input(0), Expr::Unary(UnaryFn::Silu, 0)],
    }];
    only(
        &p,
        K::Collective,
        "tensor 'p#0' (t9): is a partial sum (part of collective group 1) but split 2 step 1 \
         (fused kernel 0) reads it; only the collective adding it up (all_reduce_sum, \
         reduce_scatter_sum) may read it",
    );
}

#[test]
fn a_partial_sum_copied() {
    // p#1 copied to cpu0 instead of read in place.
    let mut p = tensor_parallel_plan();
    let moved = at(
        "p#1@cpu0",
        DType::F32,
        [16, 4, 1, 1],
        Role::Intermediate,
        CORES0,
        3,
        1024,
    );
    p.tensors.push(copy_of(moved, 10));
    grow_arena(&mut p, 3, 256);
    p.splits[2].copies.push(copy(10, 14, 256, CORES0));
    p.stats.links.push(LinkStats {
        from: CORES1,
        to: CORES0,
        copies: 1,
        bytes: 256,
    });
    only(
        &resync(p),
        K::Collective,
        "tensor 'p#1' (t10): is a partial sum (part of collective group 1) but split 2 copy 0 \
         copies it; parts are read in place by the all-reduce, never copied",
    );
}

#[test]
fn a_collective_with_a_missing_participant() {
    // Rank 1's step is gone (and with it the wait before it, and y#1's writer).
    let mut p = tensor_parallel_plan();
    p.splits[1].steps.pop();
    p.splits[1].waits.pop();
    let v = violations(&p);
    has(
        &v,
        K::Collective,
        "collective group 1 (all_reduce_sum over 2 ranks): rank 1 is missing",
    );
    let others: Vec<_> = v.iter().filter(|x| x.what != K::Collective).collect();
    assert!(
        others.len() == 1 && others[0].what == K::Order && others[0].tensor == Some(T_Y1 as u32),
        "{}",
        listed(&v)
    );
}

#[test]
fn a_collective_with_a_rank_twice() {
    let mut p = tensor_parallel_plan();
    p.splits[1].steps[3] = op(all_reduce(0), T_Y1 as u32, &[9, 10]);
    let v = violations(&p);
    assert_eq!(v.len(), 2, "{}", listed(&v));
    has(
        &v,
        K::Collective,
        "collective group 1 (all_reduce_sum over 2 ranks): rank 0 appears twice \
         (split 1 step 3 and split 2 step 0)",
    );
    has(
        &v,
        K::Collective,
        "collective group 1 (all_reduce_sum over 2 ranks): rank 1 is missing",
    );
}

#[test]
fn participants_that_disagree() {
    // On their parts' order.
    let mut p = tensor_parallel_plan();
    p.splits[1].steps[3] = op(all_reduce(1), T_Y1 as u32, &[10, 9]);
    only(
        &p,
        K::Collective,
        "collective group 1 (all_reduce_sum over 2 ranks): rank 1 (split 1 step 3) reads \
         ['p#1' (t10), 'p#0' (t9)], but rank 0 (split 2 step 0) reads ['p#0' (t9), \
         'p#1' (t10)]: every participant reads the same parts in the same order",
    );

    // On the group's size.
    let mut p = tensor_parallel_plan();
    let three = Op::AllReduceSum {
        group: TP_GROUP,
        rank: 1,
        ranks: 3,
    };
    p.splits[1].steps[3] = op(three, T_Y1 as u32, &[9, 10]);
    only(
        &p,
        K::Collective,
        "collective group 1 (all_reduce_sum over 2 ranks): rank 1 (split 1 step 3) says \
         3 ranks, but rank 0 (split 2 step 0) says 2",
    );

    // On the op: rank 1 gathers the parts instead (its result's shape and its
    // reads of the partial sums are refused as well).
    let mut p = tensor_parallel_plan();
    let gather = Op::AllGather {
        dim: 1,
        group: TP_GROUP,
        rank: 1,
        ranks: 2,
    };
    p.splits[1].steps[3] = op(gather, T_Y1 as u32, &[9, 10]);
    let v = violations(&p);
    has(
        &v,
        K::Collective,
        "collective group 1 (all_reduce_sum over 2 ranks): rank 1 (split 1 step 3) is \
         all_gather along dim 1, but rank 0 (split 2 step 0) is all_reduce_sum",
    );
    has(
        &v,
        K::Collective,
        "tensor 'p#1' (t10): is a partial sum (part of collective group 1) but split 1 step 3 \
         (all_gather) reads it; only the collective adding it up (all_reduce_sum, \
         reduce_scatter_sum) may read it",
    );
    assert!(v.iter().any(|x| x.what == K::Format), "{}", listed(&v));
}

#[test]
fn two_participants_on_one_device() {
    // Rank 1 runs on cpu0 too, after rank 0, writing y#1 there.
    let mut p = tensor_parallel_plan();
    let rank1 = p.splits[1].steps.pop().expect("rank 1");
    p.splits[1].waits.pop();
    p.splits[2].steps.push(rank1);
    p.tensors[T_Y1].device = CORES0;
    p.tensors[T_Y1].placement = Placement::Arena {
        arena: 3,
        offset: 1024,
    };
    grow_arena(&mut p, 3, 256);
    only(
        &resync(p),
        K::Collective,
        "collective group 1 (all_reduce_sum over 2 ranks): rank 0 (split 2 step 0) and \
         rank 1 (split 2 step 1) both run on 'cpu0' (d0): each participant needs its own device",
    );
}

#[test]
fn parts_read_in_place_across_devices_that_share_no_memory() {
    // Family 3: core group 1 becomes a GPU; neither participant may read the
    // other's part in place.
    let mut p = tensor_parallel_plan();
    p.devices[1].kind = DeviceKind::Cuda { ordinal: 0 };
    let v = check_plan(&p, None);
    assert_eq!(v.len(), 2, "{}", listed(&v));
    has(
        &v,
        K::Device,
        "tensor 'p#0' (t9): is read in place by split 1 step 3 (all_reduce_sum) on 'cpu1' \
         (d1), but its bytes are on 'cpu0' (d0), which does not share memory with it \
         (collectives read parts in place only between CPU devices)",
    );
    has(
        &v,
        K::Device,
        "tensor 'p#1' (t10): is read in place by split 2 step 0 (all_reduce_sum) on 'cpu0' \
         (d0), but its bytes are on 'cpu1' (d1), which does not share memory with it \
         (collectives read parts in place only between CPU devices)",
    );
}

/// Every number of `text` replaced, one at a time, by small, boundary and huge values.
fn number_mutations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let end = (i..bytes.len())
            .find(|&j| !bytes[j].is_ascii_digit())
            .unwrap_or(bytes.len());
        for value in [
            "0",
            "1",
            "2",
            "3",
            "17",
            "4294967295",
            "9223372036854775807",
        ] {
            out.push(format!("{}{value}{}", &text[..i], &text[end..]));
        }
        i = end;
    }
    out
}

#[test]
fn mutated_tensor_parallel_plans_never_panic() {
    let text = plan_to_ron(&tensor_parallel_plan());
    let mut texts = number_mutations(&text);
    for (from, to) in [
        ("AllReduceSum(", "AllGather(dim: 7, "),
        ("group: 1", "group: 0"),
        ("axis: 1", "axis: 200"),
        ("start: 16", "start: -16"),
    ] {
        texts.push(text.replacen(from, to, 1));
    }
    let mut parsed = 0;
    for t in &texts {
        if let Ok(p) = parse_plan(t, "fuzz.ron") {
            parsed += 1;
            let _ = violations(&p);
        }
    }
    assert!(
        parsed > 100,
        "only {parsed} of {} texts parsed",
        texts.len()
    );
}

/// A `reduce_scatter_sum` participant of [`TP_GROUP`] over two ranks.
fn scatter(rank: u32, start: i64, len: i64) -> Op {
    Op::ReduceScatterSum {
        dim: 1,
        start,
        len,
        group: TP_GROUP,
        rank,
        ranks: 2,
    }
}

/// The tensor-parallel plan with its all-reduce turned into a reduce-scatter
/// along dim 1: rank 0 keeps rows `[0, rows0)` in `y`, rank 1 the rest in `y#1`.
fn reduce_scatter_plan(rows0: i64, (start1, len1): (i64, i64)) -> Plan {
    let mut p = tensor_parallel_plan();
    let (y, y1) = (T_Y1 - 1, T_Y1);
    let relaid = |t: &PlanTensor, rows| {
        let mut u = at(
            &t.name,
            DType::F32,
            [16, rows, 1, 1],
            t.role,
            t.device,
            0,
            0,
        );
        u.placement = t.placement;
        u
    };
    p.tensors[y] = relaid(&p.tensors[y], rows0);
    p.tensors[y1] = relaid(&p.tensors[y1], len1);
    p.splits[2].steps[0] = op(scatter(0, 0, rows0), y as u32, &[9, 10]);
    p.splits[1].steps[3] = op(scatter(1, start1, len1), y1 as u32, &[9, 10]);
    p
}

#[test]
fn a_reduce_scatter_whose_slices_tile_the_axis_passes() {
    for (rows0, rank1) in [(2, (2, 2)), (1, (1, 3)), (3, (3, 1))] {
        let p = reduce_scatter_plan(rows0, rank1);
        let v = violations(&p);
        assert!(v.is_empty(), "{rows0} {rank1:?}: {}", listed(&v));
        let v = violations(&resync(p));
        assert!(v.is_empty(), "{}", listed(&v));
    }
}

#[test]
fn a_reduce_scatter_with_a_gap_an_overlap_or_a_short_end() {
    only(
        &reduce_scatter_plan(1, (2, 2)),
        K::Collective,
        "collective group 1 (reduce_scatter_sum over 2 ranks): rank 1 (split 1 step 3) keeps \
         [2, 4) along dim 1, leaving [1, 2) to no rank",
    );
    only(
        &reduce_scatter_plan(2, (1, 3)),
        K::Collective,
        "collective group 1 (reduce_scatter_sum over 2 ranks): rank 1 (split 1 step 3) keeps \
         [1, 4) along dim 1, overlapping the slice before it, which ends at 2",
    );
    only(
        &reduce_scatter_plan(2, (2, 1)),
        K::Collective,
        "collective group 1 (reduce_scatter_sum over 2 ranks): the slices end at 3 along \
         dim 1, but the parts' extent is 4: every index must be kept by exactly one rank",
    );
    // Along another axis than rank 0's.
    let mut p = reduce_scatter_plan(2, (2, 2));
    let other = Op::ReduceScatterSum {
        dim: 0,
        start: 8,
        len: 8,
        group: TP_GROUP,
        rank: 1,
        ranks: 2,
    };
    p.splits[1].steps[3] = op(other, T_Y1 as u32, &[9, 10]);
    let v = violations(&p);
    has(
        &v,
        K::Collective,
        "collective group 1 (reduce_scatter_sum over 2 ranks): rank 1 (split 1 step 3) is \
         reduce_scatter_sum along dim 0, but rank 0 (split 2 step 0) is reduce_scatter_sum \
         along dim 1",
    );
    // Its result's shape is refused too; its slice is not compared along dim 1.
    assert_eq!(v.len(), 2, "{}", listed(&v));
    assert!(v.iter().any(|x| x.what == K::Format), "{}", listed(&v));
}
