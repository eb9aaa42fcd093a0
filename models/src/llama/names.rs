//! Weight names of llama-family models.
//!
//! Two schemes: [`LlamaNames::Gguf`], the names llama.cpp's GGUF files use
//! (`blk.{i}.attn_q.weight`, ...), and [`LlamaNames::Example`], the names of
//! ggml's 2-layer reference graph (`l{i}.wq`, ...).
//!
//! Invariant: no weight name equals a node name of the llama builder. ggml's
//! reference graph names four weights per layer exactly like the nodes that
//! use them (`l{i}.attn_norm`, `l{i}.ffn_norm`, `l{i}.ffn_gate`, `l{i}.ffn_up`);
//! `ir` needs unique names, so the example scheme calls those weights
//! `l{i}.attn_norm.weight` and so on (see [`LlamaNames::Example`]).

/// A per-layer weight of a llama block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockWeight {
    /// RMS-norm weight before attention, `[n_embd]`.
    AttnNorm,
    /// Query projection, `[n_embd, n_head * head_dim]`.
    Wq,
    /// Key projection, `[n_embd, n_head_kv * head_dim]`.
    Wk,
    /// Value projection, `[n_embd, n_head_kv * head_dim]`.
    Wv,
    /// Attention output projection, `[n_head * head_dim, n_embd]`.
    Wo,
    /// RMS-norm weight before the FFN, `[n_embd]`.
    FfnNorm,
    /// FFN gate projection, `[n_embd, n_ff]`.
    FfnGate,
    /// FFN up projection, `[n_embd, n_ff]`.
    FfnUp,
    /// FFN down projection, `[n_ff, n_embd]`.
    FfnDown,
}

impl BlockWeight {
    /// Every block weight, in the order the builder declares them.
    pub const ALL: [BlockWeight; 9] = [
        BlockWeight::AttnNorm,
        BlockWeight::Wq,
        BlockWeight::Wk,
        BlockWeight::Wv,
        BlockWeight::Wo,
        BlockWeight::FfnNorm,
        BlockWeight::FfnGate,
        BlockWeight::FfnUp,
        BlockWeight::FfnDown,
    ];
}

/// A per-layer weight of a mixture-of-experts FFN (Qwen 3 MoE), which takes
/// the place of [`BlockWeight::FfnGate`], `FfnUp` and `FfnDown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MoeWeight {
    /// The router, `[n_embd, n_expert]`: one logit per expert.
    Router,
    /// Every expert's gate projection, stacked: `[n_embd, n_ff_exp, n_expert]`.
    GateExps,
    /// Every expert's up projection, stacked: `[n_embd, n_ff_exp, n_expert]`.
    UpExps,
    /// Every expert's down projection, stacked: `[n_ff_exp, n_embd, n_expert]`.
    DownExps,
}

impl MoeWeight {
    /// Every MoE weight, in the order the builder declares them.
    pub const ALL: [MoeWeight; 4] = [
        MoeWeight::Router,
        MoeWeight::GateExps,
        MoeWeight::UpExps,
        MoeWeight::DownExps,
    ];
}

/// How the llama builder names its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LlamaNames {
    /// llama.cpp GGUF names: `token_embd.weight`, `blk.{i}.attn_norm.weight`,
    /// `blk.{i}.attn_q.weight`, ..., `output_norm.weight`, `output.weight`.
    Gguf,
    /// The names of ggml's reference graph `llama2l-graph.json`: `tok_embd`,
    /// `l{i}.wq`, `l{i}.wk`, `l{i}.wv`, `l{i}.wo`, `l{i}.ffn_down`,
    /// `output_norm`, `output`; the four that ggml shares with a node take a
    /// `.weight` suffix: `l{i}.attn_norm.weight`, `l{i}.ffn_norm.weight`,
    /// `l{i}.ffn_gate.weight`, `l{i}.ffn_up.weight`.
    Example,
}

impl LlamaNames {
    /// The token embedding table.
    pub fn token_embd(self) -> String {
        match self {
            LlamaNames::Gguf => "token_embd.weight".into(),
            LlamaNames::Example => "tok_embd".into(),
        }
    }

    /// Rope's frequency factors (Llama 3.x): `rope_freqs.weight` (GGUF) or
    /// `rope_freqs` (example).
    pub fn rope_factors(self) -> String {
        match self {
            LlamaNames::Gguf => "rope_freqs.weight".into(),
            LlamaNames::Example => "rope_freqs".into(),
        }
    }

