//! `GraphBuilder`: builds graphs op by op with shape inference, in the style of
//! ggml's graph-building functions, but failing with a value instead of an
//! assertion: an error names the op, the node and every operand's dtype and shape.
//!
//! Every op method takes the new node's name first; names must be unique.

use crate::dtype::DType;
use crate::error::Error;
use crate::graph::Graph;
use crate::layout::{Extents, Layout};
use crate::op::{GluKind, Op, RopeParams};
use crate::rules::{self, Operand};
use crate::tensor::{ConstInit, Role, Tensor, TensorId};
use crate::verify;
use std::collections::BTreeMap;

/// Builds a [`Graph`] one tensor at a time.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    name: String,
    tensors: Vec<Tensor>,
    by_name: BTreeMap<String, TensorId>,
}

type R = Result<TensorId, Error>;

impl GraphBuilder {
    /// An empty graph called `name`.
    pub fn new(name: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The tensor with id `id`, as built so far.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// A weight leaf, named as in the weights file.
    pub fn weight(&mut self, name: impl Into<String>, dtype: DType, ne: Extents) -> R {
        self.leaf(name.into(), Role::Weight, dtype, ne, None)
    }

    /// An input leaf the caller sets before each run.
    pub fn input(&mut self, name: impl Into<String>, dtype: DType, ne: Extents) -> R {
        self.leaf(name.into(), Role::Input, dtype, ne, None)
    }

    /// A persistent state leaf (such as a KV cache).
    pub fn state(&mut self, name: impl Into<String>, dtype: DType, ne: Extents) -> R {
        self.leaf(name.into(), Role::State, dtype, ne, None)
    }

    /// A constant leaf whose values `init` defines.
    pub fn constant(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        ne: Extents,
        init: ConstInit,
    ) -> R {
        self.leaf(name.into(), Role::Constant, dtype, ne, Some(init))
    }

    /// A weight holding one slice of the stored tensor `shard.of` (its
    /// values are bound from that tensor, cut along `shard.axis`).
    pub fn weight_shard(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        ne: Extents,
        shard: crate::shard::WeightShard,
    ) -> R {
        let id = self.leaf(name.into(), Role::Weight, dtype, ne, None)?;
        if let Some(reason) = shard.problem(dtype, ne) {
            return Err(Error::Leaf {
                name: self.tensor(id).name.clone(),
                reason,
            });
        }
        self.set_shard(id, shard);
        Ok(id)
    }

    fn leaf(
        &mut self,
        name: String,
        role: Role,
        dtype: DType,
        ne: Extents,
        init: Option<ConstInit>,
    ) -> R {
        let layout = Layout::contiguous(dtype, ne).ok_or_else(|| Error::Leaf {
            name: name.clone(),
            reason: format!(
                "extents {} are not valid for {dtype} (each >= 1, ne0 a multiple of {})",
                crate::layout::fmt_ne(&ne),
                dtype.block_elems()
            ),
        })?;
        let tensor = Tensor {
            name,
            layout,
            role,
            op: None,
            srcs: vec![],
            view: None,
            init,
            shard: None,
        };
        if let Some(reason) = verify::leaf_problem(&tensor) {
            return Err(Error::Leaf {
                name: tensor.name,
                reason,
            });
        }
        self.push(tensor)
    }

    /// Adds a node computing `op` over `srcs`. `declared` gives the shape for
    /// `view` and `reshape` and is otherwise checked against the inferred layout.
    pub fn node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        srcs: &[TensorId],
        declared: Option<Layout>,
    ) -> R {
        let name = name.into();
        let operands: Vec<Operand<'_>> = srcs
            .iter()
            .map(|&id| {
                self.tensors
                    .get(id.index())
                    .map(|t| (id, t))
                    .ok_or_else(|| Error::UnknownTensor {
                        user: name.clone(),
                        name: id.to_string(),
                    })
            })
            .collect::<Result<_, _>>()?;
        let op_error = |reason: String| Error::Op {
            op: op.name(),
            name: name.clone(),
            reason,
            operands: operands
                .iter()
                .map(|(_, t)| t.describe())
                .collect::<Vec<_>>()
                .join(", "),
        };
        let derived = rules::derive(&op, &operands, declared.as_ref()).map_err(op_error)?;
        if let Some(d) = declared
            && !op.is_view()
            && (d.dtype, d.ne) != (derived.layout.dtype, derived.layout.ne)
        {
            return Err(op_error(format!(
                "declared {} {} but the op produces {} {}",
                d.dtype,
                crate::layout::fmt_ne(&d.ne),
                derived.layout.dtype,
                crate::layout::fmt_ne(&derived.layout.ne)
            )));
        }
        if let Some(v) = derived.view
            && let Some(reason) = verify::view_bounds_problem(&self.tensors, v, &derived.layout)
        {
            return Err(op_error(reason));
        }
        let tensor = Tensor {
            name,
            layout: derived.layout,
            role: Role::Intermediate,
            op: Some(op),
            srcs: srcs.to_vec(),
            view: derived.view,
            init: None,
            shard: None,
        };
        self.push(tensor)
    }

