//! Pass `fuse`: the groups found on the example graphs, the rules re-checked
//! independently (in id order and in seeded random topological orders), the
//! fused bodies evaluated against the reference evaluator's memory; `rules`
//! has one hand-made graph per rule.

use compiler::DeviceId;
use compiler::assign::Assignment;
use compiler::fuse::{Fusion, fuse_elementwise};
use ir::{DType, Graph, Op, Role, TensorId};
use kernels::evaluate::{Bindings, Weights, evaluate};
use kernels::reference::fused::{check_fused, eval_fused};
use kernels::testing::Rng;
use std::collections::BTreeMap;

mod attention;
mod product_add;
mod product_glu;
mod product_many;
mod rope_store;
mod rules;

fn examples() -> Vec<(String, Graph)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/graphs");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "ron"));
    paths.sort();
    assert!(
        paths.len() >= 3,
        "expected the example graphs in {}",
        dir.display()
    );
    let name = |p: &std::path::Path| p.file_stem().unwrap().to_string_lossy().into_owned();
    paths
        .iter()
        .map(|p| (name(p), ir::text::read_graph(p).unwrap()))
        .collect()
}

fn writes_into(g: &Graph, id: TensorId) -> bool {
    g.tensor(id)
        .op
        .and_then(|op| op.writes_into_source())
        .is_some()
}

/// Every tensor on `devices[id]` (default: device 0).
fn assignment(g: &Graph, devices: &[(TensorId, u32)]) -> Assignment {
    let mut device = vec![DeviceId(0); g.len()];
    for &(id, d) in devices {
        device[id.index()] = DeviceId(d);
    }
    Assignment {
        device,
        reason: vec![String::new(); g.len()],
        parts: Vec::new(),
    }
}

fn fuse(g: &Graph) -> Fusion {
    let order: Vec<TensorId> = g.nodes().collect();
    fuse_elementwise(g, &assignment(g, &[]), &order)
}

fn names(g: &Graph, f: &Fusion) -> Vec<Vec<String>> {
    let name = |id: &TensorId| g.tensor(*id).name.clone();
    f.groups
        .iter()
        .map(|gr| gr.nodes.iter().map(name).collect())
        .collect()
}

/// A seeded random topological order of the nodes.
fn random_order(g: &Graph, seed: u64) -> Vec<TensorId> {
    let mut rng = Rng::new(seed);
    let mut missing: Vec<usize> = g.ids().map(|id| g.tensor(id).srcs.len()).collect();
    let mut readers: Vec<Vec<TensorId>> = vec![Vec::new(); g.len()];
    for id in g.ids() {
        for s in &g.tensor(id).srcs {
            readers[s.index()].push(id);
        }
    }
    let mut ready: Vec<TensorId> = g.ids().filter(|id| missing[id.index()] == 0).collect();
    let mut order = Vec::new();
    while !ready.is_empty() {
        let id = ready.swap_remove(rng.below(ready.len()));
        if !g.tensor(id).is_leaf() {
            order.push(id);
        }
        for &r in &readers[id.index()] {
            missing[r.index()] -= 1;
            if missing[r.index()] == 0 {
                ready.push(r);
            }
        }
    }
    order
}

