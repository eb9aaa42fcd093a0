//! The one error type of the facade: every layer's error, plus the facade's
//! own refusals (a stale embedded plan, a failed quality gate).

use crate::key::PlanKey;

/// Anything ggplan refuses or fails at; each variant's message names what is
/// wrong and where (file, tensor, line).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A graph, plan or tensor file is unreadable or invalid.
    #[error(transparent)]
    Ir(#[from] ir::Error),
    /// A tensor file's bytes are malformed.
    #[error(transparent)]
    File(#[from] ir::files::FileError),
    /// The compiler refused the graph or options, or a target is invalid.
    #[error(transparent)]
    Compile(#[from] compiler::Error),
    /// A model file could not be turned into a graph.
    #[error(transparent)]
    Model(#[from] models::Error),
    /// A tokenizer could not be built, or text not encoded or decoded.
    #[error(transparent)]
    Tokenizer(#[from] models::TokenizerError),
    /// The runtime refused the plan, its weights or inputs, or failed a run.
    #[cfg(feature = "runtime")]
    #[error(transparent)]
    Runtime(#[from] runtime::RuntimeError),
    /// The plan failed the checker.
    #[error("{name}: the plan fails the checker ({} problem{}):\n{}", .problems.len(), if .problems.len() == 1 { "" } else { "s" }, .problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// The plan's file name or graph name.
        name: String,
        /// Every problem, as the checker words it.
        problems: Vec<String>,
    },
    /// A plan made for another graph, target or ggplan than this program's.
    #[error("{name} is stale: {why}; rebuild it with `{rebuild}`")]
    Stale {
        /// The plan's file name.
        name: String,
        /// What differs, both values named.
        why: String,
        /// The command that makes a fresh plan.
        rebuild: String,
        /// The key the plan carries.
        found: Box<PlanKey>,
    },
    /// The plan is valid but misses a quality gate (`max_splits`, ...).
    #[error("{name}: {} gate{} failed:\n{}", .failures.len(), if .failures.len() == 1 { "" } else { "s" }, .failures.iter().map(|f| format!("  - {f}")).collect::<Vec<_>>().join("\n"))]
    Gates {
        /// The plan's file name or graph name.
        name: String,
        /// Each failed gate with the measured value and the limit.
        failures: Vec<String>,
    },
    /// A request the facade cannot serve (options that do not go together).
    #[error("{0}")]
    Usage(String),
    /// Reading or writing a file outside the layers' own readers.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The facade's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
