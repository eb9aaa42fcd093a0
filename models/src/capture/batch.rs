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
//! A model with sliding-window layers (Gemma 3) has two KV caches in
//! llama.cpp, each with its own indices and mask, imported as `NAME` and
//! `NAME#1`: a *cache set* per suffix. A set's cache (its size for the V
//! indices) is the state its key indices write into, and its layers come
//! from that state's name (`cache_k_l{layer}`); the caller says which layers
//! attend over a window ([`BatchInputs::of`]'s `window_of`), and a set's
//! mask then also hides keys `window` or more positions back (llama.cpp's
//! standard sliding window). A set whose layers disagree is refused.
//!
//! Any other input and ALiBi (`soft_max` with a `max_bias`, whose mask holds
//! distances) are refused by name: the values would be wrong in silence.
//!
//! Invariants: a token at position `p` is stored in row `p` of every cache
//! (one fresh sequence, as llama.cpp places the first tokens of a new
//! context); [`BatchInputs::values`] refuses a batch that would reach past
//! the rows any set's mask covers; the bytes it returns are exactly the
//! input's packed extent in its dtype.

use ir::{DType, Graph, Op, Role};

/// One recognised input and what it holds.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Tokens,
    Positions,
    /// Cache rows of the keys (one per token).
    KeyRows,
    /// `channels` values per token: element indices into the transposed V
    /// cache of cache set `set` when above 1, else rows.
    ValueRows {
        channels: usize,
        set: usize,
    },
    /// `rows` mask rows (at least the batch's tokens) of cache set `set`, in
    /// `dtype`.
    Mask {
        rows: usize,
        dtype: DType,
        set: usize,
    },
    /// The last row's logits only, or every row's.
    OutputRows {
        last_only: bool,
    },
}

/// One KV cache's inputs (see the module doc).
#[derive(Clone, Copy, Debug, Default)]
struct CacheSet {
    /// Rows of its cache.
    kv_size: usize,
    /// Rows its mask covers.
    n_kv: usize,
    /// Keys its layers see, counting back from the query's position.
    window: Option<usize>,
}

/// The per-batch inputs of one imported graph (see the module doc).
#[derive(Clone, Debug)]
pub struct BatchInputs {
    n_tokens: usize,
    sets: Vec<CacheSet>,
    inputs: Vec<(String, Kind)>,
}

/// `NAME#k` as (`NAME`, k); `NAME` as (`NAME`, 0).
fn cache_set_of(name: &str) -> Result<(&str, usize), String> {
    match name.split_once('#') {
        None => Ok((name, 0)),
        Some((base, k)) => k
            .parse()
            .map(|k| (base, k))
            .map_err(|_| format!("input '{name}': '#{k}' is not a repeat number")),
    }
}

/// The layer of a cache state named `cache_k_l{layer}` or `cache_v_l{layer}`.
fn layer_of(state: &str) -> Option<usize> {
    let rest = (state.strip_prefix("cache_k_l")).or_else(|| state.strip_prefix("cache_v_l"))?;
    rest.parse().ok()
}

/// Every cache set's size and window, from the `set_rows` writes of its key
/// and value indices into the cache states.
fn cache_sets(
    graph: &Graph,
    window_of: &dyn Fn(usize) -> Option<usize>,
) -> Result<Vec<CacheSet>, String> {
    let mut sets: Vec<Option<(CacheSet, usize)>> = Vec::new();
    for t in graph.tensors() {
        if t.op != Some(Op::SetRows) {
            continue;
        }
        let index = graph.tensor(t.srcs[2]);
        if index.role != Role::Input {
            continue;
        }
        let (_, set) = cache_set_of(&index.name)?;
        let cache = graph.tensor(graph.storage_of(t.srcs[0]).root);
        let layer = (layer_of(&cache.name)).ok_or_else(|| {
            format!(
                "'{}' writes into '{}', not a cache_k_l<layer> / cache_v_l<layer> state",
                t.name, cache.name
            )
        })?;
        let this = CacheSet {
            kv_size: cache.layout.ne[1] as usize,
            n_kv: 0,
            window: window_of(layer),
        };
        if sets.len() <= set {
            sets.resize(set + 1, None);
        }
        match sets[set] {
            None => sets[set] = Some((this, layer)),
            Some((first, first_layer))
                if first.kv_size != this.kv_size || first.window != this.window =>
            {
                return Err(format!(
                    "layers {first_layer} and {layer} share the cache indices '{}' but differ in cache rows ({} / {}) or window ({:?} / {:?})",
                    index.name, first.kv_size, this.kv_size, first.window, this.window
                ));
            }
            Some(_) => {}
        }
    }
    sets.into_iter()
        .enumerate()
        .map(|(k, s)| {
            s.map(|(set, _)| set).ok_or(format!(
                "no cache is written through the cache indices of set #{k}"
            ))
        })
        .collect()
}

