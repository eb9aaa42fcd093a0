//! Passes `schedule` and `split + copies` on hand-built graphs with hand-made
//! assignments over the devices of the `cpu+cuda0+cuda1` preset, and on the
//! 2-layer llama example split across two devices.

use compiler::assign::Assignment;
use compiler::emit::compute_liveness;
use compiler::memory::lower_bound;
use compiler::schedule::{Schedule, dependencies, schedule_nodes};
use compiler::split::{CopyDraft, SplitDraft, SplitError, split_and_copy};
use compiler::{DeviceId, Target};
use ir::{DType, Graph, GraphBuilder, Op, TensorId};

/// The device ids of `cpu+cuda0+cuda1`: (cuda0, cuda1, cpu).
fn devices() -> (DeviceId, DeviceId, DeviceId) {
    let t = Target::preset("cpu+cuda0+cuda1").expect("preset exists");
    let id = |n: &str| t.device_id(n).expect("device exists");
    (id("cuda0"), id("cuda1"), id("cpu"))
}

fn example(name: &str) -> Graph {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/graphs");
    ir::text::read_graph(&dir.join(name)).expect("example graph parses")
}

/// An assignment where `place` decides every tensor that owns its bytes, and
/// views and write-into nodes take their root's device (the assign invariant).
fn assignment(g: &Graph, place: impl Fn(TensorId) -> DeviceId) -> Assignment {
    let device: Vec<DeviceId> = g.ids().map(|id| place(g.storage_of(id).root)).collect();
    Assignment {
        reason: vec!["by hand".to_string(); device.len()],
        device,
        parts: Vec::new(),
    }
}

/// Places tensors by name; unnamed ones on `default`.
fn by_name(g: &Graph, default: DeviceId, named: &[(&str, DeviceId)]) -> Assignment {
    assignment(g, |id| {
        let name = &g.tensor(id).name;
        named
            .iter()
            .find(|(n, _)| n == name)
            .map_or(default, |&(_, d)| d)
    })
}

fn is_view(g: &Graph, id: TensorId) -> bool {
    g.tensor(id).op.as_ref().is_some_and(Op::is_view)
}

/// Re-derived independently: every node once, no leaf, each after its sources.
fn assert_valid_order(g: &Graph, order: &[TensorId]) {
    let mut step = vec![None; g.len()];
    for (s, &id) in order.iter().enumerate() {
        assert!(!g.tensor(id).is_leaf(), "leaf {id} scheduled");
        assert!(step[id.index()].replace(s).is_none(), "{id} twice");
    }
    for id in g.nodes() {
        let s = step[id.index()].unwrap_or_else(|| panic!("{id} missing"));
        for &src in &g.tensor(id).srcs {
            if !g.tensor(src).is_leaf() {
                assert!(step[src.index()] < Some(s), "{src} not before {id}");
            }
        }
    }
    // The liveness pass accepts it as an execution order too.
    compute_liveness(g, order, 64).expect("an execution order");
}

/// Position of every tensor in `order`.
fn positions(g: &Graph, order: &[TensorId]) -> impl Fn(&str) -> usize {
    let order = order.to_vec();
    let ids: Vec<(String, TensorId)> = g.ids().map(|id| (g.tensor(id).name.clone(), id)).collect();
    move |name: &str| {
        let id = ids.iter().find(|(n, _)| n == name).expect("named tensor").1;
        order.iter().position(|&x| x == id).expect("scheduled")
    }
}

fn input_order(g: &Graph) -> Schedule {
    Schedule {
        order: g.nodes().collect(),
    }
}

fn names(g: &Graph, ids: &[TensorId]) -> Vec<String> {
    ids.iter().map(|&id| g.tensor(id).name.clone()).collect()
}

fn all_copies(splits: &[SplitDraft]) -> Vec<(usize, CopyDraft)> {
    splits
        .iter()
        .enumerate()
        .flat_map(|(k, s)| s.copies.iter().map(move |&c| (k, c)))
        .collect()
}

