//! Tests of policy `cost`: copies against ggml's, a cut whose answer is
//! known, exactness against brute force.

use super::cost_problem::Problem;
use super::tests::{check_invariants, copies, device_of, example_graph, reason_of, run, scenarios};
use super::*;
use crate::cost::{copy_time_us, op_time_us};
use crate::placement::PinRule;
use crate::target::{
    DTypeSet, Device, DeviceKind, Link, MatmulGflops, OpKind, OpSet, OpSupport, Target, Throughput,
};
use ir::{DType, GraphBuilder};
use std::collections::BTreeSet;

/// The cost policy's objective, recomputed independently: kernel times on
/// their devices plus one copy per (tensor, destination device).
fn estimated_us(g: &Graph, t: &Target, a: &Assignment) -> f64 {
    let mut total = 0.0;
    let mut pairs = BTreeSet::new();
    for n in g.nodes() {
        let d = a.device[n.index()];
        total += op_time_us(t, d, g, n);
        if g.tensor(n).op.is_some_and(|op| op.is_view()) {
            continue;
        }
        for &s in &g.tensor(n).srcs {
            let from = a.device[g.storage_of(s).root.index()];
            if from != d && pairs.insert((s, d)) {
                total += copy_time_us(t, from, d, g.tensor(s).layout.span_bytes());
            }
        }
    }
    total
}

#[test]
fn cost_never_copies_more_than_ggml_on_the_examples() {
    for graph in ["llama2l", "bert2l", "mlp"] {
        let g = example_graph(graph);
        // Each scenario also with --op-offload (ggml's weights copied to the GPU).
        let offloading = scenarios().into_iter().map(|(what, t, mut o)| {
            o.op_offload = true;
            (what, t, o)
        });
        for (what, t, o) in scenarios().into_iter().chain(offloading) {
            let what = format!("{what}{}", if o.op_offload { " --op-offload" } else { "" });
            let ggml = run(&g, &t, &o, Policy::Ggml);
            let cost = run(&g, &t, &o, Policy::Cost);
            let (gc, cc) = (copies(&g, &ggml), copies(&g, &cost));
            let (gt, ct) = (estimated_us(&g, &t, &ggml), estimated_us(&g, &t, &cost));
            eprintln!(
                "{graph:8} {what:30} ggml: {:2} copies {:8} B {gt:9.1} us | cost: {:2} copies {:8} B {ct:9.1} us",
                gc.0, gc.1, cc.0, cc.1
            );
            assert!(
                cc.0 <= gc.0 && cc.1 <= gc.1,
                "{graph} {what}: cost {cc:?} vs ggml {gc:?}"
            );
            assert!(
                ct <= gt + 1e-6,
                "{graph} {what}: cost {ct} us vs ggml {gt} us"
            );
        }
    }
}

/// Two devices with round numbers: `cuda0` runs everything but `sqr` at
/// 1 µs per kernel plus 1 B/ns; the CPU runs everything at 2 B/ns, no
/// launch cost; the link moves 1 B/ns, no latency.
fn toy_target() -> Target {
    let device = |name: &str, kind, gbps, launch, ops| Device {
        name: name.to_string(),
        kind,
        memory_bytes: 1 << 30,
        alignment: 64,
        max_buffer_bytes: 1 << 30,
        host_visible: kind == DeviceKind::Cpu,
        supports: vec![OpSupport {
            ops,
            src0: DTypeSet::All,
        }],
        throughput: Throughput {
            matmul_gflops: MatmulGflops {
                f32: 1000.0,
                f16: 1000.0,
                quantized: 1000.0,
            },
            memory_gbps: gbps,
            launch_overhead_us: launch,
        },
    };
    let no_sqr = OpSet::Only(
        OpKind::ALL
            .iter()
            .copied()
            .filter(|&k| k != OpKind::Sqr)
            .collect(),
    );
    let t = Target {
        name: "toy".to_string(),
        devices: vec![
            device(
                "cuda0",
                DeviceKind::Cuda { ordinal: 0 },
                1000.0,
                1.0,
                no_sqr,
            ),
            device("cpu", DeviceKind::Cpu, 2.0, 0.0, OpSet::All),
        ],
        links: vec![Link {
            from: "cuda0".into(),
            to: "cpu".into(),
            bandwidth_gbps: 1.0,
            latency_us: 0.0,
        }],
    };
    t.validate().expect("valid toy target");
    t
}

#[test]
fn a_two_device_cut_with_a_known_answer() {
    // y = x * w on cuda0 (its weight's device); t = sqr(y) only on the CPU;
    // three readers of t. Each reader: 4 µs on the CPU, 1.008 µs on cuda0;
    // copying t (4000 B) costs 4 µs. Counted per edge, moving one reader
    // never pays (1.008 + 4 > 4); counted once per destination, moving all
    // three does (3.024 + 4 < 12). ggml copies x, y and t (3); the cut 2.
    let mut b = GraphBuilder::new("readers");
    let x = b.input("x", DType::F32, [1000, 1, 1, 1]).expect("x");
    let w = b.weight("w", DType::F32, [1000, 1, 1, 1]).expect("w");
    let y = b.mul("y", x, w).expect("y");
    let t = b.unary("t", ir::Op::Sqr, y).expect("t");
    for name in ["c1", "c2", "c3"] {
        let c = b.silu(name, t).expect(name);
        b.mark_output(c).expect("out");
    }
    let g = b.finish().expect("graph");
    let target = toy_target();
    let o = PlacementOptions::default();
    let a = run(&g, &target, &o, Policy::Cost);
    check_invariants(&g, &target, &o, Policy::Cost, &a);
    let at = |n| device_of(&g, &target, &a, n);
    assert_eq!(
        [at("x"), at("y"), at("t"), at("c1"), at("c2"), at("c3")],
        ["cuda0", "cuda0", "cpu", "cuda0", "cuda0", "cuda0"]
    );
    assert_eq!(copies(&g, &a), (2, 8000));
    assert!((estimated_us(&g, &target, &a) - (1.012 + 4.0 + 4.0 + 4.0 + 3.0 * 1.008)).abs() < 1e-9);
    assert_eq!(
        reason_of(&g, &a, "c2"),
        "min-cut: 1.0 µs on cuda0 vs 4.0 µs on cpu"
    );
    assert_eq!(reason_of(&g, &a, "t"), "only cpu runs sqr (4.0 µs)");
    assert!(reason_of(&g, &a, "x").starts_with("min-cut: input with no compute"));
    assert!(reason_of(&g, &a, "y").starts_with("runs next to its weight 'w' on cuda0"));
    let ggml = run(&g, &target, &o, Policy::Ggml);
    assert_eq!(copies(&g, &ggml), (3, 12000));
    assert_eq!(device_of(&g, &target, &ggml, "c1"), "cuda0");
}

