//! A captured decode as a ggplan graph: the logical graph llama.cpp built,
//! without the scheduler's copies.
//!
//! - A scheduler input copy (`BACKEND#name#k`) is not a tensor of the graph:
//!   every reference to it is a reference to its original.
//! - Leafs: a graph input (ggml's input flag, or an original only its copies
//!   reached) is an input; `cache_*` is state (the KV cache); every other leaf
//!   is a weight named as in the GGUF file, so `--weights MODEL.gguf` binds it;
//!   a weight llama.cpp loaded twice (a tied output head on another device)
//!   is, on its repeat, a mirror (a whole-tensor shard) of the first, bound
//!   from the same stored tensor.
//!   Leafs come first, in capture order, then the nodes in capture order
//!   (sources before users).
//! - ggml's `set_rows` has sources (rows, indices, destination) (older ggml:
//!   (rows, indices), the destination known only as the result's view);
//!   ggplan's takes (destination, rows, indices): the third source, or a
//!   view of the result's view root shaped as the result.
//! - An I64 input that only indexes rows (`set_rows`, `get_rows`) becomes I32,
//!   ggplan's index type; its captured values are checked to fit.
//! - ggml reuses names across ops (`Qcur-0` for a product, its reshape and its
//!   rope): the first keeps the name, the k-th repeat is `name#k`.
//! - Every node's dtype and extents are derived by ggplan's own rules and must
//!   equal the capture's, and so must its strides: an import that would run a
//!   different computation fails naming the tensor.
//! - ggml's `flash_attn_ext` becomes the attention it computes in ggplan's
//!   ops ([`flash_attn`]), its last node under the capture's name.
//! - Ops, op variants or dtypes ggplan lacks are refused all at once, each with
//!   the number of tensors that need it, before anything is built.

use super::flash_attn;
use super::{Capture, CaptureError, CapturedTensor, FLAG_INPUT, FLAG_OUTPUT};
use ir::{DType, GluKind, Graph, GraphBuilder, Layout, Op, RopeMode, RopeParams, TensorId};
use std::collections::BTreeMap;

/// An imported graph and what the import changed on the way.
#[derive(Debug)]
pub struct Imported {
    /// The graph, verified.
    pub graph: Graph,
    /// One line per change a reader should know of (renamed repeats, narrowed inputs).
    pub notes: Vec<String>,
    /// The capture tensor each graph tensor was made from, by graph tensor
    /// index (`None` for the ops a lowering added).
    pub captured: Vec<Option<usize>>,
}

/// What one capture tensor becomes.
enum Kind {
    /// A scheduler copy: stands for this original.
    Copy(usize),
    /// A leaf with this role.
    Leaf(ir::Role, DType),
    /// A node computing this op.
    Node(Op, DType),
    /// ggml's fused attention, lowered to ggplan's ops ([`flash_attn`]).
    FlashAttn(flash_attn::FlashAttn),
    /// What ggplan lacks (the import fails before building anything).
    Missing,
}