/// Checks the split invariants of the module doc against the schedule.
fn assert_split_invariants(g: &Graph, a: &Assignment, sched: &Schedule, splits: &[SplitDraft]) {
    let flat: Vec<TensorId> = splits.iter().flat_map(|s| s.nodes.clone()).collect();
    let non_views: Vec<TensorId> = sched
        .order
        .iter()
        .copied()
        .filter(|&id| !is_view(g, id))
        .collect();
    assert_eq!(flat, non_views);
    for (k, s) in splits.iter().enumerate() {
        assert!(!s.nodes.is_empty());
        if k > 0 {
            assert_ne!(splits[k - 1].device, s.device, "split {k} is not maximal");
        }
        for &n in &s.nodes {
            assert_eq!(a.device[n.index()], s.device);
        }
        for c in &s.copies {
            assert_ne!(c.from, c.to, "copy to the device holding the bytes");
            assert_eq!(c.to, s.device);
            assert_eq!(c.from, a.device[c.tensor.index()]);
            assert!(g.tensor(c.tensor).view.is_none(), "copies move roots");
            assert_eq!(c.bytes, g.tensor(c.tensor).layout.span_bytes());
        }
    }
    // Every cross-device read finds a copy of its root on its device, placed
    // no later than its split.
    for (k, s) in splits.iter().enumerate() {
        for &n in &s.nodes {
            for &src in &g.tensor(n).srcs {
                let root = g.storage_of(src).root;
                if a.device[root.index()] == s.device {
                    continue;
                }
                let found = splits[..=k].iter().any(|e| {
                    e.copies
                        .iter()
                        .any(|c| c.tensor == root && c.to == s.device)
                });
                assert!(found, "no copy of {root} for {n}");
            }
        }
    }
}

/// Two independent chains on cuda0 and cuda1, listed interleaved, joined at
/// the end on cuda0.
fn interleaved() -> Graph {
    let mut b = GraphBuilder::new("interleaved");
    let x = b.input("x", DType::F32, [8, 4, 1, 1]).unwrap();
    let mut a = x;
    let mut c = x;
    for i in 1..=3 {
        a = b.silu(format!("a{i}"), a).unwrap();
        c = b.unary(format!("b{i}"), Op::Relu, c).unwrap();
    }
    let out = b.add("out", a, c).unwrap();
    b.mark_output(out).unwrap();
    b.finish().unwrap()
}

fn interleaved_assignment(g: &Graph) -> Assignment {
    let (c0, c1, _) = devices();
    assignment(g, |id| {
        if g.tensor(id).name.starts_with('b') {
            c1
        } else {
            c0
        }
    })
}

#[test]
fn grouping_per_device_cuts_splits_on_an_interleaved_graph() {
    let g = interleaved();
    let a = interleaved_assignment(&g);
    let (c0, c1, _) = devices();

    let naive = split_and_copy(&g, &a, &input_order(&g)).unwrap();
    assert_eq!(naive.len(), 7, "input order switches at every node");

    let sched = schedule_nodes(&g, &a);
    assert_valid_order(&g, &sched.order);
    assert_eq!(
        names(&g, &sched.order),
        ["a1", "a2", "a3", "b1", "b2", "b3", "out"]
    );
    let splits = split_and_copy(&g, &a, &sched).unwrap();
    assert_split_invariants(&g, &a, &sched, &splits);
    let devs: Vec<DeviceId> = splits.iter().map(|s| s.device).collect();
    assert_eq!(devs, [c0, c1, c0]);
    // x (an input leaf on cuda0) goes to cuda1 once, in cuda1's first split;
    // b3 comes back for `out`.
    let id = |n: &str| g.find(n).unwrap();
    let x_bytes = 8 * 4 * 4;
    assert_eq!(
        all_copies(&splits),
        [
            (
                1,
                CopyDraft {
                    tensor: id("x"),
                    from: c0,
                    to: c1,
                    bytes: x_bytes
                }
            ),
            (
                2,
                CopyDraft {
                    tensor: id("b3"),
                    from: c1,
                    to: c0,
                    bytes: x_bytes
                }
            ),
        ]
    );
    // The naive order copies the same tensors (dedup) but cuts 7 splits.
    assert_eq!(all_copies(&naive).len(), 2);
}

