//! Initial bytes of leafs (weights, inputs, state, constants), shared by the
//! graph evaluator and the plan evaluator.
//!
//! Invariants:
//! - binding is strict: a weight or input whose dtype or shape differs from
//!   what is declared is an error naming the tensor, never a conversion;
//! - a weight shard ([`WeightShard`]) holds exactly the slice of the values
//!   its source would be bound to unsplit: the stored tensor `shard.of` must
//!   be the whole source (dtype and `full_ne`), and random values are drawn
//!   for the whole source under its own name and then cut, so the shards of
//!   one source put side by side along their axis are the unsplit weight.

use super::{Bindings, EvalError, Weights};
use crate::quant::quantize_row;
use crate::reference::{Dense, scatter};
use ir::layout::fmt_ne;
use ir::{ConstInit, DType, Layout, Role, WeightShard};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// What binding needs to know about a leaf.
pub(super) struct Leaf<'a> {
    /// Its name (weights: the name in the file).
    pub name: &'a str,
    /// Its layout (packed).
    pub layout: Layout,
    /// Weight, Input, State or Constant.
    pub role: Role,
    /// For constants.
    pub init: Option<&'a ConstInit>,
    /// For a weight that is one slice of a stored tensor.
    pub shard: Option<&'a WeightShard>,
    /// For I32 index leafs: how many rows the tensors they index have.
    pub index_bound: Option<i64>,
}

fn describe(dtype: DType, ne: &[i64; 4]) -> String {
    format!("{dtype} {}", fmt_ne(ne))
}

/// The initial bytes of a leaf.
pub(super) fn bind_leaf(t: &Leaf<'_>, b: &Bindings<'_>) -> Result<Vec<u8>, EvalError> {
    let layout = t.layout;
    match t.role {
        Role::Weight => match t.shard {
            Some(shard) => bind_shard(t, shard, &b.weights),
            None => bind_weight(t, &b.weights),
        },
        Role::Input | Role::State => match b.inputs.get(t.name) {
            Some(values) => from_values(t, values),
            None if t.role == Role::State => Ok(vec![0u8; layout.span_bytes() as usize]),
            None => match b.random_inputs {
                Some(seed) => Ok(random_leaf(t.name, &layout, seed, t.index_bound)),
                None => Err(EvalError::MissingInput {
                    name: t.name.to_string(),
                    expected: describe(layout.dtype, &layout.ne),
                }),
            },
        },
        Role::Constant => {
            let init = t.init.expect("verified constants have an init");
            Ok(constant_leaf(init, &layout))
        }
        Role::Intermediate | Role::Output => unreachable!("verified leafs have leaf roles"),
    }
}

/// The bytes of a whole weight: the stored tensor of its name, or random.
fn bind_weight(t: &Leaf<'_>, weights: &Weights<'_>) -> Result<Vec<u8>, EvalError> {
    let layout = t.layout;
    match weights {
        Weights::File(file) => {
            let stored = file
                .tensor(t.name)
                .ok_or_else(|| EvalError::MissingWeight {
                    name: t.name.to_string(),
                    file: file.path().display().to_string(),
                })?;
            if (stored.dtype, stored.ne) != (layout.dtype, layout.ne) {
                return Err(EvalError::Mismatch {
                    what: "weight",
                    name: t.name.to_string(),
                    found: describe(stored.dtype, &stored.ne),
                    expected: describe(layout.dtype, &layout.ne),
                });
            }
            Ok(stored.data.to_vec())
        }
        Weights::Random { seed } => Ok(random_leaf(t.name, &layout, *seed, None)),
    }
}

/// The bytes of a weight shard: its slice of the stored source, or of the
/// source's random values.
fn bind_shard(
    t: &Leaf<'_>,
    shard: &WeightShard,
    weights: &Weights<'_>,
) -> Result<Vec<u8>, EvalError> {
    let (dtype, ne) = (t.layout.dtype, t.layout.ne);
    let invalid = |why: String| EvalError::InvalidShard {
        name: t.name.to_string(),
        of: shard.of.clone(),
        why,
    };
    // Refused before the source is read, so the message says what is wrong
    // with the slice (a verified graph or checked plan never gets here).
    if let Some(why) = shard.problem(dtype, ne) {
        return Err(invalid(why));
    }
    match weights {
        Weights::File(file) => {
            let stored = file
                .tensor(&shard.of)
                .ok_or_else(|| EvalError::MissingShardSource {
                    name: t.name.to_string(),
                    of: shard.of.clone(),
                    file: file.path().display().to_string(),
                })?;
            if (stored.dtype, stored.ne) != (dtype, shard.full_ne) {
                return Err(EvalError::ShardSourceMismatch {
                    name: t.name.to_string(),
                    of: shard.of.clone(),
                    found: describe(stored.dtype, &stored.ne),
                    expected: describe(dtype, &shard.full_ne),
                });
            }
            shard
                .extract(dtype, ne, stored.data)
                .ok_or_else(|| invalid("the stored bytes are not the source's size".into()))
        }
        Weights::Random { seed } => {
            random_weight(t.name, &t.layout, Some(shard), *seed).map_err(invalid)
        }
    }
}