/// Imports `capture` as a graph named `name`.
pub fn import(capture: &Capture, name: &str) -> Result<Imported, CaptureError> {
    let kinds = classify(capture)?;
    let mut notes = Vec::new();
    let narrowed: Vec<&str> = (capture.tensors.iter().zip(&kinds))
        .filter(|(t, k)| t.dtype == "i64" && matches!(k, Kind::Leaf(..)))
        .map(|(t, _)| t.name.as_str())
        .collect();
    if !narrowed.is_empty() {
        notes.push(format!(
            "I64 row indices imported as I32: {}",
            narrowed.join(", ")
        ));
    }
    let mut b = GraphBuilder::new(name);
    let mut ids: Vec<Option<TensorId>> = vec![None; capture.tensors.len()];
    let mut uses: BTreeMap<String, usize> = BTreeMap::new();
    let mut unique = |name: &str| {
        let n = uses.entry(name.to_string()).or_default();
        *n += 1;
        if *n == 1 {
            name.to_string()
        } else {
            format!("{name}#{}", *n - 1)
        }
    };
    let graph_error = |id: usize, source: ir::Error| CaptureError::Graph {
        path: capture.path.clone(),
        id,
        name: capture.tensors[id].name.clone(),
        source: Box::new(source),
    };
    // The first weight of each name, to recognise llama.cpp's duplicates.
    let mut first_weight: BTreeMap<&str, (DType, [i64; 4])> = BTreeMap::new();
    let mut mirrors = Vec::new();
    for (id, (t, kind)) in capture.tensors.iter().zip(&kinds).enumerate() {
        if let Kind::Leaf(role, dtype) = *kind {
            let built = match role {
                ir::Role::Input => b.input(unique(&t.name), dtype, t.ne),
                ir::Role::State => b.state(unique(&t.name), dtype, t.ne),
                _ if first_weight.get(t.name.as_str()) == Some(&(dtype, t.ne)) => {
                    // A weight llama.cpp duplicated for another device (a tied
                    // output head): a mirror, bound from the same stored tensor.
                    let mirror = unique(&t.name);
                    mirrors.push(mirror.clone());
                    let whole = ir::WeightShard {
                        of: t.name.clone(),
                        full_ne: t.ne,
                        axis: 1,
                        start: 0,
                    };
                    b.weight_shard(mirror, dtype, t.ne, whole)
                }
                _ => {
                    first_weight.entry(&t.name).or_insert((dtype, t.ne));
                    b.weight(unique(&t.name), dtype, t.ne)
                }
            };
            ids[id] = Some(built.map_err(|e| graph_error(id, e))?);
        }
    }
    let resolve = |ids: &[Option<TensorId>], mut id: usize| {
        while let Kind::Copy(of) = kinds[id] {
            id = of;
        }
        ids[id]
    };
    for (id, (t, kind)) in capture.tensors.iter().zip(&kinds).enumerate() {
        let (op, dtype) = match *kind {
            Kind::Node(op, dtype) => (Some(op), dtype),
            Kind::FlashAttn(_) => (None, DType::F32),
            _ => continue,
        };
        // Sources are earlier tensors (checked on reading), but a copy's
        // original may come later: a capture whose copy stands for a tensor
        // computed from that copy is refused, not followed.
        let mut srcs: Vec<TensorId> = (t.src.iter().enumerate())
            .map(|(k, &s)| {
                resolve(&ids, s).ok_or_else(|| {
                    let reason =
                        format!("source {s} is a scheduler copy of a tensor not yet computed here");
                    field(capture, id, &format!("src[{k}]"), reason)
                })
            })
            .collect::<Result<_, _>>()?;
        if op == Some(Op::SetRows) {
            // ggml's sources are (rows, indices, destination), or (rows,
            // indices) with the destination known only as the result's view;
            // ggplan's are (destination, rows, indices).
            let dst = match srcs.pop_if(|_| t.src.len() == 3) {
                Some(dst) => dst,
                None => set_rows_destination(&mut b, &ids, t, dtype, &mut unique)
                    .map_err(|e| graph_error(id, e))?,
            };
            srcs.insert(0, dst);
        }
        let declared = Layout {
            dtype,
            ne: t.ne,
            nb: t.nb,
        };
        let node = match (op, kind) {
            (Some(op), _) => b.node(unique(&t.name), op, &srcs, Some(declared)),
            (None, Kind::FlashAttn(p)) => {
                flash_attn::lower(&mut b, &mut unique, &t.name, *p, &srcs, declared)
            }
            (None, _) => unreachable!("only nodes and flash attention are built here"),
        }
        .map_err(|e| graph_error(id, e))?;
        let layout = &b.tensor(node).layout;
        if layout.nb != t.nb {
            return Err(field(
                capture,
                id,
                "nb",
                format!(
                    "ggplan derives strides {:?}, llama.cpp used {:?}",
                    layout.nb, t.nb
                ),
            ));
        }
        if t.flags & FLAG_OUTPUT != 0 {
            b.mark_output(node).map_err(|e| graph_error(id, e))?;
        }
        ids[id] = Some(node);
    }
    if !mirrors.is_empty() {
        notes.push(format!(
            "weights llama.cpp holds twice (one per device) imported as mirrors of the first: {}",
            mirrors.join(", ")
        ));
    }
    let renamed = uses.values().filter(|&&n| n > 1).count();
    if renamed > 0 {
        notes.push(format!(
            "{renamed} names llama.cpp reuses got '#k' suffixes on their repeats"
        ));
    }
    let graph = b.finish().map_err(|e| CaptureError::Field {
        path: capture.path.clone(),
        place: "the graph".into(),
        reason: e.to_string(),
    })?;
    let mut captured = vec![None; graph.len()];
    for (capture_id, id) in ids.iter().enumerate() {
        if let Some(id) = id {
            captured[id.index()].get_or_insert(capture_id);
        }
    }
    Ok(Imported {
        graph,
        notes,
        captured,
    })
}

