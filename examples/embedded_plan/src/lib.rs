//! A program that ships a precompiled plan. Its build script compiles
//! `examples/graphs/llama2l.ron` for the `cpu` preset; the plan is embedded
//! with [`ggplan::embedded_plan!`] and loaded at start-up with no compilation.
//! The graph text is embedded too, as the program's model definition: its
//! hash is the staleness key the embedded plan must carry.

use ggplan::build::{Embedded, Loaded};
use ggplan::{PlanKey, Weights};

/// The model definition this program runs.
pub const GRAPH: &str = include_str!("../../graphs/llama2l.ron");

/// The plan the build script compiled for it.
pub const PLAN: Embedded = ggplan::embedded_plan!("llama2l");

/// The target the program runs on (what the build script compiled for).
pub const TARGET: &str = "cpu";

/// The key a plan for [`GRAPH`] on [`TARGET`] by this ggplan must carry.
pub fn expected_key() -> Result<PlanKey, ggplan::Error> {
    let graph = ggplan::graph::parse(GRAPH, "llama2l.ron")?;
    Ok(PlanKey::expected(&graph, TARGET))
}

/// Loads [`PLAN`] (refused when stale) with seeded random weights.
pub fn load(threads: usize) -> Result<Loaded, ggplan::Error> {
    let options = ggplan::LoadOptions {
        threads,
        ..Default::default()
    };
    PLAN.load(&expected_key()?, Weights::Random { seed: 7 }, &options)
}

/// The 128 token ids the example feeds.
pub fn tokens() -> Vec<i32> {
    (0..128).map(|i| i * 37 % 8000).collect()
}

/// Per token position, the id of the largest logit.
pub fn greedy(logits: &[f32], vocab: usize) -> Vec<usize> {
    logits
        .chunks(vocab)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                    if v > best.1 { (i, v) } else { best }
                })
                .0
        })
        .collect()
}