#[test]
fn schedules_are_complete_topological_and_deterministic() {
    let (c0, c1, cpu) = devices();
    let mut cases: Vec<(Graph, Assignment)> = Vec::new();
    for name in ["mlp.ron", "llama2l.ron", "bert2l.ron"] {
        let g = example(name);
        // One device; two alternating by id (a worst case for switches);
        // three by id modulo 3.
        let one = assignment(&g, |_| c0);
        let two = assignment(&g, |id| if id.0 % 2 == 0 { c0 } else { c1 });
        let three = assignment(&g, |id| [c0, c1, cpu][id.index() % 3]);
        cases.push((g.clone(), one));
        cases.push((g.clone(), two));
        cases.push((g, three));
    }
    for (g, a) in &cases {
        let s1 = schedule_nodes(g, a);
        assert_valid_order(g, &s1.order);
        let s2 = schedule_nodes(g, a);
        assert_eq!(s1, s2, "{}: schedule not deterministic", g.name);
        let splits = split_and_copy(g, a, &s1).unwrap();
        assert_eq!(splits, split_and_copy(g, a, &s2).unwrap());
        assert_split_invariants(g, a, &s1, &splits);
        // Never more splits than the input order.
        let naive = split_and_copy(g, a, &input_order(g)).unwrap();
        assert!(
            splits.len() <= naive.len(),
            "{}: {} > {}",
            g.name,
            splits.len(),
            naive.len()
        );
        // Every dependency (sources and hazards) respected.
        let deps = dependencies(g);
        let pos = |id: TensorId| s1.order.iter().position(|&x| x == id);
        for id in g.nodes() {
            for &d in &deps[id.index()] {
                assert!(pos(d) < pos(id));
            }
        }
    }
}

/// Peak live compute bytes (no in-place reuse) of `order`.
fn peak(g: &Graph, order: &[TensorId]) -> u64 {
    lower_bound(&compute_liveness(g, order, 1).unwrap().tensors)
}

#[test]
fn single_device_keeps_the_input_order_unless_memory_gains() {
    let (c0, _, _) = devices();
    let non_view = |g: &Graph, o: &[TensorId]| -> Vec<String> {
        let kept: Vec<TensorId> = o.iter().copied().filter(|&id| !is_view(g, id)).collect();
        names(g, &kept)
    };
    for name in ["mlp.ron", "llama2l.ron"] {
        let g = example(name);
        let a = assignment(&g, |_| c0);
        let sched = schedule_nodes(&g, &a);
        assert_eq!(
            non_view(&g, &sched.order),
            non_view(&g, &input_order(&g).order),
            "{name}"
        );
        assert_eq!(split_and_copy(&g, &a, &sched).unwrap().len(), 1);
    }
    // bert2l lists q, k, v, then kq: the scheduler runs kq and its softmax
    // (which free q and k) before computing v.
    let g = example("bert2l.ron");
    let a = assignment(&g, |_| c0);
    let sched = schedule_nodes(&g, &a);
    let got = non_view(&g, &sched.order);
    let at = got.iter().position(|n| n == "l0.k").unwrap();
    assert_eq!(
        got[at..at + 6],
        [
            "l0.k",
            "l0.kq",
            "l0.kq_soft_max",
            "l0.v.mm",
            "l0.v",
            "l0.v_t"
        ]
    );
    let (ours, theirs) = (peak(&g, &sched.order), peak(&g, &input_order(&g).order));
    assert!(ours <= theirs, "{ours} > {theirs}");
    eprintln!("bert2l peak live bytes: scheduled {ours}, input order {theirs}");
}

#[test]
fn memory_tie_break_consumes_before_producing() {
    // u1 and u2 are both ready; the input order keeps both alive at once.
    let mut b = GraphBuilder::new("mem");
    let x = b.input("x", DType::F32, [64, 4, 1, 1]).unwrap();
    let u1 = b.silu("u1", x).unwrap();
    let u2 = b.unary("u2", Op::Relu, x).unwrap();
    let v1 = b.sum_rows("v1", u1).unwrap();
    let v2 = b.sum_rows("v2", u2).unwrap();
    let out = b.add("out", v1, v2).unwrap();
    b.mark_output(out).unwrap();
    let g = b.finish().unwrap();
    let (c0, _, _) = devices();
    let a = assignment(&g, |_| c0);
    let sched = schedule_nodes(&g, &a);
    assert_eq!(names(&g, &sched.order), ["u1", "v1", "u2", "v2", "out"]);
    assert_eq!(peak(&g, &sched.order), 1024 + 16 + 16);
    assert_eq!(peak(&g, &input_order(&g).order), 2048 + 16);
}

