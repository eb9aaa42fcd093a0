//! ggplan's intermediate representation: the types every other crate speaks.
//!
//! - [`dtype`]: element types with ggml's block geometry;
//! - [`layout`]: extents and byte strides with ggml semantics;
//! - [`op`]: the closed op set and its parameters; [`op_kind`]: the same set
//!   without parameters; [`rules`]: their shape rules;
//! - [`tensor`], [`graph`], [`builder`]: graphs and how to build them;
//! - [`verify`]: every invariant of a graph, all violations at once;
//! - [`text`]: the canonical RON text form of graphs;
//! - [`plan`]: the compiled plan, the compiler's output and the runtime's input;
//! - [`files`]: GGUF, safetensors and npy readers.

pub mod builder;
pub mod dtype;
pub mod error;
pub mod files;
pub mod graph;
pub mod layout;
pub mod op;
pub mod op_kind;
pub mod plan;
pub mod rules;
pub mod shard;
pub mod tensor;
pub mod text;
pub mod verify;

pub use builder::GraphBuilder;
pub use dtype::DType;
pub use error::{Error, Violation};
pub use graph::Graph;
pub use layout::Layout;
pub use op::{GluKind, Op, RopeMode, RopeParams};
pub use op_kind::OpKind;
pub use shard::WeightShard;
pub use tensor::{ConstInit, Role, Tensor, TensorId, ViewOf};
