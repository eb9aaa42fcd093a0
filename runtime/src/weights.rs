//! Where weight values come from, and binding them to a plan's weight tensors
//! by name.
//!
//! Invariants:
//! - binding is strict: a stored tensor must have exactly the plan's dtype and
//!   extents (an error names the tensor, the file, both shapes);
//! - zero-copy: a stored tensor whose bytes in the mapped file start at a
//!   multiple of [`ZERO_COPY_ALIGN`] is used in place (kernels only read
//!   weights; the file stays mapped while the runtime lives); any other is
//!   copied once into the plan's weights arena;
//! - random weights are the reference evaluator's
//!   ([`kernels::evaluate::random_leaf`] for a whole weight,
//!   [`kernels::evaluate::random_weight`] for a shard), so a plan run here
//!   and the reference evaluator with the same seed see the same values;
//! - a weight shard ([`WeightShard`], tensor parallelism) holds exactly the
//!   slice of what its source would be bound to unsplit: the stored tensor
//!   `shard.of` must be the whole source (the shard's dtype and `full_ne`;
//!   an error names the shard, the source and the file), and random values
//!   are drawn for the whole source, then cut. A shard is always copied
//!   (cut from the source), never used in place.

use crate::RuntimeError;
use ir::files::TensorSource;
use ir::layout::fmt_ne;
use ir::{DType, Layout, WeightShard};
use std::path::Path;
use std::sync::Arc;

/// Alignment a weight's bytes in a mapped file need to be used in place:
/// a full AVX2 vector, and every dtype's own alignment.
pub const ZERO_COPY_ALIGN: usize = 32;

/// Weight values for a plan.
#[derive(Clone)]
pub enum Weights {
    /// A GGUF or safetensors file, mapped once; tensors bound by name.
    File(Arc<dyn TensorSource>),
    /// Seeded random values (the reference evaluator's, for synthetic runs).
    Random {
        /// The seed.
        seed: u64,
    },
}

impl Weights {
    /// Opens a `.gguf` or `.safetensors` file.
    pub fn open(path: impl AsRef<Path>) -> Result<Weights, RuntimeError> {
        let file = ir::files::open_tensor_file(path)?;
        Ok(Weights::File(Arc::from(file)))
    }

    /// A short description for messages.
    pub fn describe(&self) -> String {
        match self {
            Weights::File(f) => f.path().display().to_string(),
            Weights::Random { seed } => format!("random weights (seed {seed})"),
        }
    }
}

/// A weight's bytes: in the mapped file (zero-copy) or to be copied.
pub enum BoundWeight<'w> {
    /// Use these bytes in place.
    InPlace(&'w [u8]),
    /// Copy these bytes into the arena.
    Copy(std::borrow::Cow<'w, [u8]>),
}

fn describe(dtype: DType, ne: &[i64; 4]) -> String {
    format!("{dtype} {}", fmt_ne(ne))
}

/// The bytes of weight `name` with `layout` (packed), from `weights`; for a
/// shard (`shard` is `Some`), its slice of the stored tensor `shard.of`.
pub(crate) fn bind_weight<'w>(
    weights: &'w Weights,
    name: &str,
    layout: &Layout,
    shard: Option<&WeightShard>,
) -> Result<BoundWeight<'w>, RuntimeError> {
    if let Some(shard) = shard {
        return bind_shard(weights, name, layout, shard).map(|b| BoundWeight::Copy(b.into()));
    }
    match weights {
        Weights::File(file) => {
            let stored = file
                .tensor(name)
                .ok_or_else(|| RuntimeError::MissingWeight {
                    name: name.to_string(),
                    file: file.path().display().to_string(),
                })?;
            if (stored.dtype, stored.ne) != (layout.dtype, layout.ne) {
                return Err(RuntimeError::Mismatch {
                    what: "weight",
                    name: name.to_string(),
                    origin: format!(" in {}", file.path().display()),
                    found: describe(stored.dtype, &stored.ne),
                    expected: describe(layout.dtype, &layout.ne),
                });
            }
            let aligned = (stored.data.as_ptr() as usize).is_multiple_of(ZERO_COPY_ALIGN);
            if aligned && layout.is_contiguous() {
                Ok(BoundWeight::InPlace(stored.data))
            } else {
                Ok(BoundWeight::Copy(stored.data.into()))
            }
        }
        Weights::Random { seed } => Ok(BoundWeight::Copy(
            kernels::evaluate::random_leaf(name, layout, *seed, None).into(),
        )),
    }
}

/// The packed bytes of shard `name` (extents `layout.ne`), cut from its source.
fn bind_shard(
    weights: &Weights,
    name: &str,
    layout: &Layout,
    shard: &WeightShard,
) -> Result<Vec<u8>, RuntimeError> {
    let (dtype, ne) = (layout.dtype, layout.ne);
    // The plan checker refuses such a shard; checked here too so that the
    // message says what is wrong with the slice, not that a cut failed.
    if let Some(why) = shard.problem(dtype, ne) {
        return Err(invalid_shard(name, shard, why));
    }
    match weights {
        Weights::File(file) => {
            let origin = file.path().display().to_string();
            let stored =
                file.tensor(&shard.of)
                    .ok_or_else(|| RuntimeError::MissingShardSource {
                        name: name.to_string(),
                        of: shard.of.clone(),
                        file: origin.clone(),
                    })?;
            if (stored.dtype, stored.ne) != (dtype, shard.full_ne) {
                return Err(RuntimeError::ShardSourceMismatch {
                    name: name.to_string(),
                    stored: format!("'{}' in {origin}", shard.of),
                    found: describe(stored.dtype, &stored.ne),
                    expected: describe(dtype, &shard.full_ne),
                });
            }
            // A file's tensor is exactly its packed bytes (ir::files), so
            // the cut fails only for a slice `problem` already refused.
            shard.extract(dtype, ne, stored.data).ok_or_else(|| {
                let why = "the stored bytes are not the source's size".to_string();
                invalid_shard(name, shard, why)
            })
        }
        // Every shard draws its whole source and keeps its slice: a source has
        // a few shards (one per device), and caching it would hold a whole
        // unsplit tensor in memory for the length of the load.
        Weights::Random { seed } => {
            kernels::evaluate::random_weight(name, layout, Some(shard), *seed)
                .map_err(|why| invalid_shard(name, shard, why))
        }
    }
}

fn invalid_shard(name: &str, shard: &WeightShard, why: String) -> RuntimeError {
    RuntimeError::InvalidShard {
        name: name.to_string(),
        of: shard.of.clone(),
        why,
    }
}

#[cfg(test)]
mod tests;