    /// The block weight `w` of layer `il`.
    pub fn block(self, il: usize, w: BlockWeight) -> String {
        match self {
            LlamaNames::Gguf => {
                let stem = match w {
                    BlockWeight::AttnNorm => "attn_norm",
                    BlockWeight::Wq => "attn_q",
                    BlockWeight::Wk => "attn_k",
                    BlockWeight::Wv => "attn_v",
                    BlockWeight::Wo => "attn_output",
                    BlockWeight::FfnNorm => "ffn_norm",
                    BlockWeight::FfnGate => "ffn_gate",
                    BlockWeight::FfnUp => "ffn_up",
                    BlockWeight::FfnDown => "ffn_down",
                };
                format!("blk.{il}.{stem}.weight")
            }
            LlamaNames::Example => {
                let stem = match w {
                    BlockWeight::AttnNorm => "attn_norm.weight",
                    BlockWeight::Wq => "wq",
                    BlockWeight::Wk => "wk",
                    BlockWeight::Wv => "wv",
                    BlockWeight::Wo => "wo",
                    BlockWeight::FfnNorm => "ffn_norm.weight",
                    BlockWeight::FfnGate => "ffn_gate.weight",
                    BlockWeight::FfnUp => "ffn_up.weight",
                    BlockWeight::FfnDown => "ffn_down",
                };
                format!("l{il}.{stem}")
            }
        }
    }

    /// The MoE weight `w` of layer `il`: `blk.{il}.ffn_gate_inp.weight`,
    /// `blk.{il}.ffn_{gate,up,down}_exps.weight` (GGUF) or `l{il}.ffn_gate_inp`,
    /// `l{il}.ffn_{gate,up,down}_exps` (example).
    pub fn moe(self, il: usize, w: MoeWeight) -> String {
        let stem = match w {
            MoeWeight::Router => "ffn_gate_inp",
            MoeWeight::GateExps => "ffn_gate_exps",
            MoeWeight::UpExps => "ffn_up_exps",
            MoeWeight::DownExps => "ffn_down_exps",
        };
        match self {
            LlamaNames::Gguf => format!("blk.{il}.{stem}.weight"),
            LlamaNames::Example => format!("l{il}.{stem}"),
        }
    }

    /// The RMS-norm weight of each query (`k: false`) or key head of layer
    /// `il` (Qwen 3): `blk.{il}.attn_q_norm.weight` (GGUF) or `l{il}.q_norm`.
    pub fn head_norm(self, il: usize, k: bool) -> String {
        let which = if k { 'k' } else { 'q' };
        match self {
            LlamaNames::Gguf => format!("blk.{il}.attn_{which}_norm.weight"),
            LlamaNames::Example => format!("l{il}.{which}_norm"),
        }
    }

    /// Gemma 3's RMS-norm weight of attention's output (`ffn: false`) or of
    /// the FFN's output of layer `il`: `blk.{il}.post_attention_norm.weight` /
    /// `blk.{il}.post_ffw_norm.weight` (GGUF), `l{il}.attn_post_norm` /
    /// `l{il}.ffn_post_norm.weight` (example).
    pub fn post_norm(self, il: usize, ffn: bool) -> String {
        match (self, ffn) {
            (LlamaNames::Gguf, false) => format!("blk.{il}.post_attention_norm.weight"),
            (LlamaNames::Gguf, true) => format!("blk.{il}.post_ffw_norm.weight"),
            (LlamaNames::Example, false) => format!("l{il}.attn_post_norm.weight"),
            (LlamaNames::Example, true) => format!("l{il}.ffn_post_norm.weight"),
        }
    }

    /// The bias of projection `w` (one of [`BlockWeight::Wq`], `Wk`, `Wv`) of
    /// layer `il`: `blk.{il}.attn_q.bias` (GGUF) or `l{il}.bq` (example).
    /// Other weights have no bias; their name gets a `.bias` suffix so that
    /// it can never alias a weight.
    pub fn bias(self, il: usize, w: BlockWeight) -> String {
        match (self, w) {
            (LlamaNames::Gguf, _) => self.block(il, w).replace(".weight", ".bias"),
            (LlamaNames::Example, BlockWeight::Wq) => format!("l{il}.bq"),
            (LlamaNames::Example, BlockWeight::Wk) => format!("l{il}.bk"),
            (LlamaNames::Example, BlockWeight::Wv) => format!("l{il}.bv"),
            (LlamaNames::Example, _) => format!("{}.bias", self.block(il, w)),
        }
    }

    /// The final RMS-norm weight.
    pub fn output_norm(self) -> String {
        match self {
            LlamaNames::Gguf => "output_norm.weight".into(),
            LlamaNames::Example => "output_norm".into(),
        }
    }

    /// The output (logits) projection, when not tied to the token embedding.
    pub fn output(self) -> String {
        match self {
            LlamaNames::Gguf => "output.weight".into(),
            LlamaNames::Example => "output".into(),
        }
    }
}
