//! The `ir` crate's one error type.

use crate::files::FileError;

/// One broken invariant of a graph, located by tensor (and source line when the
/// graph came from text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index of the offending tensor, when one is to blame.
    pub tensor: Option<u32>,
    /// Its name (empty for graph-wide problems).
    pub name: String,
    /// The op of the offending tensor, or `leaf`.
    pub op: String,
    /// 1-based line in the graph file, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        match self.tensor {
            Some(id) => write!(
                f,
                "tensor '{}' (t{id}, {}): {}",
                self.name, self.op, self.message
            ),
            None => write!(f, "graph: {}", self.message),
        }
    }
}

/// Formats violations one per line, for error messages.
pub fn list_violations(v: &[Violation]) -> String {
    v.iter()
        .map(|x| format!("  - {x}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Everything that can go wrong building, parsing or verifying a graph.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op's operands break its shape or dtype rules.
    #[error("{op} '{name}': {reason}; operands: {operands}")]
    Op {
        /// The op's name.
        op: &'static str,
        /// The node being built.
        name: String,
        /// Which rule fails.
        reason: String,
        /// The operands, as `'name' dtype [ne]`.
        operands: String,
    },
    /// A leaf cannot be created as asked.
    #[error("leaf '{name}': {reason}")]
    Leaf {
        /// The leaf's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Two tensors share a name.
    #[error("tensor name '{0}' is used twice")]
    DuplicateName(String),
    /// A reference to a tensor that does not exist (yet).
    #[error("'{user}' refers to '{name}', which is not defined before it")]
    UnknownTensor {
        /// The tensor making the reference.
        user: String,
        /// The missing name.
        name: String,
    },
    /// The graph text is not well-formed RON for the graph format.
    #[error("{path}:{line}:{col}: {message}")]
    Syntax {
        /// The file (or `<text>`).
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What the parser expected.
        message: String,
    },
    /// A graph file of a version this build does not read.
    #[error(
        "{path}: graph format_version {found} is not supported (this build reads version {supported})"
    )]
    FormatVersion {
        /// The file.
        path: String,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A file of an older version this build no longer reads, with what to do.
    #[error(
        "{path}: format_version {found} is no longer read (this build reads version {supported}): {remedy}"
    )]
    Outdated {
        /// The file.
        path: String,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
        /// How to make a file this build reads.
        remedy: String,
    },
    /// The graph breaks invariants; every violation is listed.
    #[error("{path}: the graph is invalid ({} problem{}):\n{}", .violations.len(), if .violations.len() == 1 { "" } else { "s" }, list_violations(.violations))]
    Invalid {
        /// The file (or the graph's name).
        path: String,
        /// Every broken invariant.
        violations: Vec<Violation>,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A tensor file (GGUF, safetensors, npy) is unreadable.
    #[error(transparent)]
    File(#[from] FileError),
}
