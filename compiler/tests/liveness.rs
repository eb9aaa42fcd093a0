//! Liveness: hand-made graphs for each in-place rule and order error, and the
//! invariants of `compiler::liveness` re-derived independently on the example
//! graphs, in id order and in seeded random topological orders.

use compiler::emit::compute_liveness;
use compiler::liveness::{InPlace, Liveness, OrderProblem, Usage};
use compiler::memory::plan_memory;
use ir::{DType, Graph, GraphBuilder, Role, TensorId};

fn example(name: &str) -> Graph {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/graphs");
    ir::text::read_graph(&dir.join(name)).expect("example graph parses")
}

/// A builder with input `a` [8, 4] f32.
fn builder() -> (GraphBuilder, TensorId) {
    let mut b = GraphBuilder::new("t");
    let a = b.input("a", DType::F32, [8, 4, 1, 1]).unwrap();
    (b, a)
}

fn liveness_of(g: &Graph) -> compiler::liveness::Liveness {
    let order: Vec<TensorId> = g.nodes().collect();
    compute_liveness(g, &order, 64).unwrap()
}

fn reuse(node: TensorId, reuses: TensorId, via: TensorId) -> InPlace {
    InPlace { node, reuses, via }
}

#[test]
fn mlp_chains_in_place_and_lists_leafs_by_arena() {
    let g = example("mlp.ron");
    let id = |n: &str| g.find(n).unwrap();
    let live = liveness_of(&g);
    let expect = [
        ("fc1", "fc1.mm"),
        ("fc1.relu", "fc1"),
        ("fc2", "fc2.mm"),
        ("probs", "fc2"),
    ];
    let expect: Vec<InPlace> = expect
        .iter()
        .map(|&(n, r)| reuse(id(n), id(r), id(r)))
        .collect();
    assert_eq!(live.in_place, expect);
    // fc1.mm -> fc1 -> fc1.relu (read by fc2.mm at step 3); fc2.mm -> ... -> probs (output).
    let spans: Vec<_> = live
        .buffers
        .iter()
        .map(|b| (b.size, b.first, b.last))
        .collect();
    assert_eq!(spans, [(8192, 0, 3), (640, 3, 5)]);
    assert_eq!(live.buffer_of[id("probs").index()], Some(1));
    assert_eq!(live.resident_bytes(Usage::Io), 4096);
    assert_eq!(live.resident_bytes(Usage::Weights), 32768 + 512 + 5120 + 64);
    assert_eq!(plan_memory(&live.buffers, 64).unwrap().size, 8192 + 640);
}

#[test]
fn views_keep_their_root_alive_and_pass_in_place_only_when_bytes_match() {
    let (mut b, a) = builder();
    let x = b.silu("x", a).unwrap();
    let t = b.transpose("t", x).unwrap();
    let c = b.cont("c", t).unwrap(); // strided source: never in place
    // Through a view at offset 0 with the owner's own packed layout: in place.
    let r = b.reshape("r", c, [4, 8, 1, 1]).unwrap();
    let y = b.unary("y", ir::Op::Tanh, r).unwrap();
    // Through a packed view of another shape: the owner's shape differs from
    // the result's, so never in place.
    let f = b.reshape("f", y, [32, 1, 1, 1]).unwrap();
    let z = b.unary("z", ir::Op::Tanh, f).unwrap();
    b.mark_output(z).unwrap();
    let g = b.finish().unwrap();
    let live = liveness_of(&g);
    assert_eq!(live.n_steps, 4, "views run nothing: x, c, y, z");
    assert_eq!(
        live.tensors[0].last, 1,
        "x is read through t by c at step 1"
    );
    assert_eq!(live.in_place, [reuse(y, c, r)]);
    assert_eq!(live.buffer_of[r.index()], live.buffer_of[c.index()]);
    assert_eq!(live.buffer_of[f.index()], live.buffer_of[y.index()]);
    assert_eq!(live.buffers.len(), 3);
}

