//! The fuzz bodies: one function per fuzz target, taking the fuzzer's bytes.
//!
//! `fuzz/fuzz_targets/*.rs` (cargo-fuzz, nightly, sanitizers) are one-line
//! wrappers around these, and `tests/fuzz_corpus.rs` runs every seed and every
//! input that once crashed through the same functions on the stable toolchain,
//! so a fixed crash stays fixed in `cargo test`.
//!
//! Invariant: a body panics only on a bug in ggplan: bad input must come back
//! as an error value, and anything accepted must satisfy the checks the body
//! states (a compiled plan passes the checker, a checked plan runs, fast
//! kernels agree with the reference). Resource limits that are the harness's
//! own (inputs so large a run would take seconds) skip the input instead.

mod graphs;
mod plans;
mod readers;
mod rpc;
pub mod seeds;

pub use graphs::{differential, graph_text};
pub use plans::{PlanOutcome, edited_plan, plan_edit, plan_edit_outcome, plan_text};
pub use readers::{capture, gguf, hf_folder, npy, tokenizer};
pub use rpc::rpc_answers;

use std::path::PathBuf;

/// A fuzz body: the fuzzer's bytes in, a panic only on a bug.
pub type Body = fn(&[u8]);

/// Every fuzz target, by the name cargo-fuzz knows it by, with its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("graph_text", graph_text),
    ("plan_text", plan_text),
    ("plan_edit", plan_edit),
    ("gguf", gguf),
    ("hf_folder", hf_folder),
    ("npy", npy),
    ("tokenizer", tokenizer),
    ("differential", differential),
    ("rpc_answers", rpc_answers),
    ("capture", capture),
];

/// A file or folder under tmpfs (or the temp dir) unique to this process and
/// thread, removed when dropped. The readers open files by path (GGUF and
/// safetensors are memory-mapped), so each input is written out first.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// The scratch path for `name` (nothing is created).
    fn path(name: &str) -> Scratch {
        let base = Some(PathBuf::from("/dev/shm"))
            .filter(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let thread = format!("{:?}", std::thread::current().id());
        let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
        Scratch(base.join(format!(
            "ggplan-fuzz-{}-{thread}-{name}",
            std::process::id()
        )))
    }

    /// A scratch file `name` holding `bytes`.
    pub(crate) fn file(name: &str, bytes: &[u8]) -> Scratch {
        let s = Scratch::path(name);
        std::fs::write(&s.0, bytes).unwrap_or_else(|e| panic!("{}: {e}", s.0.display()));
        s
    }

    /// An empty scratch folder `name`.
    pub(crate) fn dir(name: &str) -> Scratch {
        let s = Scratch::path(name);
        let _ = std::fs::remove_dir_all(&s.0);
        std::fs::create_dir_all(&s.0).unwrap_or_else(|e| panic!("{}: {e}", s.0.display()));
        s
    }

    /// Where it is.
    pub(crate) fn as_path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}
