//! llama.cpp's own decode, captured by `scripts/llama-capture.sh` (format
//! `ggplan-llama-capture`, version 1), read and checked ([`read_capture`])
//! and imported as a ggplan graph ([`import`]).
//!
//! Invariants of a [`Capture`] returned by [`read_capture`]:
//! - every key of the file is one this module reads (an unknown key is
//!   refused by name: a newer capture tool's fields are never ignored);
//! - tensor `i` has id `i`; every source and view source is an earlier
//!   tensor; every copy's original exists; `nodes` lists node tensors, each
//!   once; extents are at least 1;
//! - a graph input's values, when present, are exactly its packed bytes.

mod batch;
mod error;
mod flash_attn;
mod import;
mod read;

pub use batch::BatchInputs;
pub use error::CaptureError;
pub use import::{Imported, import};
pub use read::read_capture;

use std::path::PathBuf;

/// One captured decode.
#[derive(Clone, Debug)]
pub struct Capture {
    /// The file it was read from (errors name it).
    pub path: PathBuf,
    /// The GGUF file llama.cpp decoded.
    pub model: String,
    /// Its `general.architecture`.
    pub architecture: String,
    /// The flags the capture tool was given.
    pub args: Vec<String>,
    /// Vocabulary size (the logits' row length).
    pub n_vocab: u64,
    /// llama.cpp's context size (KV cache rows).
    pub n_ctx: u64,
    /// The token ids decoded.
    pub tokens: Vec<i64>,
    /// The greedy continuation llama.cpp decoded after them (`--greedy N`;
    /// empty when not asked): each token the argmax of the previous logits.
    pub greedy: Vec<i64>,
    /// Every tensor the graph reaches, sources first.
    pub tensors: Vec<CapturedTensor>,
    /// Node ids in the order the scheduler computed them.
    pub nodes: Vec<usize>,
    /// The scheduler's splits, in order.
    pub splits: Vec<CapturedSplit>,
    /// The scheduler's input copies.
    pub copies: Vec<CapturedCopy>,
    /// llama.cpp's reservation log lines (compute buffers, graph counts).
    pub reserve: Vec<String>,
}

/// One tensor of the captured graph, as ggml describes it.
#[derive(Clone, Debug)]
pub struct CapturedTensor {
    /// ggml's name (not unique: llama.cpp reuses names across ops).
    pub name: String,
    /// `ggml_op_name`: `MUL_MAT`, `UNARY`, `NONE` for a leaf, ...
    pub op: String,
    /// `ggml_op_desc`: the unary or GLU op for those (`SILU`, `SWIGLU`), else the op.
    pub desc: String,
    /// `ggml_type_name`: `f32`, `q4_K`, `i64`, ...
    pub dtype: String,
    /// Extents, `ne[0]` innermost.
    pub ne: [i64; 4],
    /// Byte strides.
    pub nb: [u64; 4],
    /// The 16 op-parameter words.
    pub op_params: [i32; 16],
    /// ggml's tensor flags (1 input, 2 output, ...).
    pub flags: u32,
    /// Source ids.
    pub src: Vec<usize>,
    /// The view source's id and byte offset, for views.
    pub view: Option<(usize, u64)>,
    /// The buffer type it lived in (`CPU`, `CPU_Mapped`, `RPC0[host:port]`; empty when unknown).
    pub buffer: String,
    /// A node of the graph (computed), not a leaf.
    pub node: bool,
    /// For a scheduler input copy, the id of the tensor it copies.
    pub copy_of: Option<usize>,
    /// An original that only its copies reach, entered from a copy.
    pub reconstructed: bool,
    /// A graph input's values as llama.cpp set them (packed bytes).
    pub data: Option<Vec<u8>>,
}

/// ggml's input flag.
pub const FLAG_INPUT: u32 = 1;
/// ggml's output flag.
pub const FLAG_OUTPUT: u32 = 2;

impl CapturedTensor {
    /// A float op parameter (word `i` read as f32).
    pub fn param_f32(&self, i: usize) -> f32 {
        f32::from_bits(self.op_params[i] as u32)
    }
}

/// One split of the scheduler: nodes `first..end` (positions in
/// [`Capture::nodes`]) in one backend's buffers, and the copies they read.
#[derive(Clone, Debug)]
pub struct CapturedSplit {
    /// Buffer type of the split's nodes.
    pub buffer: String,
    /// First node position.
    pub first: usize,
    /// One past the last node position.
    pub end: usize,
    /// Ids of the input copies the split reads.
    pub inputs: Vec<usize>,
}

/// One input copy of the scheduler.
#[derive(Clone, Debug)]
pub struct CapturedCopy {
    /// The copy's tensor id.
    pub tensor: usize,
    /// The backend it copies to.
    pub backend: String,
    /// The original's name.
    pub original: String,
    /// Bytes copied.
    pub bytes: u64,
}
