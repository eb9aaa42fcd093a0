//! The staleness key of a plan: what must not have changed since it was
//! compiled for the plan to still be the right one to run.
//!
//! A precompiled plan (embedded by a build script, or a file shipped with a
//! program) is made for one graph, one target, one compiler and one plan
//! format. If the model definition changed, the program now expects another
//! target, or ggplan was upgraded without recompiling, the plan is stale:
//! it may still pass the checker (it is a valid plan, of something else), so
//! the key is compared before loading and a stale plan is refused with the
//! command that rebuilds it.

use crate::{Error, Graph, Plan, Result};

/// Graph hash, target, compiler version and plan format of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanKey {
    /// Fingerprint of the graph's canonical text.
    pub graph_hash: String,
    /// The target's name.
    pub target: String,
    /// The version of the compiler that made (or would make) the plan.
    pub compiler_version: String,
    /// The plan format version.
    pub format_version: u32,
}

impl PlanKey {
    /// The key `plan` carries.
    pub fn of(plan: &Plan) -> PlanKey {
        PlanKey {
            graph_hash: plan.graph_hash.clone(),
            target: plan.target_name.clone(),
            compiler_version: plan.compiler_version.clone(),
            format_version: plan.format_version,
        }
    }

    /// The key a plan compiled now, by this ggplan, for `graph` on the
    /// target called `target` would carry.
    pub fn expected(graph: &Graph, target: &str) -> PlanKey {
        PlanKey {
            graph_hash: compiler::pipeline::graph_hash(graph),
            target: target.to_string(),
            compiler_version: compiler::pipeline::VERSION.to_string(),
            format_version: ir::plan::PLAN_FORMAT_VERSION,
        }
    }

    /// Ok when `plan` carries this key; else [`Error::Stale`] naming the
    /// first difference (both values) and `rebuild`, the command that makes
    /// a fresh plan. `name` names the plan (its file).
    ///
    /// ```
    /// # let graph = ggplan::graph::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/graphs/mlp.ron"))?;
    /// # let target = ggplan::target::resolve("cpu")?;
    /// let mut plan = ggplan::compile(&graph, &target, &ggplan::CompileOptions::default())?.plan;
    /// let key = ggplan::PlanKey::expected(&graph, "cpu");
    /// key.check(&plan, "mlp.plan.ron", "cargo build")?;
    /// plan.compiler_version = "0.0.1".into();
    /// let stale = key.check(&plan, "mlp.plan.ron", "cargo build").unwrap_err().to_string();
    /// assert!(stale.contains("rebuild it with `cargo build`"), "{stale}");
    /// # Ok::<(), ggplan::Error>(())
    /// ```
    pub fn check(&self, plan: &Plan, name: &str, rebuild: &str) -> Result<()> {
        let found = PlanKey::of(plan);
        let why = if found.format_version != self.format_version {
            format!(
                "plan format {}, this ggplan reads format {}",
                found.format_version, self.format_version
            )
        } else if found.compiler_version != self.compiler_version {
            format!(
                "compiled by ggplan {}, this program uses ggplan {}",
                found.compiler_version, self.compiler_version
            )
        } else if found.graph_hash != self.graph_hash {
            format!(
                "compiled for graph '{}' with hash {}, the graph is now {}",
                plan.graph_name, found.graph_hash, self.graph_hash
            )
        } else if found.target != self.target {
            format!(
                "compiled for target '{}', this program runs on '{}'",
                found.target, self.target
            )
        } else {
            return Ok(());
        };
        Err(Error::Stale {
            name: name.to_string(),
            why,
            rebuild: rebuild.to_string(),
            found: Box::new(found),
        })
    }
}

/// The `ggplan compile` command that makes `plan` again from the graph file
/// `graph`, written to `output`: the flags come from the plan's `options`.
pub fn compile_command(plan: &Plan, graph: &str, output: &str) -> String {
    let mut words = vec!["ggplan compile".to_string(), graph.to_string()];
    words.extend(plan.options.iter().cloned());
    words.push(format!("-o {output}"));
    words.join(" ")
}