/// The destination of a `set_rows` node `t`: its view source when the result
/// has the source's layout, else a view of the source at the result's offset
/// and layout (the view ggml wrote through, which no node of the capture
/// holds).
fn set_rows_destination(
    b: &mut GraphBuilder,
    ids: &[Option<TensorId>],
    t: &CapturedTensor,
    dtype: DType,
    unique: &mut impl FnMut(&str) -> String,
) -> Result<TensorId, ir::Error> {
    let (root, offset) = t
        .view
        .expect("set_rows results are views (checked on classify)");
    let root_id = ids[root].expect("view sources are built before their users");
    let root_layout = &b.tensor(root_id).layout;
    if offset == 0 && root_layout.ne == t.ne && root_layout.nb == t.nb {
        return Ok(root_id);
    }
    let layout = Layout {
        dtype,
        ne: t.ne,
        nb: t.nb,
    };
    let name = unique(&format!("{} (destination)", t.name));
    b.node(name, Op::View { offset }, &[root_id], Some(layout))
}

fn field(capture: &Capture, id: usize, key: &str, reason: String) -> CaptureError {
    CaptureError::Field {
        path: capture.path.clone(),
        place: format!("tensors[{id}] '{}' .{key}", capture.tensors[id].name),
        reason,
    }
}

/// What each tensor becomes, or every op and dtype ggplan lacks.
fn classify(capture: &Capture) -> Result<Vec<Kind>, CaptureError> {
    let mut missing: BTreeMap<String, usize> = BTreeMap::new();
    let mut kinds = Vec::with_capacity(capture.tensors.len());
    for (id, t) in capture.tensors.iter().enumerate() {
        let kind = if let (Some(of), false) = (t.copy_of, t.reconstructed) {
            Kind::Copy(of)
        } else if t.node {
            let op = match t.op.as_str() {
                "FLASH_ATTN_EXT" if t.dtype == "f32" => flash_attn::params(t).map(Kind::FlashAttn),
                // ggml_cast: a CPY into a new tensor of another type.
                "CPY" if t.src.get(1) == Some(&id) => Err("CPY into itself (ggml_cast)".into()),
                _ => node_op(capture, t).map(|op| Kind::Node(op, DType::F32)),
            };
            match (op, dtype(&t.dtype)) {
                (Ok(Kind::Node(op, _)), Some(dtype)) => Kind::Node(op, dtype),
                (Ok(kind), Some(_)) => kind,
                (op, dtype) => {
                    if let Err(what) = op {
                        *missing.entry(what).or_default() += 1;
                    }
                    if dtype.is_none() {
                        *missing.entry(format!("dtype {}", t.dtype)).or_default() += 1;
                    }
                    Kind::Missing
                }
            }
        } else {
            let role = if t.flags & FLAG_INPUT != 0 || t.reconstructed {
                ir::Role::Input
            } else if t.name.starts_with("cache_") {
                ir::Role::State
            } else {
                ir::Role::Weight
            };
            if t.op != "NONE" {
                *missing.entry(format!("{} as a leaf", t.op)).or_default() += 1;
            }
            match leaf_dtype(capture, id, t, role)? {
                Some(dtype) => Kind::Leaf(role, dtype),
                None => {
                    *missing.entry(format!("dtype {}", t.dtype)).or_default() += 1;
                    Kind::Missing
                }
            }
        };
        kinds.push(kind);
    }
    if missing.is_empty() {
        return Ok(kinds);
    }
    let mut missing: Vec<(String, usize)> = missing.into_iter().collect();
    missing.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Err(CaptureError::Unsupported {
        path: capture.path.clone(),
        missing,
    })
}

fn dtype(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| d.name() == name)
}

/// A leaf's dtype: its own, or I32 for an I64 input that only indexes rows.
fn leaf_dtype(
    capture: &Capture,
    id: usize,
    t: &CapturedTensor,
    role: ir::Role,
) -> Result<Option<DType>, CaptureError> {
    if t.dtype != "i64" || role != ir::Role::Input {
        return Ok(dtype(&t.dtype));
    }
    let indexes_only = capture.tensors.iter().all(|user| {
        let stands_for = |s: usize| s == id || capture.tensors[s].copy_of == Some(id);
        user.src.iter().enumerate().all(|(k, &s)| {
            !stands_for(s) || (matches!(user.op.as_str(), "SET_ROWS" | "GET_ROWS") && k == 1)
        })
    });
    if !indexes_only {
        return Ok(None);
    }
    if let Some(bytes) = &t.data {
        for (k, v) in bytes.chunks_exact(8).enumerate() {
            let v = i64::from_le_bytes(v.try_into().expect("8 bytes"));
            if i32::try_from(v).is_err() {
                return Err(field(
                    capture,
                    id,
                    "data_hex",
                    format!("row index {k} is {v}, beyond I32"),
                ));
            }
        }
    }
    Ok(Some(DType::I32))
}