/// Seeded random bytes for a weight called `name` with `layout` (packed):
/// [`random_leaf`]'s, or for a shard its slice of [`random_leaf`]'s values
/// for the whole source (drawn under the source's name and extents, so the
/// shards agree with the unsplit weight byte for byte). The runtime binds
/// random weights through this too. `Err` says why a shard cannot be cut.
pub fn random_weight(
    name: &str,
    layout: &Layout,
    shard: Option<&WeightShard>,
    seed: u64,
) -> Result<Vec<u8>, String> {
    let Some(shard) = shard else {
        return Ok(random_leaf(name, layout, seed, None));
    };
    if let Some(why) = shard.problem(layout.dtype, layout.ne) {
        return Err(why);
    }
    let full = shard.source_layout(layout.dtype).ok_or_else(|| {
        format!(
            "'{}' {} is not a valid tensor",
            shard.of,
            fmt_ne(&shard.full_ne)
        )
    })?;
    let whole = random_leaf(&shard.of, &full, seed, None);
    shard
        .extract(layout.dtype, layout.ne, &whole)
        .ok_or_else(|| format!("cannot cut {} from '{}'", fmt_ne(&layout.ne), shard.of))
}

/// The bytes of a constant leaf with `layout`, from its definition.
pub fn constant_leaf(init: &ConstInit, layout: &Layout) -> Vec<u8> {
    let mut values = Dense {
        ne: layout.ne,
        data: Vec::with_capacity(layout.n_elements() as usize),
    };
    for i3 in 0..layout.ne[3] {
        for i2 in 0..layout.ne[2] {
            for i1 in 0..layout.ne[1] {
                for i0 in 0..layout.ne[0] {
                    values.data.push(init.value_at(layout.ne, [i0, i1, i2, i3]));
                }
            }
        }
    }
    pack(&values, layout)
}

pub(super) fn pack(values: &Dense, layout: &Layout) -> Vec<u8> {
    let mut bytes = vec![0u8; layout.span_bytes() as usize];
    scatter(values, &mut bytes, layout);
    bytes
}

/// Checks caller-provided values against the leaf's shape.
fn from_values(t: &Leaf<'_>, values: &Dense) -> Result<Vec<u8>, EvalError> {
    if values.ne != t.layout.ne {
        return Err(EvalError::Mismatch {
            what: "input",
            name: t.name.to_string(),
            found: fmt_ne(&values.ne),
            expected: describe(t.layout.dtype, &t.layout.ne),
        });
    }
    Ok(pack(values, &t.layout))
}

/// Seeded random bytes for a leaf. The stream depends only on `seed` and the
/// tensor's name, so adding tensors to a graph does not change the others.
///
/// - vectors (one row: norm weights, biases): 1 + U(-0.1, 0.1), so norms and
///   scales stay near identity;
/// - matrices: U(-1, 1) / sqrt(ne0), so activations keep their scale layer
///   after layer;
/// - I32 tensors with an `index_bound`: uniform ids in 0..bound; other I32: 0..ne0;
/// - quantized dtypes: f32 values drawn as above, then quantized.
pub fn random_leaf(name: &str, layout: &Layout, seed: u64, index_bound: Option<i64>) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ fnv1a(name.as_bytes()));
    let mut uniform = move || (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    let n = layout.n_elements() as usize;
    let data: Vec<f64> = if layout.dtype == DType::I32 {
        let bound = index_bound.unwrap_or(layout.ne[0]).max(1) as f64;
        (0..n).map(|_| (uniform() * bound).floor()).collect()
    } else if layout.n_rows() == 1 {
        (0..n).map(|_| 1.0 + 0.2 * (uniform() - 0.5)).collect()
    } else {
        let a = 1.0 / (layout.ne[0] as f64).sqrt();
        (0..n).map(|_| a * (2.0 * uniform() - 1.0)).collect()
    };
    if layout.dtype.is_quantized() {
        // Quantize row by row straight from f32, as a converter would.
        let row: usize = layout.ne[0] as usize;
        let row_bytes = layout.row_bytes() as usize;
        let mut out = vec![0u8; layout.span_bytes() as usize];
        for (r, chunk) in data.chunks(row).enumerate() {
            let f: Vec<f32> = chunk.iter().map(|&v| v as f32).collect();
            quantize_row(
                layout.dtype,
                &f,
                &mut out[r * row_bytes..(r + 1) * row_bytes],
            );
        }
        return out;
    }
    pack(
        &Dense {
            ne: layout.ne,
            data,
        },
        layout,
    )
}

/// 64-bit FNV-1a: a stable hash (std's hasher may change between releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