impl BatchInputs {
    /// Recognises `graph`'s inputs; `window_of(layer)` is the window of a
    /// sliding-window layer (`None`: it sees every earlier key). An error
    /// names the input (or op) it cannot set and why.
    pub fn of(
        graph: &Graph,
        window_of: &dyn Fn(usize) -> Option<usize>,
    ) -> Result<BatchInputs, String> {
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
        let mut sets = cache_sets(graph, window_of)?;
        if sets.is_empty() {
            return Err("the graph writes no KV cache (no set_rows through cache indices)".into());
        }
        let tokens = graph
            .find("inp_tokens")
            .map(|id| graph.tensor(id))
            .ok_or("the graph has no 'inp_tokens' input")?;
        let n_tokens = tokens.layout.ne[0] as usize;
        let mut inputs = Vec::new();
        for t in graph.tensors().iter().filter(|t| t.role == Role::Input) {
            let ne = t.layout.ne;
            let len = ne.iter().product::<i64>() as usize;
            let want_i32 = |what: &str| -> Result<(), String> {
                match t.layout.dtype {
                    DType::I32 => Ok(()),
                    other => Err(format!("input '{}' ({what}) is {other:?}, not I32", t.name)),
                }
            };
            let (base, set) = cache_set_of(&t.name)?;
            let in_set = |set: usize| -> Result<(), String> {
                match sets.get(set) {
                    Some(_) => Ok(()),
                    None => Err(format!(
                        "input '{}' belongs to no cache the graph writes",
                        t.name
                    )),
                }
            };
            let kind = match base {
                "inp_tokens" if set == 0 => {
                    want_i32("token ids")?;
                    Kind::Tokens
                }
                "inp_pos" if set == 0 && len == n_tokens => {
                    want_i32("positions")?;
                    Kind::Positions
                }
                "inp_pos" if set == 0 => {
                    return Err(format!(
                        "input 'inp_pos' has {len} positions for {n_tokens} tokens (M-RoPE's several per token are not supported)"
                    ));
                }
                "attn_inp_k_idxs" if len == n_tokens => {
                    want_i32("key cache rows")?;
                    in_set(set)?;
                    Kind::KeyRows
                }
                "attn_inp_v_idxs" if len.is_multiple_of(n_tokens) => {
                    want_i32("value cache indices")?;
                    in_set(set)?;
                    Kind::ValueRows {
                        channels: len / n_tokens,
                        set,
                    }
                }
                "attn_inp_kq_mask" if ne[1] as usize >= n_tokens && ne[2] == 1 && ne[3] == 1 => {
                    if !matches!(t.layout.dtype, DType::F32 | DType::F16) {
                        return Err(format!(
                            "input '{}' (attention mask) is {:?}, not F32 or F16",
                            t.name, t.layout.dtype
                        ));
                    }
                    in_set(set)?;
                    let n_kv = ne[0] as usize;
                    if n_kv > sets[set].kv_size {
                        return Err(format!(
                            "input '{}' covers {n_kv} cache rows, more than its cache's {}",
                            t.name, sets[set].kv_size
                        ));
                    }
                    sets[set].n_kv = n_kv;
                    Kind::Mask {
                        rows: ne[1] as usize,
                        dtype: t.layout.dtype,
                        set,
                    }
                }
                "out_ids" if set == 0 && (len == n_tokens || len == 1) => {
                    want_i32("output rows")?;
                    Kind::OutputRows {
                        last_only: len == 1 && n_tokens > 1,
                    }
                }
                _ => {
                    return Err(format!(
                        "input '{}' ({:?} {:?}) is not one generation from an imported graph knows how to set (inp_tokens, inp_pos, attn_inp_k_idxs, attn_inp_v_idxs, attn_inp_kq_mask, out_ids)",
                        t.name,
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
        if let Some(k) = sets.iter().position(|s| s.n_kv == 0) {
            let name = if k == 0 {
                String::new()
            } else {
                format!("#{k}")
            };
            return Err(format!("the graph has no 'attn_inp_kq_mask{name}' input"));
        }
        Ok(BatchInputs {
            n_tokens,
            sets,
            inputs,
        })
    }

    /// Tokens per batch.
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// Cache rows every mask covers: the positions a generation with the
    /// graph can reach.
    pub fn n_kv(&self) -> usize {
        self.sets.iter().map(|s| s.n_kv).min().unwrap_or(0)
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
        if end > self.n_kv() {
            return Err(format!(
                "positions up to {} do not fit the {} cache rows the graph attends over (capture it with a larger --ctx)",
                end - 1,
                self.n_kv()
            ));
        }
        let positions = n_past..end;
        let i32s = |v: &mut dyn Iterator<Item = usize>| -> Vec<u8> {
            v.flat_map(|x| (x as i32).to_le_bytes()).collect()
        };
        let mut out = Vec::with_capacity(self.inputs.len());
        for (name, kind) in &self.inputs {
            let bytes = match *kind {
                Kind::Tokens => i32s(&mut ids.iter().map(|&i| i as usize)),
                Kind::Positions | Kind::KeyRows => i32s(&mut positions.clone()),
                Kind::ValueRows { channels: 1, .. } => i32s(&mut positions.clone()),
                Kind::ValueRows { channels, set } => {
                    let kv_size = self.sets[set].kv_size;
                    i32s(
                        &mut positions
                            .clone()
                            .flat_map(|p| (0..channels).map(move |j| j * kv_size + p)),
                    )
                }
                Kind::Mask { rows, dtype, set } => {
                    let CacheSet { n_kv, window, .. } = self.sets[set];
                    // Row r (token r of the batch, at position q; padding
                    // rows see nothing) sees the key in row c when c <= q,
                    // and within the window when there is one.
                    let visible = |r: usize, c: usize| {
                        let q = n_past + r;
                        r < self.n_tokens && c <= q && window.is_none_or(|w| q - c < w)
                    };
                    let cells = (0..rows).flat_map(|r| {
                        (0..n_kv).map(move |c| {
                            if visible(r, c) {
                                0.0
                            } else {
                                f32::NEG_INFINITY
                            }
                        })
                    });
                    match dtype {
                        DType::F16 => cells
                            .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
                            .collect(),
                        _ => cells.flat_map(f32::to_le_bytes).collect(),
                    }
                }
                Kind::OutputRows { last_only: true } => {
                    i32s(&mut std::iter::once(self.n_tokens - 1))
                }
                Kind::OutputRows { last_only: false } => i32s(&mut (0..self.n_tokens)),
            };
            out.push((name.clone(), bytes));
        }
        Ok(out)
    }
}
