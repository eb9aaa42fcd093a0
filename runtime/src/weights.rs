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
//! - random weights are [`kernels::evaluate::random_leaf`]'s, so a plan run
//!   here and the reference evaluator with the same seed see the same values.

use crate::RuntimeError;
use ir::files::TensorSource;
use ir::layout::fmt_ne;
use ir::{DType, Layout};
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
pub(crate) enum BoundWeight<'w> {
    /// Use these bytes in place.
    InPlace(&'w [u8]),
    /// Copy these bytes into the arena.
    Copy(std::borrow::Cow<'w, [u8]>),
}

fn describe(dtype: DType, ne: &[i64; 4]) -> String {
    format!("{dtype} {}", fmt_ne(ne))
}

/// The bytes of weight `name` with `layout` (packed), from `weights`.
pub(crate) fn bind_weight<'w>(
    weights: &'w Weights,
    name: &str,
    layout: &Layout,
) -> Result<BoundWeight<'w>, RuntimeError> {
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