    /// Whether a tensor of this name has been added.
    pub fn has_name(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    fn set_shard(&mut self, id: TensorId, shard: crate::shard::WeightShard) {
        self.tensors[id.index()].shard = Some(shard);
    }

    fn push(&mut self, tensor: Tensor) -> R {
        if tensor.name.is_empty() {
            return Err(Error::Leaf {
                name: String::new(),
                reason: "tensor names must not be empty".into(),
            });
        }
        if self.by_name.contains_key(&tensor.name) {
            return Err(Error::DuplicateName(tensor.name));
        }
        let id = TensorId(self.tensors.len() as u32);
        self.by_name.insert(tensor.name.clone(), id);
        self.tensors.push(tensor);
        Ok(id)
    }

    /// Marks a node as a graph output (read by the caller after a run).
    pub fn mark_output(&mut self, id: TensorId) -> Result<(), Error> {
        let t = &mut self.tensors[id.index()];
        if t.is_leaf() {
            return Err(Error::Leaf {
                name: t.name.clone(),
                reason: "a leaf cannot be an output".into(),
            });
        }
        t.role = Role::Output;
        Ok(())
    }

    /// Verifies the whole graph and returns it.
    pub fn finish(self) -> Result<Graph, Error> {
        let graph = Graph::from_tensors(self.name, self.tensors);
        let violations = verify::verify(&graph);
        if violations.is_empty() {
            Ok(graph)
        } else {
            Err(Error::Invalid {
                path: graph.name.clone(),
                violations,
            })
        }
    }

    // ---- op helpers, one per op (ggml's names) ----

    /// Rows of `table` at the I32 `indices`.
    pub fn get_rows(&mut self, name: impl Into<String>, table: TensorId, indices: TensorId) -> R {
        self.node(name, Op::GetRows, &[table, indices], None)
    }
    /// a + b (b broadcast).
    pub fn add(&mut self, name: impl Into<String>, a: TensorId, b: TensorId) -> R {
        self.node(name, Op::Add, &[a, b], None)
    }
    /// a - b (b broadcast).
    pub fn sub(&mut self, name: impl Into<String>, a: TensorId, b: TensorId) -> R {
        self.node(name, Op::Sub, &[a, b], None)
    }
    /// a * b (b broadcast).
    pub fn mul(&mut self, name: impl Into<String>, a: TensorId, b: TensorId) -> R {
        self.node(name, Op::Mul, &[a, b], None)
    }
    /// a / b (b broadcast).
    pub fn div(&mut self, name: impl Into<String>, a: TensorId, b: TensorId) -> R {
        self.node(name, Op::Div, &[a, b], None)
    }
    /// a * scale.
    pub fn scale(&mut self, name: impl Into<String>, a: TensorId, scale: f32) -> R {
        self.node(name, Op::Scale { scale, bias: 0.0 }, &[a], None)
    }
    /// Applies a one-source elementwise op (sqr, sqrt, silu, gelu, gelu_erf, relu, tanh, scale).
    pub fn unary(&mut self, name: impl Into<String>, op: Op, a: TensorId) -> R {
        self.node(name, op, &[a], None)
    }
    /// silu(a).
    pub fn silu(&mut self, name: impl Into<String>, a: TensorId) -> R {
        self.node(name, Op::Silu, &[a], None)
    }
    /// Exact (erf) gelu.
    pub fn gelu_erf(&mut self, name: impl Into<String>, a: TensorId) -> R {
        self.node(name, Op::GeluErf, &[a], None)
    }
    /// act(gate) * up with separate gate and up tensors.
    pub fn glu_split(
        &mut self,
        name: impl Into<String>,
        kind: GluKind,
        gate: TensorId,
        up: TensorId,
    ) -> R {
        self.node(
            name,
            Op::Glu {
                kind,
                swapped: false,
            },
            &[gate, up],
            None,
        )
    }
    /// act(first half) * second half of each row (or swapped).
    pub fn glu(&mut self, name: impl Into<String>, kind: GluKind, a: TensorId, swapped: bool) -> R {
        self.node(name, Op::Glu { kind, swapped }, &[a], None)
    }
    /// RMS normalisation of each row.
    pub fn rms_norm(&mut self, name: impl Into<String>, a: TensorId, eps: f32) -> R {
        self.node(name, Op::RmsNorm { eps }, &[a], None)
    }
    /// Mean/variance normalisation of each row.
    pub fn norm(&mut self, name: impl Into<String>, a: TensorId, eps: f32) -> R {
        self.node(name, Op::Norm { eps }, &[a], None)
    }
    /// ggml_mul_mat(a, b): [a.ne1, b.ne1, b.ne2, b.ne3].
    pub fn mul_mat(&mut self, name: impl Into<String>, a: TensorId, b: TensorId) -> R {
        self.node(name, Op::MulMat, &[a, b], None)
    }
    /// softmax(a * scale + mask) over rows (ggml_soft_max_ext).
    pub fn soft_max(
        &mut self,
        name: impl Into<String>,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> R {
        let srcs: Vec<TensorId> = std::iter::once(a).chain(mask).collect();
        self.node(name, Op::SoftMax { scale, max_bias }, &srcs, None)
    }
    /// Rotary embedding of `a` [head_dim, n_head, n_tokens] at positions `pos`.
    pub fn rope(
        &mut self,
        name: impl Into<String>,
        a: TensorId,
        pos: TensorId,
        params: RopeParams,
    ) -> R {
        self.node(name, Op::Rope(params), &[a, pos], None)
    }
    /// Rotary embedding whose pair `i` turns by its angle divided by
    /// `factors[i]` (F32, at least `n_dims / 2`; Llama 3's `rope_freqs`).
    pub fn rope_with_factors(
        &mut self,
        name: impl Into<String>,
        a: TensorId,
        pos: TensorId,
        factors: TensorId,
        params: RopeParams,
    ) -> R {
        self.node(name, Op::Rope(params), &[a, pos, factors], None)
    }
    /// A mixture of experts' product: `experts` `[k, n, n_expert]` picked by
    /// the I32 `ids` `[n_used, t]` for activations `b` `[k, 1 or n_used, t]`.
    pub fn mul_mat_id(
        &mut self,
        name: impl Into<String>,
        experts: TensorId,
        b: TensorId,
        ids: TensorId,
    ) -> R {
        self.node(name, Op::MulMatId, &[experts, b, ids], None)
    }
    /// The I32 indices sorting each row of `a`.
    pub fn argsort(&mut self, name: impl Into<String>, a: TensorId, descending: bool) -> R {
        self.node(name, Op::Argsort { descending }, &[a], None)
    }
    /// `a` clamped to `[min, max]`.
    pub fn clamp(&mut self, name: impl Into<String>, a: TensorId, min: f32, max: f32) -> R {
        self.node(name, Op::Clamp { min, max }, &[a], None)
    }
    /// Copies `a` into `dst`'s memory; the result is a view of `dst`.
    pub fn cpy(&mut self, name: impl Into<String>, a: TensorId, dst: TensorId) -> R {
        self.node(name, Op::Cpy, &[a, dst], None)
    }
    /// Packs `a` contiguously.
    pub fn cont(&mut self, name: impl Into<String>, a: TensorId) -> R {
        self.node(name, Op::Cont, &[a], None)
    }
    /// Packs `a` contiguously into extents `ne` (same element count; ggml_cont_4d).
    pub fn cont_shaped(&mut self, name: impl Into<String>, a: TensorId, ne: Extents) -> R {
        let dtype = self.tensor(a).dtype();
        let layout = Layout {
            dtype,
            ne,
            nb: [0; 4],
        };
        self.node(name, Op::Cont, &[a], Some(layout))
    }
    /// Writes the rows of `rows` into `dst` at `indices`; the result is a view of `dst`.
    pub fn set_rows(
        &mut self,
        name: impl Into<String>,
        dst: TensorId,
        rows: TensorId,
        indices: TensorId,
    ) -> R {
        self.node(name, Op::SetRows, &[dst, rows, indices], None)
    }
    /// A view of `a` with extents `ne`, strides nb1..nb3 and a byte offset.
    pub fn view(
        &mut self,
        name: impl Into<String>,
        a: TensorId,
        ne: Extents,
        nb123: [u64; 3],
        offset: u64,
    ) -> R {
        let dtype = self.tensor(a).dtype();
        let layout = Layout {
            dtype,
            ne,
            nb: [dtype.block_bytes(), nb123[0], nb123[1], nb123[2]],
        };
        self.node(name, Op::View { offset }, &[a], Some(layout))
    }
    /// `a` (contiguous) seen with extents `ne`.
    pub fn reshape(&mut self, name: impl Into<String>, a: TensorId, ne: Extents) -> R {
        let dtype = self.tensor(a).dtype();
        let layout = Layout {
            dtype,
            ne,
            nb: [0; 4],
        };
        self.node(name, Op::Reshape, &[a], Some(layout))
    }
    /// Source axis i becomes axis `axes[i]`.
    pub fn permute(&mut self, name: impl Into<String>, a: TensorId, axes: [u8; 4]) -> R {
        self.node(name, Op::Permute { axes }, &[a], None)
    }
    /// Swaps axes 0 and 1.
    pub fn transpose(&mut self, name: impl Into<String>, a: TensorId) -> R {
        self.node(name, Op::Transpose, &[a], None)
    }
    /// Joins `a` and `b` along `dim`.
    pub fn concat(&mut self, name: impl Into<String>, a: TensorId, b: TensorId, dim: u8) -> R {
        self.node(name, Op::Concat { dim }, &[a, b], None)
    }
    /// Sum of each row.
    pub fn sum_rows(&mut self, name: impl Into<String>, a: TensorId) -> R {
        self.node(name, Op::SumRows, &[a], None)
    }
    /// Mean of each row.
    pub fn mean(&mut self, name: impl Into<String>, a: TensorId) -> R {
        self.node(name, Op::Mean, &[a], None)
    }
    /// Index of each row's largest element.
    pub fn argmax(&mut self, name: impl Into<String>, a: TensorId) -> R {
        self.node(name, Op::Argmax, &[a], None)
    }
    /// Causal masking with -inf above the shifted diagonal.
    pub fn diag_mask_inf(&mut self, name: impl Into<String>, a: TensorId, n_past: i64) -> R {
        self.node(name, Op::DiagMaskInf { n_past }, &[a], None)
    }
}