/// The op of node `t`, or what ggplan lacks to express it.
fn node_op(capture: &Capture, t: &CapturedTensor) -> Result<Op, String> {
    let p = |i: usize| t.param_f32(i);
    let n_src = t.src.len();
    Ok(match t.op.as_str() {
        "GET_ROWS" => Op::GetRows,
        "ADD" => Op::Add,
        "SUB" => Op::Sub,
        "MUL" => Op::Mul,
        "DIV" => Op::Div,
        "SCALE" => Op::Scale {
            scale: p(0),
            bias: p(1),
        },
        "SQR" => Op::Sqr,
        "SQRT" => Op::Sqrt,
        "UNARY" => match t.desc.as_str() {
            "SILU" => Op::Silu,
            "GELU" => Op::Gelu,
            "GELU_ERF" => Op::GeluErf,
            "RELU" => Op::Relu,
            "TANH" => Op::Tanh,
            other => return Err(format!("UNARY {other}")),
        },
        "GLU" => {
            let kind = match t.desc.as_str() {
                "SWIGLU" => GluKind::SwiGlu,
                "GEGLU" => GluKind::GeGlu,
                "GEGLU_ERF" => GluKind::GeGluErf,
                other => return Err(format!("GLU {other}")),
            };
            Op::Glu {
                kind,
                swapped: t.op_params[1] != 0,
            }
        }
        "RMS_NORM" => Op::RmsNorm { eps: p(0) },
        "NORM" => Op::Norm { eps: p(0) },
        "MUL_MAT" => Op::MulMat,
        "SOFT_MAX" if n_src <= 2 => Op::SoftMax {
            scale: p(0),
            max_bias: p(1),
        },
        "SOFT_MAX" => return Err("SOFT_MAX with sinks".into()),
        "ROPE" => {
            let mode = match t.op_params[2] {
                0 => RopeMode::Normal,
                2 => RopeMode::Neox,
                m => return Err(format!("ROPE mode {m}")),
            };
            Op::Rope(RopeParams {
                mode,
                n_dims: t.op_params[1] as u32,
                n_ctx_orig: t.op_params[4] as u32,
                freq_base: p(5),
                freq_scale: p(6),
                ext_factor: p(7),
                attn_factor: p(8),
                beta_fast: p(9),
                beta_slow: p(10),
            })
        }
        "MUL_MAT_ID" => Op::MulMatId,
        "ARGSORT" => match t.op_params[0] {
            0 => Op::Argsort { descending: false },
            1 => Op::Argsort { descending: true },
            o => return Err(format!("ARGSORT order {o}")),
        },
        "CLAMP" => Op::Clamp {
            min: p(0),
            max: p(1),
        },
        "CPY" => Op::Cpy,
        "CONT" => Op::Cont,
        "SET_ROWS" if n_src == 3 || (n_src == 2 && t.view.is_some()) => Op::SetRows,
        "SET_ROWS" => return Err("SET_ROWS without a destination view".into()),
        "VIEW" => {
            // ggml's offset is from the root; ggplan's from the source view.
            let (_, offs) = t.view.ok_or("VIEW without a view source")?;
            let src_offs = (t.src.first())
                .and_then(|&s| capture.tensors[s].view)
                .map_or(0, |(_, o)| o);
            Op::View {
                offset: offs
                    .checked_sub(src_offs)
                    .ok_or("VIEW before its source's start")?,
            }
        }
        "RESHAPE" => Op::Reshape,
        "PERMUTE" => {
            let axes = [0, 1, 2, 3].map(|i| t.op_params[i] as u8);
            Op::Permute { axes }
        }
        "TRANSPOSE" => Op::Transpose,
        "CONCAT" => Op::Concat {
            dim: t.op_params[0] as u8,
        },
        "SUM_ROWS" => Op::SumRows,
        "MEAN" => Op::Mean,
        "ARGMAX" => Op::Argmax,
        "DIAG_MASK_INF" => Op::DiagMaskInf {
            n_past: i64::from(t.op_params[0]),
        },
        other => return Err(other.to_string()),
    })
}