#[test]
fn only_a_dying_src0_with_no_other_alias_is_taken() {
    let (mut b, a) = builder();
    let w = b.weight("w", DType::F32, [8, 4, 1, 1]).unwrap();
    let m = b.silu("m", a).unwrap();
    let s = b.sub("s", w, m).unwrap(); // m dies as src1: kept
    let x = b.silu("x", s).unwrap(); // s dies: taken
    let y = b.unary("y", ir::Op::Tanh, x).unwrap(); // x read later: kept
    let z = b.add("z", x, y).unwrap(); // x dies as src0: taken
    let row = b.view("row", z, [8, 1, 1, 1], [32, 32, 32], 0).unwrap();
    let q = b.mul("q", z, row).unwrap(); // z also read through row: kept
    let mask = b.unary("mask", ir::Op::Relu, a).unwrap();
    let sm = b.soft_max("sm", a, Some(mask), 1.0, 0.0).unwrap(); // the mask: kept
    let o = b.unary("o", ir::Op::Relu, q).unwrap(); // q is an output: kept
    b.mark_output(q).unwrap();
    b.mark_output(sm).unwrap();
    b.mark_output(o).unwrap();
    let g = b.finish().unwrap();
    let live = liveness_of(&g);
    assert_eq!(live.in_place, [reuse(x, s, s), reuse(z, x, x)]);
    let q_life = live.tensors.iter().find(|t| t.tensor == q).unwrap();
    assert_eq!(q_life.last, live.n_steps - 1);
}

#[test]
fn bad_orders_list_every_problem() {
    let (mut b, a) = builder();
    let x = b.silu("x", a).unwrap();
    let y = b.unary("y", ir::Op::Relu, x).unwrap();
    let z = b.unary("z", ir::Op::Relu, y).unwrap();
    b.mark_output(z).unwrap();
    let g = b.finish().unwrap();
    let e = compute_liveness(&g, &[y, a, x, x, TensorId(99)], 64).unwrap_err();
    let kinds: Vec<_> = e.problems.iter().map(std::mem::discriminant).collect();
    let want = [
        OrderProblem::Leaf {
            step: 1,
            name: "a".into(),
        },
        OrderProblem::Repeated {
            step: 3,
            name: "x".into(),
        },
        OrderProblem::UnknownTensor {
            step: 4,
            id: TensorId(99),
        },
        OrderProblem::SourceNotBefore {
            step: 0,
            name: "y".into(),
            source: "x".into(),
        },
        OrderProblem::Missing { name: "z".into() },
    ];
    assert_eq!(
        kinds,
        want.iter().map(std::mem::discriminant).collect::<Vec<_>>()
    );
    assert_eq!(e.problems, want);
    assert!(
        e.to_string().contains("'y' runs before its source 'x'"),
        "{e}"
    );
}

