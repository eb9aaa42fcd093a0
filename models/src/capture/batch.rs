//! The inputs llama.cpp sets for a batch of an imported decoder graph,
//! computed for any batch: token ids at positions `n_past..`, so that an
//! imported prefill graph and an imported one-token decode graph can
//! generate over one KV cache (`ggplan generate --prefill-graph`).
//!
//! The inputs are recognised by the names llama.cpp gives them and
//! `ggplan import` keeps:
//! - `inp_tokens` (I32 `[n_tokens]`): the token ids;
//! - `inp_pos` (I32 `[n_tokens]`): their positions (a 4-per-token M-RoPE
//!   position input is refused);
//! - `attn_inp_k_idxs` (I32 `[n_tokens]`): the cache row each token's key is
//!   written to;
//! - `attn_inp_v_idxs`: the same for values, either `[n_tokens]` rows or,
//!   for llama.cpp's transposed V cache (soft_max attention),
//!   `[n_tokens * n_embd_v]` element indices: token `i`'s channel `j` goes
//!   to `j * kv_size + row(i)`, token-major;
//! - `attn_inp_kq_mask` (F32, or F16 for flash attention; `[n_kv, rows >=
//!   n_tokens]`): 0 where a token may attend to a cache row, -inf elsewhere;
//! - `out_ids` (I32): the batch rows whose logits are computed, every row or
//!   the last one.
//!
//! Any other input, a second KV cache (llama.cpp's sliding-window caches give
//! a second set of indices and mask, imported as `NAME#1`) and ALiBi
//! (`soft_max` with a `max_bias`, whose mask holds distances) are refused by
//! name: the values would be wrong in silence.
//!
//! Invariants: a token at position `p` is stored in cache row `p` (one fresh
//! sequence, as llama.cpp places the first `kv_size` tokens of a new
//! context); [`BatchInputs::values`] refuses a batch that would reach past
//! the `n_kv` rows the graph attends over; the bytes it returns are exactly
//! the input's packed extent in its dtype.

use ir::{DType, Graph, Op, Role};

/// One recognised input and what it holds.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Tokens,
    Positions,
    KeyRows,
    /// `channels` values per token: element indices into the transposed V
    /// cache when above 1, else rows.
    ValueRows {
        channels: usize,
    },
    /// `rows` mask rows (at least the batch's tokens), in `dtype`.
    Mask {
        rows: usize,
        dtype: DType,
    },
    /// The last row's logits only, or every row's.
    OutputRows {
        last_only: bool,
    },
}

/// The per-batch inputs of one imported graph (see the module doc).
#[derive(Clone, Debug)]
pub struct BatchInputs {
    n_tokens: usize,
    n_kv: usize,
    kv_size: usize,
    inputs: Vec<(String, Kind)>,
}

impl BatchInputs {
    /// Recognises `graph`'s inputs; an error names the input (or op) it
    /// cannot set and why.
    pub fn of(graph: &Graph) -> Result<BatchInputs, String> {
        if let Some(t) = graph
            .tensors()
            .iter()
            .find(|t| matches!(t.op, Some(Op::SoftMax { max_bias, .. }) if max_bias != 0.0))
        {
            return Err(format!(
                "'{}' is a soft_max with ALiBi (max_bias): its mask holds position distances, which generation from an imported graph does not compute",
                t.name
            ));
        }
        let states: Vec<_> = graph
            .tensors()
            .iter()
            .filter(|t| t.role == Role::State)
            .collect();
        let kv_size = match states.first() {
            None => return Err("the graph has no KV cache (no State tensors)".into()),
            Some(first) => first.layout.ne[1] as usize,
        };
        if let Some(t) = states.iter().find(|t| t.layout.ne[1] as usize != kv_size) {
            return Err(format!(
                "KV caches of different sizes ('{}' has {} rows, '{}' {kv_size}): llama.cpp's sliding-window cache beside the full one is not supported here; generate from the GGUF (`generate --gguf` alone) instead",
                t.name, t.layout.ne[1], states[0].name
            ));
        }
        let tokens = graph
            .find("inp_tokens")
            .map(|id| graph.tensor(id))
            .ok_or("the graph has no 'inp_tokens' input")?;
        let n_tokens = tokens.layout.ne[0] as usize;
        let mut inputs = Vec::new();
        let mut n_kv = None;
        for t in graph.tensors().iter().filter(|t| t.role == Role::Input) {
            let ne = t.layout.ne;
            let len = ne.iter().product::<i64>() as usize;
            let want_i32 = |what: &str| -> Result<(), String> {
                match t.layout.dtype {
                    DType::I32 => Ok(()),
                    other => Err(format!("input '{}' ({what}) is {other:?}, not I32", t.name)),
                }
            };
            let kind = match t.name.as_str() {
                "inp_tokens" => {
                    want_i32("token ids")?;
                    Kind::Tokens
                }
                "inp_pos" if len == n_tokens => {
                    want_i32("positions")?;
                    Kind::Positions
                }
                "inp_pos" => {
                    return Err(format!(
                        "input 'inp_pos' has {len} positions for {n_tokens} tokens (M-RoPE's several per token are not supported)"
                    ));
                }
                "attn_inp_k_idxs" if len == n_tokens => {
                    want_i32("key cache rows")?;
                    Kind::KeyRows
                }
                "attn_inp_v_idxs" if len.is_multiple_of(n_tokens) => {
                    want_i32("value cache indices")?;
                    Kind::ValueRows {
                        channels: len / n_tokens,
                    }
                }
                "attn_inp_kq_mask" if ne[1] as usize >= n_tokens && ne[2] == 1 && ne[3] == 1 => {
                    if !matches!(t.layout.dtype, DType::F32 | DType::F16) {
                        return Err(format!(
                            "input '{}' (attention mask) is {:?}, not F32 or F16",
                            t.name, t.layout.dtype
                        ));
                    }
                    n_kv = Some(ne[0] as usize);
                    Kind::Mask {
                        rows: ne[1] as usize,
                        dtype: t.layout.dtype,
                    }
                }
                "out_ids" if len == n_tokens || len == 1 => {
                    want_i32("output rows")?;
                    Kind::OutputRows {
                        last_only: len == 1 && n_tokens > 1,
                    }
                }
                name if name.contains('#') => {
                    return Err(format!(
                        "input '{name}' repeats an input of llama.cpp's (a second KV cache: sliding-window layers); generation from an imported graph supports one cache: generate from the GGUF (`generate --gguf` alone) instead"
                    ));
                }
                name => {
                    return Err(format!(
                        "input '{name}' ({:?} {:?}) is not one generation from an imported graph knows how to set (inp_tokens, inp_pos, attn_inp_k_idxs, attn_inp_v_idxs, attn_inp_kq_mask, out_ids)",
                        t.layout.dtype,
                        &ne[..]
                    ));
                }
            };
            inputs.push((t.name.clone(), kind));
        }
        for (name, needed) in [
            ("inp_pos", Kind::Positions),
            ("attn_inp_k_idxs", Kind::KeyRows),
        ] {
            if !inputs.iter().any(|(_, k)| *k == needed) {
                return Err(format!("the graph has no '{name}' input"));
            }
        }
        let n_kv = n_kv.ok_or("the graph has no 'attn_inp_kq_mask' input")?;
        if n_kv > kv_size {
            return Err(format!(
                "the mask covers {n_kv} cache rows, more than the cache's {kv_size}"
            ));
        }
        Ok(BatchInputs {
            n_tokens,
            n_kv,
            kv_size,
            inputs,
        })
    }

