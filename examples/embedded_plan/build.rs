//! Compiles the plan this program embeds: llama2l (a 2-block llama-shaped
//! graph over 128 tokens) for the `cpu` preset, into `$OUT_DIR/llama2l.plan.ron`.
//! Cargo runs this again when the graph file or ggplan changes.

use ggplan::build::{GraphSource, PlanBuild, compile_plan};

fn main() -> Result<(), ggplan::Error> {
    let graph = GraphSource::Text("../graphs/llama2l.ron".into());
    compile_plan(&PlanBuild::new("llama2l", graph, "cpu"))?;
    Ok(())
}