/// A KV-cache-like graph: `cache` (state, cuda0) is read whole on cuda1
/// (`r0`, before the write), written through a view by `kc = cpy(k, kview)`,
/// then read whole on cuda0 (`r1`) and on cuda1 (`r2`).
fn kv_graph() -> (Graph, Assignment) {
    let mut b = GraphBuilder::new("kv");
    let cache = b.state("cache", DType::F32, [8, 16, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [8, 4, 1, 1]).unwrap();
    let y = b.input("y", DType::F32, [8, 4, 1, 1]).unwrap();
    let kall = b
        .view("kall", cache, [8, 16, 1, 1], [32, 512, 512], 0)
        .unwrap();
    let r0 = b.sum_rows("r0", kall).unwrap();
    let z = b.unary("z", Op::Sqr, y).unwrap();
    let k = b.silu("k", x).unwrap();
    let kview = b
        .view("kview", cache, [8, 4, 1, 1], [32, 128, 128], 128)
        .unwrap();
    let _kc = b.cpy("kc", k, kview).unwrap();
    let r1 = b.sum_rows("r1", kall).unwrap();
    let r2 = b.sum_rows("r2", kall).unwrap();
    for o in [r0, z, r1, r2] {
        b.mark_output(o).unwrap();
    }
    let g = b.finish().unwrap();
    let (c0, c1, _) = devices();
    let a = by_name(&g, c0, &[("x", c1), ("r0", c1), ("k", c1), ("r2", c1)]);
    (g, a)
}

#[test]
fn state_hazards_keep_reads_and_writes_in_graph_order() {
    let (g, a) = kv_graph();
    let (c0, c1, _) = devices();
    let id = |n: &str| g.find(n).unwrap();
    // The hazard edges: kc after the earlier reader r0; r1, r2 after kc.
    let deps = dependencies(&g);
    assert!(deps[id("kc").index()].contains(&id("r0")));
    assert!(deps[id("r1").index()].contains(&id("kc")));
    assert!(deps[id("r2").index()].contains(&id("kc")));
    assert!(deps[id("z").index()].is_empty());

    let sched = schedule_nodes(&g, &a);
    assert_valid_order(&g, &sched.order);
    let pos = positions(&g, &sched.order);
    assert!(pos("r0") < pos("kc"), "write before an earlier read");
    assert!(
        pos("kc") < pos("r1") && pos("kc") < pos("r2"),
        "read before the write"
    );
    // Views of the state leaf are emitted first. On cuda1, k (handed off to
    // kc on cuda0) runs before r0. Without the hazard edges r2 would be ready
    // at once and run right after r0 on cuda1, before kc.
    assert_eq!(
        names(&g, &sched.order),
        ["kall", "kview", "k", "r0", "kc", "z", "r1", "r2"]
    );

    let splits = split_and_copy(&g, &a, &sched).unwrap();
    assert_split_invariants(&g, &a, &sched, &splits);
    let devs: Vec<DeviceId> = splits.iter().map(|s| s.device).collect();
    assert_eq!(devs, [c1, c0, c1]);
    // The cache goes to cuda1 twice: before the write for r0 (split 0, a leaf
    // is there from the start), after it for r2 (the first cuda1 split after
    // kc's). k goes to cuda0 for kc.
    let cache = |bytes| CopyDraft {
        tensor: id("cache"),
        from: c0,
        to: c1,
        bytes,
    };
    assert_eq!(
        all_copies(&splits),
        [
            (0, cache(512)),
            (
                1,
                CopyDraft {
                    tensor: id("k"),
                    from: c1,
                    to: c0,
                    bytes: 128
                }
            ),
            (2, cache(512)),
        ]
    );
}

#[test]
fn copies_are_deduplicated_and_placed_in_the_earliest_split() {
    // a (cuda0) -> b (cuda1) -> c (cuda0) -> e (cuda1) reading a and w too.
    let mut b = GraphBuilder::new("chain");
    let x = b.input("x", DType::F32, [8, 4, 1, 1]).unwrap();
    let w = b.weight("w", DType::F32, [8, 4, 1, 1]).unwrap();
    let a_ = b.silu("a", x).unwrap();
    let b_ = b.unary("b", Op::Relu, a_).unwrap();
    let c_ = b.add("c", b_, x).unwrap();
    let e1 = b.add("e1", c_, a_).unwrap();
    let e = b.mul("e", e1, w).unwrap();
    b.mark_output(e).unwrap();
    let g = b.finish().unwrap();
    let (c0, c1, _) = devices();
    let a = by_name(&g, c0, &[("b", c1), ("e1", c1), ("e", c1)]);
    let sched = schedule_nodes(&g, &a);
    assert_eq!(names(&g, &sched.order), ["a", "b", "c", "e1", "e"]);
    let splits = split_and_copy(&g, &a, &sched).unwrap();
    assert_split_invariants(&g, &a, &sched, &splits);
    assert_eq!(splits.len(), 4);
    let id = |n: &str| g.find(n).unwrap();
    let copy = |t: &str, from, to| CopyDraft {
        tensor: id(t),
        from,
        to,
        bytes: 128,
    };
    // `a` is read on cuda1 by b (split 1) and e1 (split 3): one copy, in split 1.
    // `w` (a weight on cuda0) is first read in split 3 but available from the
    // start: it goes into cuda1's first split. b and c come back as produced.
    assert_eq!(
        all_copies(&splits),
        [
            (1, copy("w", c0, c1)),
            (1, copy("a", c0, c1)),
            (2, copy("b", c1, c0)),
            (3, copy("c", c0, c1)),
        ]
    );
}

#[test]
fn views_read_across_devices_copy_their_root() {
    let mut b = GraphBuilder::new("views");
    let w = b.weight("w", DType::F32, [8, 8, 1, 1]).unwrap();
    let x = b.input("x", DType::F32, [8, 4, 1, 1]).unwrap();
    let m = b.mul_mat("m", w, x).unwrap(); // [8, 4]
    let half = b.view("m.half", m, [8, 2, 1, 1], [32, 64, 64], 64).unwrap();
    let t = b.transpose("m.half.t", half).unwrap();
    let r0 = b.cont("r0", t).unwrap();
    let r1 = b.sum_rows("r1", half).unwrap();
    let out = b.add("out", r1, r1).unwrap();
    b.mark_output(r0).unwrap();
    b.mark_output(out).unwrap();
    let g = b.finish().unwrap();
    let (c0, c1, cpu) = devices();
    let a = by_name(&g, c0, &[("r0", c1), ("r1", cpu)]);
    // Views are on their root's device whatever they are read by.
    assert_eq!(a.device[g.find("m.half.t").unwrap().index()], c0);
    let sched = schedule_nodes(&g, &a);
    assert_valid_order(&g, &sched.order);
    let splits = split_and_copy(&g, &a, &sched).unwrap();
    assert_split_invariants(&g, &a, &sched, &splits);
    // View nodes are in no split.
    assert!(
        splits
            .iter()
            .flat_map(|s| &s.nodes)
            .all(|&n| !is_view(&g, n))
    );
    let m_id = g.find("m").unwrap();
    let copies = all_copies(&splits);
    // m (the root, 128 bytes, not the 64-byte view) goes to cuda1 and to the
    // cpu, once each, from cuda0; r1 comes back to cuda0 for out.
    let of_m: Vec<_> = copies.iter().filter(|(_, c)| c.tensor == m_id).collect();
    assert_eq!(of_m.len(), 2);
    for (_, c) in &of_m {
        assert_eq!((c.from, c.bytes), (c0, 128));
    }
    let mut tos: Vec<DeviceId> = of_m.iter().map(|(_, c)| c.to).collect();
    tos.sort();
    let mut want = vec![c1, cpu];
    want.sort();
    assert_eq!(tos, want);
    assert_eq!(copies.len(), 3);
}

#[test]
fn three_devices_copy_from_the_holder_once_per_destination() {
    let mut b = GraphBuilder::new("fan");
    let x = b.input("x", DType::F32, [16, 4, 1, 1]).unwrap();
    let h = b.silu("h", x).unwrap();
    let p = b.unary("p", Op::Relu, h).unwrap();
    let q = b.unary("q", Op::Tanh, h).unwrap();
    let p2 = b.add("p2", p, h).unwrap();
    let q2 = b.add("q2", q, h).unwrap();
    let out = b.add("out", p2, q2).unwrap();
    b.mark_output(out).unwrap();
    let g = b.finish().unwrap();
    let (c0, c1, cpu) = devices();
    let a = by_name(&g, c0, &[("p", c1), ("p2", c1), ("q", cpu), ("q2", cpu)]);
    let sched = schedule_nodes(&g, &a);
    assert_valid_order(&g, &sched.order);
    let splits = split_and_copy(&g, &a, &sched).unwrap();
    assert_split_invariants(&g, &a, &sched, &splits);
    let devs: Vec<DeviceId> = splits.iter().map(|s| s.device).collect();
    assert_eq!(devs, [c0, c1, cpu, c0]);
    let h = g.find("h").unwrap();
    let of_h: Vec<(usize, DeviceId, DeviceId)> = all_copies(&splits)
        .into_iter()
        .filter(|(_, c)| c.tensor == h)
        .map(|(k, c)| (k, c.from, c.to))
        .collect();
    assert_eq!(of_h, [(1, c0, c1), (2, c0, cpu)]);
    // h, and p2 and q2 back to cuda0 for out.
    assert_eq!(all_copies(&splits).len(), 4);
}

#[test]
fn llama2l_with_layer_1_on_another_device() {
    let g = example("llama2l.ron");
    let (c0, c1, _) = devices();
    let a = assignment(&g, |id| {
        if compiler::layer_of(&g.tensor(id).name) == Some(1) {
            c0
        } else {
            c1
        }
    });
    let sched = schedule_nodes(&g, &a);
    assert_valid_order(&g, &sched.order);
    let splits = split_and_copy(&g, &a, &sched).unwrap();
    assert_split_invariants(&g, &a, &sched, &splits);
    let devs: Vec<DeviceId> = splits.iter().map(|s| s.device).collect();
    assert_eq!(devs, [c1, c0, c1]);
    let copies: Vec<(usize, String, DeviceId, u64)> = all_copies(&splits)
        .into_iter()
        .map(|(k, c)| (k, g.tensor(c.tensor).name.clone(), c.to, c.bytes))
        .collect();
    // Layer 1 needs the residual stream and the two constants it reads; the
    // head needs layer 1's output back.
    let expect = [
        (1, "pos", c0, 128 * 4),
        (1, "kq_mask", c0, 128 * 128 * 4),
        (1, "l0.l_out", c0, 512 * 128 * 4),
        (2, "l1.l_out", c1, 512 * 128 * 4),
    ];
    let expect: Vec<(usize, String, DeviceId, u64)> = expect
        .iter()
        .map(|&(k, n, d, b)| (k, n.to_string(), d, b))
        .collect();
    assert_eq!(copies, expect);
    let total: u64 = copies.iter().map(|c| c.3).sum();
    assert_eq!(total, 590_336);
    // The input order gives the same cuts here: the layers are already contiguous.
    assert_eq!(split_and_copy(&g, &a, &input_order(&g)).unwrap(), splits);
}

#[test]
fn bad_inputs_are_errors() {
    let g = interleaved();
    let a = interleaved_assignment(&g);
    let id = |n: &str| g.find(n).unwrap();

    let short = Assignment {
        device: a.device[..3].to_vec(),
        reason: a.reason[..3].to_vec(),
        parts: Vec::new(),
    };
    assert!(matches!(
        split_and_copy(&g, &short, &input_order(&g)),
        Err(SplitError::AssignmentLength { .. })
    ));

    let bad = |order: Vec<TensorId>| {
        let e = split_and_copy(&g, &a, &Schedule { order }).unwrap_err();
        assert!(matches!(e, SplitError::Schedule { .. }), "{e}");
        e.to_string()
    };
    let mut missing = input_order(&g).order;
    missing.pop();
    assert!(bad(missing).contains("'out' never runs"));
    let mut twice = input_order(&g).order;
    twice.push(id("a1"));
    assert!(bad(twice).contains("runs twice"));
    let mut leaf = input_order(&g).order;
    leaf.insert(0, id("x"));
    assert!(bad(leaf).contains("is a leaf"));
    let mut swapped = input_order(&g).order;
    swapped.swap(0, 2);
    assert!(bad(swapped).contains("runs before"));
    assert!(bad(vec![TensorId(999)]).contains("unknown tensor"));
}

#[test]
fn a_write_before_its_hazard_is_an_invalid_schedule() {
    let (g, a) = kv_graph();
    let id = |n: &str| g.find(n).unwrap();
    let mut order = input_order(&g).order;
    // Move r1 (reads the cache) before kc (writes it).
    order.retain(|&x| x != id("r1"));
    let at = order.iter().position(|&x| x == id("kc")).unwrap();
    order.insert(at, id("r1"));
    let e = split_and_copy(&g, &a, &Schedule { order }).unwrap_err();
    assert_eq!(
        e.to_string(),
        "graph 'kv': invalid schedule: 'r1' runs before 'kc'"
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    should_panic(expected = "writes into another device")
)]
fn a_write_into_state_on_another_device_is_refused() {
    let (g, mut a) = kv_graph();
    let (_, c1, _) = devices();
    let kc = g.find("kc").unwrap();
    a.device[kc.index()] = c1;
    let sched = schedule_nodes(&g, &a);
    let e = split_and_copy(&g, &a, &sched).unwrap_err();
    assert!(matches!(e, SplitError::WriteIntoAcrossDevices { .. }));
    assert_eq!(
        e.to_string(),
        "node 'kc' runs on d1 but writes into 'cache', which lives on d0"
    );
}
