//! The model jobs (feature `jit`): [`Generator`] (greedy text generation
//! with a llama-family GGUF: a prefill plan, then decode plans per context
//! bucket sharing one KV cache) and [`Embedder`] (sentence embeddings with a
//! BERT encoder), [`ImportedGenerator`] (the same generation with graphs
//! imported from llama.cpp's captures), each compiling its plans for this CPU and running them on
//! the runtime. `ggplan generate` and `ggplan embed` are thin printers over
//! them.

pub mod buckets;
mod embedder;
mod generator;
mod greedy;
mod imported;
pub mod session;

pub use embedder::{Embedder, Embedding, cosine};
pub use generator::{GenerateEvent, GenerateOptions, Generation, Generator, StopReason, argmax};
pub use imported::ImportedGenerator;
pub use session::{Progress, Session};
