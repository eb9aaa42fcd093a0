//! Model front-ends: fixed-shape graph builders driven by plain config structs.
//!
//! - [`llama`]: llama-family decoders (prefill of `n_tokens` tokens, GQA, rope,
//!   causal soft_max attention, SwiGLU FFN), node for node as ggml builds them,
//!   and generation graphs over a KV cache held in state tensors;
//! - [`bert`]: BERT encoders with mean (or `[CLS]`) pooling and L2
//!   normalisation, as sentence-transformers computes sentence embeddings,
//!   from a Hugging Face folder or a GGUF file;
//! - [`Family`]: which of the two a GGUF file's architecture is for;
//! - [`capture`]: llama.cpp's own decode graph, captured by
//!   `scripts/llama-capture.sh`, imported;
//! - [`quantize`]: a GGUF file requantized to another format (Q4_0 ... Q6_K,
//!   llama.cpp's Q4_K_M mix);
//! - [`tokenizer`]: text to token ids and back (GGUF byte-level BPE, SentencePiece and
//!   WordPiece, Hugging Face `tokenizer.json`), with streaming decoding for
//!   generation.
//!
//! Invariants shared by every builder here:
//! - graphs are built with [`ir::GraphBuilder`], so a returned graph has passed
//!   `ir::verify`; a config that cannot form a valid graph (heads that do not
//!   divide, a rope wider than a head, a quantized row that is not a whole number
//!   of blocks) fails with the `ir::Error` of the first node that breaks, naming
//!   that node, its op and its operands' shapes;
//! - all leafs come first (token ids, other inputs and constants, state, then
//!   weights in file order),
//!   then the nodes in ggml's execution order;
//! - weights are laid out as ggml stores them: a matrix mapping `in` to `out`
//!   features has `ne = [in, out]` (a safetensors `[out, in]` matrix, or a GGUF
//!   tensor as stored), which is exactly `mul_mat`'s src0.

mod attention;
pub mod bert;
pub mod capture;
mod error;
mod family;
mod gguf_meta;
pub mod llama;
pub mod quantize;
pub mod tokenizer;

pub use error::Error;
pub use family::{Family, SUPPORTED_ARCHITECTURES};
pub use tokenizer::{StreamDecoder, Tokenizer, TokenizerError};