/// A small generator for the brute-force comparison.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A random DAG of elementwise ops on equal shapes: inputs, weights (`w1`
/// pinned to the CPU), and sqr only the CPU runs.
fn random_graph(rng: &mut Lcg) -> Graph {
    let ne = [64 * (1 + rng.below(40) as i64), 1, 1, 1];
    let mut b = GraphBuilder::new("random");
    let mut live = vec![
        b.input("x", DType::F32, ne).expect("x"),
        b.weight("w0", DType::F32, ne).expect("w0"),
        b.weight("w1", DType::F32, ne).expect("w1"),
    ];
    for i in 0..4 + rng.below(8) {
        let mut pick = || live[rng.below(live.len() as u64) as usize];
        let (a, c) = (pick(), pick());
        let name = format!("n{i}");
        let n = match rng.below(4) {
            0 => b.add(name, a, c),
            1 => b.mul(name, a, c),
            2 => b.unary(name, ir::Op::Sqr, a),
            _ => b.silu(name, a),
        };
        live.push(n.expect("node"));
    }
    let last = *live.last().expect("a node");
    b.mark_output(last).expect("out");
    b.finish().expect("random graph")
}

#[test]
fn the_two_device_cut_is_exact_against_brute_force() {
    let target = toy_target();
    let mut o = PlacementOptions::default();
    o.pins
        .push(PinRule::parse("^w1$=cpu", &target).expect("pin"));
    let mut rng = Lcg(3);
    for case in 0..60 {
        let g = random_graph(&mut rng);
        let w = place_weights(&g, &target, &o, Policy::Cost).expect("weights");
        let p = Problem::new(&g, &target, &w).expect("problem");
        let free: Vec<usize> = (0..p.root.len())
            .filter(|&i| {
                p.fixed[i].is_none() && p.allowed(i, DeviceId(0)) && p.allowed(i, DeviceId(1))
            })
            .collect();
        let base: Vec<DeviceId> = (0..p.root.len())
            .map(|i| match &p.fixed[i] {
                Some((d, _)) => *d,
                None if p.allowed(i, DeviceId(0)) => DeviceId(0),
                None => DeviceId(1),
            })
            .collect();
        for weight in [1, 4] {
            let found = p.evaluate(&p.solve(weight), weight);
            let brute = (0..1u32 << free.len())
                .map(|m| {
                    let mut dev = base.clone();
                    for (bit, &i) in free.iter().enumerate() {
                        dev[i] = DeviceId(m >> bit & 1);
                    }
                    p.evaluate(&dev, weight)
                })
                .min()
                .unwrap_or(0);
            assert_eq!(found, brute, "case {case}, copy weight {weight}");
        }
    }
}

#[test]
fn pure_time_answers_and_the_copy_budget() {
    // What the unconstrained minimum would do (the report's numbers), and
    // that the policy's answer is within ggml's copies.
    let g = example_graph("llama2l");
    for (what, t, o) in scenarios() {
        let w = place_weights(&g, &t, &o, Policy::Cost).expect("weights");
        let p = Problem::new(&g, &t, &w).expect("problem");
        let fastest = p.solve(1);
        let (pairs, bytes) = p.copy_stats(&fastest);
        eprintln!(
            "llama2l {what:30} minimum time alone: {pairs} copies {bytes} B {:.1} us",
            p.evaluate(&fastest, 1) as f64 / 1000.0
        );
        let ggml = run(&g, &t, &o, Policy::Ggml);
        let cost = run(&g, &t, &o, Policy::Cost);
        let (gc, cc) = (copies(&g, &ggml), copies(&g, &cost));
        assert!(cc.0 <= gc.0 && cc.1 <= gc.1, "{what}");
    }
}

#[test]
fn three_devices_use_expansion_and_all_weights_stay() {
    let g = example_graph("llama2l");
    let (_, t, o) = scenarios().swap_remove(2);
    let a = run(&g, &t, &o, Policy::Cost);
    let w = place_weights(&g, &t, &o, Policy::Cost).expect("weights");
    for id in g.ids().filter(|&id| w.device[id.index()].is_some()) {
        assert_eq!(Some(a.device[id.index()]), w.device[id.index()]);
    }
    assert!(
        a.reason.iter().any(|r| r.starts_with("min-cut expansion")),
        "{:?}",
        a.reason
    );
    // Block 0's weights are on cuda1: its attention runs there too.
    assert_eq!(device_of(&g, &t, &a, "l0.kq"), "cuda1");
}