/// Every violation of the liveness invariants, derived here from the graph
/// alone (alignment 64).
fn violations(g: &Graph, order: &[TensorId], live: &Liveness) -> Vec<String> {
    let mut out = Vec::new();
    let root = |id: TensorId| g.tensor(id).view.map_or(id, |v| v.root);
    // Steps: the order's non-view nodes (views run nothing); a step reads a
    // tensor when one of its sources has it as root.
    let is_view = |id: TensorId| g.tensor(id).op.is_some_and(|op| op.is_view());
    let order: Vec<TensorId> = order.iter().copied().filter(|&id| !is_view(id)).collect();
    let owners: Vec<TensorId> = order
        .iter()
        .copied()
        .filter(|&id| {
            let t = g.tensor(id);
            t.view.is_none() && matches!(t.role, Role::Intermediate | Role::Output)
        })
        .collect();
    let ids: Vec<TensorId> = live.tensors.iter().map(|t| t.tensor).collect();
    if ids != owners {
        out.push(format!("compute tensors {ids:?}, expected {owners:?}"));
    }
    let n = order.len();
    for lt in &live.tensors {
        let first = order.iter().position(|&id| id == lt.tensor).unwrap_or(n);
        let readers = order
            .iter()
            .enumerate()
            .filter(|(_, id)| g.tensor(**id).srcs.iter().any(|&s| root(s) == lt.tensor));
        let mut last = readers.map(|(s, _)| s).max().unwrap_or(first).max(first);
        if g.ids()
            .any(|id| g.tensor(id).role == Role::Output && root(id) == lt.tensor)
        {
            last = n - 1;
        }
        let size = g.tensor(lt.tensor).layout.span_bytes().div_ceil(64) * 64;
        if (lt.first, lt.last, lt.size) != (first, last, size) {
            out.push(format!(
                "{lt:?}: expected first {first}, last {last}, size {size}"
            ));
        }
        let Some(b) = live.buffer_of[lt.tensor.index()].and_then(|b| live.buffers.get(b)) else {
            out.push(format!("{lt:?} has no buffer"));
            continue;
        };
        if b.first > lt.first || b.last < lt.last || b.size < lt.size {
            out.push(format!("buffer {b:?} does not hold {lt:?}"));
        }
    }
    // Members of one buffer follow each other, handing over in place.
    for (k, b) in live.buffers.iter().enumerate() {
        let members: Vec<_> = live
            .tensors
            .iter()
            .filter(|t| live.buffer_of[t.tensor.index()] == Some(k))
            .collect();
        if members.first().map(|m| m.tensor) != Some(b.tensor) {
            out.push(format!(
                "buffer {k} does not start with its tensor {}",
                b.tensor
            ));
        }
        for w in members.windows(2) {
            let handed_over = live
                .in_place
                .iter()
                .any(|p| p.node == w[1].tensor && p.reuses == w[0].tensor);
            if w[0].last != w[1].first || !handed_over {
                out.push(format!(
                    "buffer {k}: {:?} then {:?} without an in-place hand-over",
                    w[0], w[1]
                ));
            }
        }
    }
    let leafs: Vec<_> = live.resident.iter().map(|r| (r.tensor, r.usage)).collect();
    let want: Vec<_> = g
        .leafs()
        .map(|id| (id, Usage::of(g.tensor(id).role)))
        .collect();
    if leafs != want || want.iter().any(|(_, u)| *u == Usage::Compute) {
        out.push(format!("resident {leafs:?}, expected {want:?}"));
    }
    out
}

/// A topological order of `g`'s nodes chosen at random among the ready ones.
fn random_order(g: &Graph, seed: u64) -> Vec<TensorId> {
    let mut state = seed;
    let mut next = move || {
        // SplitMix64.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut done = vec![false; g.len()];
    for id in g.leafs() {
        done[id.index()] = true;
    }
    let mut left: Vec<TensorId> = g.nodes().collect();
    let mut order = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let ready: Vec<usize> = (0..left.len())
            .filter(|&k| g.tensor(left[k]).srcs.iter().all(|s| done[s.index()]))
            .collect();
        let k = ready[(next() % ready.len() as u64) as usize];
        let id = left.remove(k);
        done[id.index()] = true;
        order.push(id);
    }
    order
}

#[test]
fn example_graphs_keep_the_invariants_in_any_order() {
    for name in ["mlp.ron", "bert2l.ron", "llama2l.ron"] {
        let g = example(name);
        let mut orders = vec![g.nodes().collect::<Vec<_>>()];
        orders.extend((0..40).map(|seed| random_order(&g, seed)));
        let mut worst = 1.0f64;
        for (k, order) in orders.iter().enumerate() {
            let live = compute_liveness(&g, order, 64).unwrap();
            let v = violations(&g, order, &live);
            assert!(v.is_empty(), "{name}, order {k}: {v:#?}");
            let p = plan_memory(&live.buffers, 64).unwrap();
            assert!(p.size >= p.lower_bound && p.size <= live.no_reuse_bytes());
            worst = worst.max(p.size as f64 / p.lower_bound as f64);
        }
        eprintln!("{name}: 41 orders, worst arena / lower bound {worst:.4}");
    }
}
