//! Plans: read, write, print, summarise and check them.
//!
//! A plan is untrusted input until [`verify`] (or the runtime's load, which
//! runs the same checker) has passed it: every address the runtime will
//! touch is inside an arena, every read follows its write, every order
//! between streams is an event.

use crate::{Error, Result};
use std::path::Path;

pub use crate::critical::{CriticalPath, critical_path};
pub use crate::dot::{DotView, dot};
pub use crate::summary::{cuda_launches_per_run, json as summary_json, summary};
pub use ir::plan::{PLAN_FORMAT_VERSION, Plan};

/// Reads a plan file (RON). The plan is parsed, not yet checked.
pub fn read(path: impl AsRef<Path>) -> Result<Plan> {
    Ok(ir::plan::read_plan(path.as_ref())?)
}

/// Parses plan text; `name` is what errors call it (a file name).
///
/// ```
/// # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/mlp.ron"))?;
/// # let target = ggplan::target::resolve("cpu")?;
/// let plan = ggplan::compile(&graph, &target, &ggplan::CompileOptions::default())?.plan;
/// let text = ggplan::plan::to_text(&plan);
/// assert_eq!(ggplan::plan::parse(&text, "mlp.plan.ron")?, plan);
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn parse(text: &str, name: &str) -> Result<Plan> {
    Ok(ir::plan::parse_plan(text, name)?)
}

/// The plan's RON text, canonical: the same plan always gives the same bytes.
pub fn to_text(plan: &Plan) -> String {
    ir::plan::plan_to_ron(plan)
}

/// Writes a plan file atomically (a temporary file renamed into place, so a
/// reader never sees half a plan).
///
/// ```
/// # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/mlp.ron"))?;
/// # let target = ggplan::target::resolve("cpu")?;
/// let plan = ggplan::compile(&graph, &target, &Default::default())?.plan;
/// let path = std::env::temp_dir().join(format!("ggplan-doc-{}.plan.ron", std::process::id()));
/// ggplan::plan::write(&path, &plan)?;
/// assert_eq!(ggplan::plan::read(&path)?, plan);
/// assert!(ggplan::plan::summary(&plan).contains("1 splits"));
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn write(path: impl AsRef<Path>, plan: &Plan) -> Result<()> {
    Ok(ir::plan::write_plan(path.as_ref(), plan)?)
}

/// Runs the independent checker on `plan`; with a target, op support on each
/// device is checked too. `name` names the plan in the error.
///
/// ```
/// # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/mlp.ron"))?;
/// let target = ggplan::target::resolve("cpu")?;
/// let mut plan = ggplan::compile(&graph, &target, &ggplan::CompileOptions::default())?.plan;
/// ggplan::plan::verify(&plan, Some(&target), "mlp")?;
/// plan.arenas[0].size = 1; // every tensor in it now reaches past its end
/// assert!(ggplan::plan::verify(&plan, Some(&target), "mlp").is_err());
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn verify(plan: &Plan, target: Option<&crate::Target>, name: &str) -> Result<()> {
    let problems = compiler::check::check_plan(plan, target);
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::Invalid {
        name: name.to_string(),
        problems: problems.iter().map(ToString::to_string).collect(),
    })
}
