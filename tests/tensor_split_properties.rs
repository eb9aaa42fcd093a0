//! Property test: random graphs x random split rules (`--split REGEX=AXIS`
//! over a random subset of the weights, random axes, random shares, 2 or 4
//! core groups, partial sums completed by the cost model's choice, by
//! all-reduces or by reduce-scatters where a reader keeps the cut): every
//! plan passes the checker (`compile` runs it), compiling
//! twice gives the same bytes, and the reference plan evaluator gives the
//! graph evaluator's outputs (NMSE <= 1e-10).

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use compiler::tensor_split::{Collectives, SplitRule, TensorSplitOptions};
use ggplan_tests::TestRng;
use ggplan_tests::outputs::nmse;
use ggplan_tests::random_graph::random_graph;
use kernels::evaluate::{Bindings, Weights, evaluate, evaluate_plan};
use std::collections::BTreeMap;

#[test]
fn random_graphs_split_by_random_rules_check_and_compute_the_same_outputs() {
    let mut rng = TestRng::new(0x5EED_7E45);
    let mut split_cases = 0;
    let mut collectives = 0;
    let mut scatters = 0;
    for case in 0..60 {
        let graph = random_graph(&mut rng, case);
        let weights: Vec<(String, [i64; 4])> = graph
            .ids()
            .map(|id| graph.tensor(id))
            .filter(|t| t.role == ir::Role::Weight)
            .map(|t| (t.name.clone(), t.ne()))
            .collect();
        if weights.is_empty() {
            continue;
        }
        let (target, n) = [("cpu0+cpu1", 2), ("cpu0+cpu1+cpu2+cpu3", 4)][rng.below(2)];
        let mut rules = Vec::new();
        for (name, ne) in &weights {
            if rng.below(3) == 0 {
                continue;
            }
            let axis = if ne[1] > 1 { rng.below(2) } else { 0 };
            let rule = format!("^{}$={axis}", name.replace('.', "\\."));
            rules.push(SplitRule::parse(&rule).unwrap());
        }
        if rules.is_empty() {
            continue;
        }
        let shares: Vec<f64> = match rng.below(3) {
            0 => vec![],
            _ => (0..n).map(|_| 1.0 + rng.below(4) as f64).collect(),
        };
        let how = [
            Collectives::Auto,
            Collectives::AllReduce,
            Collectives::ReduceScatter,
        ][rng.below(3)];
        let label = format!(
            "case {case} on {target}, shares {shares:?}, {} rules, {how:?}",
            rules.len()
        );
        let options = CompileOptions {
            tensor_split: Some(TensorSplitOptions {
                shares,
                rules,
                collectives: how,
                experts: Default::default(),
            }),
            ..CompileOptions::default()
        };
        let target = Target::preset(target).unwrap();
        let plan = compile(&graph, &target, &options)
            .unwrap_or_else(|e| panic!("{label}: {e}\n{}", ir::text::to_ron(&graph)))
            .plan;
        let again = compile(&graph, &target, &options).unwrap().plan;
        assert_eq!(
            ir::plan::plan_to_ron(&plan),
            ir::plan::plan_to_ron(&again),
            "{label}: not deterministic"
        );
        collectives += plan
            .splits
            .iter()
            .flat_map(|s| &s.steps)
            .filter(|s| matches!(s, ir::plan::Step::Op { op, .. } if op.collective().is_some()))
            .count();
        scatters += plan
            .splits
            .iter()
            .flat_map(|s| &s.steps)
            .filter(|s| {
                matches!(
                    s,
                    ir::plan::Step::Op {
                        op: ir::Op::ReduceScatterSum { .. },
                        ..
                    }
                )
            })
            .count();
        split_cases += 1;
        let bindings = Bindings {
            weights: Weights::Random { seed: case as u64 },
            inputs: BTreeMap::new(),
            random_inputs: Some(1),
        };
        let reference = evaluate(&graph, &bindings).unwrap();
        let run = evaluate_plan(&plan, &bindings).unwrap_or_else(|e| panic!("{label}: {e}"));
        for out in graph.with_role(ir::Role::Output) {
            let name = &graph.tensor(out).name;
            let e = nmse(
                &reference.read(out).data,
                &run.read_name(name).unwrap().data,
            );
            assert!(
                e <= 1e-10,
                "{label}: output '{name}' NMSE {e}\n{}",
                ir::text::to_ron(&graph)
            );
        }
    }
    assert!(split_cases >= 20, "{split_cases} graphs were split");
    assert!(collectives > 0, "some split made a collective");
    assert!(
        scatters > 0,
        "some split cut a partial sum by a reduce-scatter"
    );
}