    /// Tokens per batch.
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// Cache rows the graph attends over: the positions a generation with it
    /// can reach.
    pub fn n_kv(&self) -> usize {
        self.n_kv
    }

    /// Whether the graph computes the last row's logits only.
    pub fn last_row_only(&self) -> bool {
        self.inputs
            .iter()
            .any(|(_, k)| *k == Kind::OutputRows { last_only: true })
    }

    /// Every input's bytes for the batch `ids` at positions `n_past..`
    /// (`ids` as long as the graph's batch), by input name.
    pub fn values(&self, ids: &[u32], n_past: usize) -> Result<Vec<(String, Vec<u8>)>, String> {
        if ids.len() != self.n_tokens {
            return Err(format!(
                "a batch of {} tokens for a graph of {}",
                ids.len(),
                self.n_tokens
            ));
        }
        let end = n_past + ids.len();
        if end > self.n_kv {
            return Err(format!(
                "positions up to {} do not fit the {} cache rows the graph attends over (capture it with a larger --ctx)",
                end - 1,
                self.n_kv
            ));
        }
        let positions = n_past..end;
        let i32s = |v: &mut dyn Iterator<Item = i64>| -> Vec<u8> {
            v.flat_map(|x| (x as i32).to_le_bytes()).collect()
        };
        let mut out = Vec::with_capacity(self.inputs.len());
        for (name, kind) in &self.inputs {
            let bytes = match *kind {
                Kind::Tokens => i32s(&mut ids.iter().map(|&i| i64::from(i))),
                Kind::Positions | Kind::KeyRows => i32s(&mut positions.clone().map(|p| p as i64)),
                Kind::ValueRows { channels: 1 } => i32s(&mut positions.clone().map(|p| p as i64)),
                Kind::ValueRows { channels } => i32s(
                    &mut positions
                        .clone()
                        .flat_map(|p| (0..channels).map(move |j| (j * self.kv_size + p) as i64)),
                ),
                Kind::Mask { rows, dtype } => {
                    // Row r (token r of the batch; padding rows see nothing)
                    // sees cache rows 0..=n_past + r.
                    let value = |r: usize, c: usize| {
                        if r < self.n_tokens && c <= n_past + r {
                            0.0f32
                        } else {
                            f32::NEG_INFINITY
                        }
                    };
                    let cells = (0..rows).flat_map(|r| (0..self.n_kv).map(move |c| value(r, c)));
                    match dtype {
                        DType::F16 => cells
                            .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
                            .collect(),
                        _ => cells.flat_map(f32::to_le_bytes).collect(),
                    }
                }
                Kind::OutputRows { last_only: true } => {
                    i32s(&mut std::iter::once(self.n_tokens as i64 - 1))
                }
                Kind::OutputRows { last_only: false } => i32s(&mut (0..self.n_tokens as i64)),
            };
            out.push((name.clone(), bytes));
        }
        Ok(out)
    }
}
