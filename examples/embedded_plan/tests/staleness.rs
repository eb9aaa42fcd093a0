//! The build script's plan is the one the compiler makes now, and a stale
//! plan (other graph, target, compiler or format) is refused with the
//! command that rebuilds it.

use ggplan::PlanKey;
use ggplan_example_embedded_plan::{GRAPH, PLAN, TARGET, expected_key};

const REBUILD: &str =
    "rebuild it with `cargo clean -p ggplan-example-embedded-plan && cargo build`";

#[test]
fn the_embedded_plan_is_what_compiling_now_gives() {
    let graph = ggplan::graph::parse(GRAPH, "llama2l.ron").unwrap();
    let target = ggplan::target::resolve(TARGET).unwrap();
    let plan = ggplan::compile(&graph, &target, &ggplan::CompileOptions::default())
        .unwrap()
        .plan;
    assert_eq!(ggplan::plan::to_text(&plan), PLAN.text);
    PLAN.plan(&expected_key().unwrap()).expect("fresh");
}

#[test]
fn a_plan_for_another_graph_or_target_is_refused_with_the_rebuild_command() {
    let mlp =
        ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs/mlp.ron")).unwrap();
    let other_graph = PLAN
        .plan(&PlanKey::expected(&mlp, TARGET))
        .unwrap_err()
        .to_string();
    assert!(
        other_graph.contains("llama2l.plan.ron is stale"),
        "{other_graph}"
    );
    assert!(other_graph.contains("the graph is now"), "{other_graph}");
    assert!(other_graph.contains(REBUILD), "{other_graph}");

    let mut key = expected_key().unwrap();
    key.target = "cpu+cuda0".into();
    let other_target = PLAN.plan(&key).unwrap_err().to_string();
    assert!(
        other_target.contains("compiled for target 'cpu', this program runs on 'cpu+cuda0'"),
        "{other_target}"
    );
}

#[test]
fn a_plan_from_another_ggplan_is_refused() {
    let old = PLAN.text.replacen(
        &format!("compiler_version: \"{}\"", ggplan::COMPILER_VERSION),
        "compiler_version: \"0.0.1\"",
        1,
    );
    assert_ne!(old, PLAN.text);
    let embedded = ggplan::build::Embedded {
        text: Box::leak(old.into_boxed_str()),
        ..PLAN
    };
    let refused = embedded
        .plan(&expected_key().unwrap())
        .unwrap_err()
        .to_string();
    assert!(refused.contains("compiled by ggplan 0.0.1"), "{refused}");
    assert!(refused.contains(REBUILD), "{refused}");
}
