//! What can be wrong with a capture file or with importing it.

use std::path::PathBuf;

/// An error reading or importing a capture of llama.cpp's decode.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file cannot be read or is not JSON (serde_json's line and column).
    #[error("{path}: {reason}")]
    File {
        /// The capture file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A field is missing, of the wrong type or inconsistent with another.
    #[error("{path}: {place}: {reason}")]
    Field {
        /// The capture file.
        path: PathBuf,
        /// Where: `tensors[12] 'Qcur-0' .src[1]`, `version`, ...
        place: String,
        /// What is wrong.
        reason: String,
    },
    /// Ops (or op variants, dtypes) the capture uses that ggplan's IR lacks,
    /// every one with how many tensors use it.
    #[error("{path}: ggplan cannot import {}: {}", count(.missing.iter().map(|m| m.1).sum(), "tensor", "tensors"), list(.missing))]
    Unsupported {
        /// The capture file.
        path: PathBuf,
        /// What is missing and how many tensors need it, most used first.
        missing: Vec<(String, usize)>,
    },
    /// The IR refused a node the capture describes (shapes that do not agree).
    #[error("{path}: tensors[{id}] '{name}': {source}")]
    Graph {
        /// The capture file.
        path: PathBuf,
        /// The capture's tensor id.
        id: usize,
        /// Its name in the capture.
        name: String,
        /// The IR's error.
        source: Box<ir::Error>,
    },
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn list(missing: &[(String, usize)]) -> String {
    let items: Vec<String> = (missing.iter())
        .map(|(what, n)| format!("{what} ({})", count(*n, "tensor", "tensors")))
        .collect();
    items.join(", ")
}