/// Re-derives every rule of the module doc for every group, sharing no code
/// with the pass.
fn check_rules(g: &Graph, a: &Assignment, order: &[TensorId], f: &Fusion) {
    let pos = |id: TensorId| {
        order
            .iter()
            .position(|&o| o == id)
            .expect("member in order")
    };
    let mut seen = Vec::new();
    // Product-GLU units (rules in `product_glu`): two products of one
    // activation tensor, read only by the unit, before it, on its device.
    for u in &f.glus {
        let unit: Vec<TensorId> = u.inner.iter().copied().chain([u.dst]).collect();
        for n in u.nodes() {
            assert!(!seen.contains(&n), "{n} is in two units");
            seen.push(n);
            assert_eq!(a.device[n.index()], a.device[u.dst.index()]);
        }
        let (gt, ut) = (g.tensor(u.gate), g.tensor(u.up));
        assert!(gt.op == Some(Op::MulMat) && ut.op == Some(Op::MulMat));
        assert_eq!(gt.srcs[1], ut.srcs[1], "one activation tensor");
        for p in [u.gate, u.up] {
            assert!(pos(p) < pos(u.dst));
            assert_eq!(g.tensor(p).role, Role::Intermediate);
            for r in g.ids().filter(|&r| g.tensor(r).srcs.contains(&p)) {
                assert!(
                    unit.contains(&r),
                    "{} read outside its unit",
                    g.tensor(p).name
                );
            }
        }
    }
    // Sibling products (rules in `product_many`): one activation tensor,
    // one device, in order, each node in one group.
    for m in &f.many {
        assert!((2..=5).contains(&m.products.len()));
        let x = g.tensor(m.products[0]).srcs[1];
        for (k, &p) in m.products.iter().enumerate() {
            assert!(!seen.contains(&p), "{p} is in two fusions");
            seen.push(p);
            assert_eq!(g.tensor(p).op, Some(Op::MulMat));
            assert_eq!(g.tensor(p).srcs[1], x, "one activation tensor");
            assert_eq!(a.device[p.index()], a.device[m.products[0].index()]);
            if k > 0 {
                assert!(pos(m.products[k - 1]) < pos(p));
            }
        }
    }
    // Rope and stores (rules in `rope_store`): ropes and set_rows on one
    // device, in order; no node between the first and the last reads a root
    // a member writes or writes into one a member touches.
    for r in &f.rope_stores {
        assert!((2..=4).contains(&r.members.len()));
        let written: Vec<TensorId> = r.members.iter().map(|&m| g.storage_of(m).root).collect();
        for (k, &m) in r.members.iter().enumerate() {
            assert!(!seen.contains(&m), "{m} is in two fusions");
            seen.push(m);
            assert!(matches!(g.tensor(m).op, Some(Op::Rope(_) | Op::SetRows)));
            assert_eq!(a.device[m.index()], a.device[r.members[0].index()]);
            if k > 0 {
                assert!(pos(r.members[k - 1]) < pos(m));
            }
        }
        let (first, last) = (pos(r.members[0]), pos(*r.members.last().unwrap()));
        for &n in &order[first + 1..last] {
            let t = g.tensor(n);
            if r.members.contains(&n) || t.op.is_none_or(|op| op.is_view()) {
                continue;
            }
            for &s in &t.srcs {
                assert!(
                    !written.contains(&g.storage_of(s).root),
                    "{} reads a member's result before the step",
                    t.name
                );
            }
            if writes_into(g, n) {
                assert!(!written.contains(&g.storage_of(n).root));
            }
        }
    }
    for gr in &f.groups {
        let out = g.tensor(*gr.nodes.last().unwrap());
        assert!(gr.nodes.len() >= 2, "{gr:?}");
        for (k, &m) in gr.nodes.iter().enumerate() {
            assert!(!seen.contains(&m), "{m} is in two groups");
            seen.push(m);
            assert_eq!(f.group_of(m), f.groups.iter().position(|x| x == gr));
            let t = g.tensor(m);
            let op = t.op.unwrap();
            let norm = matches!(op, Op::RmsNorm { .. } | Op::Norm { .. });
            let glu2 = matches!(op, Op::Glu { .. }) && t.srcs.len() == 2;
            assert!(
                op.is_unary() || op.is_binary() || glu2 || (norm && k == 0),
                "{}",
                t.name
            );
            assert!(t.dtype() == DType::F32 && t.layout.is_contiguous() && t.ne() == out.ne());
            assert_eq!(a.device[m.index()], a.device[gr.nodes[0].index()]);
            if let Some(&next) = gr.nodes.get(k + 1) {
                assert_eq!(t.role, Role::Intermediate, "{}", t.name);
                let readers: Vec<TensorId> =
                    g.ids().filter(|&r| g.tensor(r).srcs.contains(&m)).collect();
                assert_eq!(readers, vec![next], "{} must have one reader", t.name);
                assert!(
                    g.ids()
                        .all(|v| g.tensor(v).view.is_none_or(|w| w.root != m))
                );
                assert!(pos(m) < pos(next));
            }
        }
        let mut inputs = Vec::new();
        for &m in &gr.nodes {
            for &s in &g.tensor(m).srcs {
                if !gr.nodes.contains(&s) && !inputs.contains(&s) {
                    inputs.push(s);
                }
            }
        }
        assert_eq!(gr.inputs, inputs, "inputs in first-use order");
        let (first, last) = (pos(gr.nodes[0]), pos(*gr.nodes.last().unwrap()));
        for &w in order[first + 1..last]
            .iter()
            .filter(|&&w| writes_into(g, w))
        {
            let root = g.storage_of(w).root;
            assert!(inputs.iter().all(|&i| g.storage_of(i).root != root));
        }
        let ne: Vec<[i64; 4]> = inputs.iter().map(|&i| g.tensor(i).ne()).collect();
        check_fused(&gr.body, &ne, out.ne()).expect("body fits its inputs");
    }
}

