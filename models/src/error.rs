//! The `models` crate's error type: why a model file could not become a config.
//!
//! Invariant: every variant names the file it is about, and the key or tensor
//! when one is to blame.

use std::path::PathBuf;

/// Why a config could not be read from a model file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file (or its folder) could not be read or parsed.
    #[error("{}: {reason}", file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The model's architecture is not one this loader builds.
    #[error("{}: architecture '{arch}' is not supported (supported: {supported})", file.display())]
    UnsupportedArchitecture {
        /// The file.
        file: PathBuf,
        /// The architecture the file declares.
        arch: String,
        /// The architectures this loader accepts.
        supported: &'static str,
    },
    /// A metadata key (GGUF) or config field (JSON) the config needs is absent.
    #[error("{}: missing key '{key}'", file.display())]
    MissingKey {
        /// The file.
        file: PathBuf,
        /// The key.
        key: String,
    },
    /// A key is present but its value has the wrong type or is out of range.
    #[error("{}: key '{key}' {reason}", file.display())]
    BadValue {
        /// The file.
        file: PathBuf,
        /// The key.
        key: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// A tensor the config is read from is absent.
    #[error("{}: missing tensor '{tensor}'", file.display())]
    MissingTensor {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
    },
    /// A tensor the model needs has the wrong shape or dtype.
    #[error("{}: tensor '{tensor}' {reason}", file.display())]
    BadTensor {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong with it (found vs expected).
        reason: String,
    },
    /// The file holds tensors the model's graph has no use for: a feature the
    /// builder does not model (experts, ...). Binding the rest would compute
    /// another model without a word, so the file is refused.
    #[error(
        "{}: the model's graph does not use {}; the file describes something this builder \
         does not model, so it is refused rather than run without {}",
        file.display(),
        quote_list(tensors),
        if tensors.len() == 1 { "it" } else { "them" }
    )]
    UnusedTensors {
        /// The file.
        file: PathBuf,
        /// Every tensor of the file the graph leaves unbound, in file order.
        tensors: Vec<String>,
    },
    /// The file is well formed but describes a model the builders cannot build.
    #[error("{}: {reason}", file.display())]
    Unsupported {
        /// The file.
        file: PathBuf,
        /// What is not supported.
        reason: String,
    },
}

/// `tensor 'a'`, `tensors 'a', 'b' and 'c'`; past eight names, a count of the rest.
fn quote_list(names: &[String]) -> String {
    const SHOWN: usize = 8;
    let quoted: Vec<String> = names.iter().take(SHOWN).map(|n| format!("'{n}'")).collect();
    match (names.len(), quoted.split_last()) {
        (_, None) => "no tensor".to_string(),
        (1, Some((only, _))) => format!("tensor {only}"),
        (n, Some((last, rest))) if n <= SHOWN => format!("tensors {} and {last}", rest.join(", ")),
        (n, _) => format!("tensors {} and {} more", quoted.join(", "), n - SHOWN),
    }
}
