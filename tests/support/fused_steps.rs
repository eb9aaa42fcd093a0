//! What the fused-step tests share (`tests/product_add.rs`,
//! `product_group.rs`, `attention_fused.rs`, `rope_store.rs`): a graph
//! compiled for one CPU, a plan's steps of one kind counted, a plan loaded
//! with seeded random weights.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ir::Graph;
use ir::plan::{Plan, Step};
use runtime::{LoadOptions, Precision, Runtime, Weights};
use std::sync::Arc;

/// `g` compiled for the `cpu` preset with default options.
pub fn cpu_plan(g: &Graph) -> Plan {
    let target = Target::preset("cpu").unwrap();
    compile(g, &target, &CompileOptions::default())
        .unwrap()
        .plan
}

/// How many of `plan`'s steps `kind` picks.
pub fn count_steps(plan: &Plan, kind: impl Fn(&Step) -> bool) -> usize {
    (plan.splits.iter().flat_map(|s| &s.steps))
        .filter(|&s| kind(s))
        .count()
}

/// `plan` loaded at `precision` on `threads` threads, its weights random
/// from `seed`.
pub fn load_random(plan: Plan, precision: Precision, threads: usize, seed: u64) -> Runtime {
    let options = LoadOptions {
        threads,
        precision,
        ..LoadOptions::default()
    };
    Runtime::load(Arc::new(plan), Weights::Random { seed }, &options).unwrap()
}