#[test]
fn fuse_example_graphs_find_the_expected_patterns() {
    let per_layer = |pats: &[&str]| -> Vec<String> {
        let layer = |l: &'static str| pats.iter().map(move |p| p.replace("L.", &format!("{l}.")));
        layer("l0").chain(layer("l1")).collect()
    };
    // Each layer's `ffn_silu + ffn_gate_par` runs with its gate and up
    // products as one `mul_mat + glu` step (`product_glu`), not as a group.
    let mut llama = per_layer(&[
        "L.attn_norm.rms + L.attn_norm",
        "L.ffn_norm.rms + L.ffn_norm",
    ]);
    llama.push("result_norm.rms + result_norm".into());
    let mut bert = vec![
        "inp_tok_type + inp_embd".to_string(),
        "inp_norm.norm + inp_norm.mul + inp_norm".into(),
    ];
    bert.extend(per_layer(&[
        "L.attn_out + L.attn_res",
        "L.attn_norm.norm + L.attn_norm.mul + L.attn_norm",
        "L.ffn_up + L.ffn_gelu",
        "L.ffn_down + L.ffn_res",
        "L.l_out.norm + L.l_out.mul + L.l_out",
    ]));
    let expected = BTreeMap::from([
        ("llama2l", llama),
        ("bert2l", bert),
        ("mlp", vec!["fc1 + fc1.relu".into()]),
    ]);
    for (name, g) in examples() {
        let f = fuse(&g);
        let found: Vec<String> = names(&g, &f).iter().map(|n| n.join(" + ")).collect();
        println!(
            "{name}: {} groups, {} nodes",
            found.len(),
            f.n_fused_nodes()
        );
        for (gr, n) in f.groups.iter().zip(&found) {
            println!("  {n} <- {} inputs: {:?}", gr.inputs.len(), gr.body);
        }
        if let Some(want) = expected.get(name.as_str()) {
            assert_eq!(&found, want, "{name}");
        }
        let units: Vec<String> = (f.glus.iter())
            .map(|u| g.tensor(u.dst).name.clone())
            .collect();
        let want_units: Vec<String> = match name.as_str() {
            "llama2l" => per_layer(&["L.ffn_gate_par"]),
            _ => Vec::new(),
        };
        if expected.contains_key(name.as_str()) {
            assert_eq!(units, want_units, "{name}");
        }
        let order: Vec<TensorId> = g.nodes().collect();
        check_rules(&g, &assignment(&g, &[]), &order, &f);
    }
}

#[test]
fn fuse_rules_hold_and_results_are_deterministic_in_random_orders() {
    for (name, g) in examples() {
        let a = assignment(&g, &[]);
        for seed in 0..20 {
            let order = random_order(&g, seed);
            let f = fuse_elementwise(&g, &a, &order);
            assert_eq!(f, fuse_elementwise(&g, &a, &order), "{name} seed {seed}");
            check_rules(&g, &a, &order, &f);
        }
    }
}

/// Fused bodies over the evaluator's stored inputs against the stored outputs.
/// The unfused path rounds every member's result to f32 (relative error
/// 2^-24 ~ 6e-8 each), the fused one only computes in f64, so they differ by a
/// few f32 roundings, amplified where an add cancels. Measured NMSE is ~1e-15;
/// the bound 1e-12 (DESIGN.md's elementwise bound is 1e-7, for f32 kernels)
/// leaves a margin of ~1000 over the rounding while still catching any wrong
/// semantic (a wrong eps, broadcast or operand order gives NMSE >> 1e-9).
/// Per element the difference must stay under 1e-6 of the output's largest
/// magnitude (at least 1).
#[test]
fn fuse_bodies_match_the_reference_evaluator_on_every_example() {
    for (name, g) in examples() {
        let f = fuse(&g);
        let bindings = Bindings {
            weights: Weights::Random { seed: 7 },
            inputs: BTreeMap::new(),
            random_inputs: Some(8),
        };
        let memory = evaluate(&g, &bindings).expect("example evaluates");
        // Values read at the end equal those the group read: nothing in these
        // graphs writes into a group input's root after it was produced.
        let written: Vec<TensorId> = g
            .nodes()
            .filter(|&n| writes_into(&g, n))
            .map(|n| g.storage_of(n).root)
            .collect();
        let (mut worst_nmse, mut worst_rel) = (0.0f64, 0.0f64);
        for gr in &f.groups {
            assert!(
                gr.inputs
                    .iter()
                    .all(|&i| !written.contains(&g.storage_of(i).root))
            );
            let out_id = *gr.nodes.last().unwrap();
            let inputs: Vec<_> = gr.inputs.iter().map(|&i| memory.read(i)).collect();
            let refs: Vec<_> = inputs.iter().collect();
            let got = eval_fused(&gr.body, &refs, g.tensor(out_id).ne());
            let want = memory.read(out_id);
            let (mut err, mut norm, mut max_abs, mut scale) = (0.0, 0.0, 0.0f64, 1.0f64);
            for (x, y) in got.data.iter().zip(&want.data) {
                assert!(
                    x.is_finite(),
                    "{name}: NaN or inf in {}",
                    g.tensor(out_id).name
                );
                err += (x - y) * (x - y);
                norm += y * y;
                max_abs = max_abs.max((x - y).abs());
                scale = scale.max(y.abs());
            }
            let (nmse, rel) = (err / norm, max_abs / scale);
            let out = &g.tensor(out_id).name;
            println!("{name}: {out}: nmse {nmse:.2e}, max abs diff {max_abs:.2e} (rel {rel:.2e})");
            assert!(
                nmse <= 1e-12 && rel <= 1e-6,
                "{name}: {out}: nmse {nmse:e}, rel {rel:e}"
            );
            worst_nmse = worst_nmse.max(nmse);
            worst_rel = worst_rel.max(rel);
        }
        println!("{name}: worst nmse {worst_nmse:.2e}, worst max diff rel {worst_rel:.2e}");
    }
}
