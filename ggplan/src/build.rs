//! Plans as build artifacts: compile a model's plan in `build.rs`, embed it
//! in the program, load it at start-up with no compilation.
//!
//! In `build.rs` (with `ggplan = { default-features = false }` under
//! `[build-dependencies]`, so the build script links no LLVM):
//!
//! ```no_run
//! use ggplan::build::{GraphSource, PlanBuild, compile_plan};
//! fn main() -> Result<(), ggplan::Error> {
//!     compile_plan(&PlanBuild::new("mlp", GraphSource::Text("graphs/mlp.ron".into()), "cpu"))?;
//!     Ok(())
//! }
//! ```
//!
//! In the program, [`embedded_plan!`](crate::embedded_plan) includes
//! `$OUT_DIR/mlp.plan.ron`, and [`Embedded::plan`] checks its staleness key
//! ([`PlanKey`]) against the graph the program expects, then the plan with
//! the checker. The build script asks cargo to run it again when the graph
//! or target file changes, and cargo does when ggplan changes; a plan that
//! is stale anyway (an embedded file from elsewhere) is refused with the
//! command that rebuilds it.
//!
//! Invariant: [`compile_plan`] writes the plan atomically, so a failed or
//! interrupted build never leaves half a plan to embed.

use crate::graph::ModelShape;
use crate::{CompileOptions, Error, Graph, Plan, PlanKey, Result};
use std::path::{Path, PathBuf};

/// Where a build script gets the graph from.
#[derive(Clone, Debug)]
pub enum GraphSource {
    /// A graph text file.
    Text(PathBuf),
    /// A GGUF model at a fixed shape (only its metadata is read).
    Gguf(PathBuf, ModelShape),
    /// A Hugging Face BERT folder over this many tokens.
    Hf(PathBuf, i64),
}

impl GraphSource {
    /// Builds (or reads) the graph.
    pub fn load(&self) -> Result<Graph> {
        match self {
            GraphSource::Text(path) => crate::graph::read(path),
            GraphSource::Gguf(path, shape) => crate::graph::from_gguf(path, shape),
            GraphSource::Hf(dir, tokens) => crate::graph::from_hf(dir, *tokens),
        }
    }

    /// The files whose change changes the graph.
    fn files(&self) -> Vec<PathBuf> {
        match self {
            GraphSource::Text(path) | GraphSource::Gguf(path, _) => vec![path.clone()],
            GraphSource::Hf(dir, _) => vec![dir.join("config.json"), dir.join("model.safetensors")],
        }
    }
}

/// One plan for a build script to make.
#[derive(Clone, Debug)]
pub struct PlanBuild {
    /// The plan's name: it is written as `NAME.plan.ron`.
    pub name: String,
    /// The graph.
    pub graph: GraphSource,
    /// The target: a preset name or a target file (`host` is refused: a
    /// plan embedded in a program must not depend on the machine that built it).
    pub target: String,
    /// Compile options (their flags are filled in from the target).
    pub options: CompileOptions,
}

impl PlanBuild {
    /// A plan called `name` of `graph` for `target` with default options.
    pub fn new(name: &str, graph: GraphSource, target: &str) -> PlanBuild {
        PlanBuild {
            name: name.to_string(),
            graph,
            target: target.to_string(),
            options: CompileOptions::default(),
        }
    }

    /// The same build with these options.
    pub fn with_options(mut self, options: CompileOptions) -> PlanBuild {
        self.options = options;
        self
    }
}

/// For `build.rs`: compiles `build` into `$OUT_DIR/NAME.plan.ron`, tells cargo
/// to run the script again when the graph's or target's files change, and
/// returns the plan's path.
pub fn compile_plan(build: &PlanBuild) -> Result<PathBuf> {
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| {
        Error::Usage("compile_plan runs in a build script: OUT_DIR is not set".to_string())
    })?;
    let path = compile_plan_into(build, Path::new(&out_dir))?;
    let mut watched = build.graph.files();
    if Path::new(&build.target).is_file() {
        watched.push(PathBuf::from(&build.target));
    }
    for file in watched {
        println!("cargo::rerun-if-changed={}", file.display());
    }
    Ok(path)
}

/// [`compile_plan`]'s work without cargo: compiles into `dir/NAME.plan.ron`
/// (written atomically) and returns the path.
pub fn compile_plan_into(build: &PlanBuild, dir: &Path) -> Result<PathBuf> {
    if build.target == "host" {
        return Err(Error::Usage(format!(
            "plan '{}': an embedded plan cannot target 'host' (it would depend on the machine that built it); \
             write this machine's target with `ggplan devices --write-target FILE` and name the file",
            build.name
        )));
    }
    let graph = build.graph.load()?;
    let target = crate::target::resolve(&build.target)?;
    let mut options = build.options.clone();
    options.spelled = options.flags(&build.target);
    let plan = crate::compile(&graph, &target, &options)?.plan;
    let path = dir.join(format!("{}.plan.ron", build.name));
    crate::plan::write(&path, &plan)?;
    Ok(path)
}

/// A plan embedded in the program by [`embedded_plan!`](crate::embedded_plan).
#[derive(Clone, Copy, Debug)]
pub struct Embedded {
    /// The plan's file name (`NAME.plan.ron`), for messages.
    pub name: &'static str,
    /// The plan's text.
    pub text: &'static str,
    /// The command that rebuilds it.
    pub rebuild: &'static str,
}

/// Embeds `$OUT_DIR/NAME.plan.ron`, written by [`compile_plan`] in the
/// crate's build script, as an [`Embedded`].
#[macro_export]
macro_rules! embedded_plan {
    ($name:literal) => {
        $crate::build::Embedded {
            name: concat!($name, ".plan.ron"),
            text: include_str!(concat!(env!("OUT_DIR"), "/", $name, ".plan.ron")),
            rebuild: concat!("cargo clean -p ", env!("CARGO_PKG_NAME"), " && cargo build"),
        }
    };
}

impl Embedded {
    /// Parses the plan, refuses it when stale against `expected` (see
    /// [`PlanKey::check`]), and runs the checker on it.
    pub fn plan(&self, expected: &PlanKey) -> Result<Plan> {
        let plan = crate::plan::parse(self.text, self.name)?;
        expected.check(&plan, self.name, self.rebuild)?;
        crate::plan::verify(&plan, None, self.name)?;
        Ok(plan)
    }

    /// [`Embedded::plan`], then loads it on the runtime.
    #[cfg(feature = "runtime")]
    pub fn load(
        &self,
        expected: &PlanKey,
        weights: crate::Weights,
        options: &crate::LoadOptions,
    ) -> Result<Loaded> {
        let compiled_before = compiler::pipeline::compilations();
        let plan = self.plan(expected)?;
        let runtime = crate::Runtime::load(std::sync::Arc::new(plan), weights, options)?;
        Ok(Loaded {
            runtime,
            plans_compiled: compiler::pipeline::compilations() - compiled_before,
        })
    }
}

/// An embedded plan, loaded.
#[cfg(feature = "runtime")]
pub struct Loaded {
    /// The runtime, ready for inputs (its `load_report` says what loading did).
    pub runtime: crate::Runtime,
    /// Plans the compiler made in this process while loading: 0, since the
    /// plan came compiled (kept so programs and tests can show it).
    pub plans_compiled: usize,
}
