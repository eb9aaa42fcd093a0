//! A small llama configuration for tests that build llama graphs and do not
//! care about most of its fields: change the few that matter with struct
//! update syntax (`LlamaConfig { n_tokens: 5, ..tiny_llama(1) }`).

use ir::{DType, RopeMode, RopeParams};
use models::llama::{LlamaConfig, LlamaNames, Moe, QkNorm};

/// Two blocks, 64 wide, 4 query heads over 2 KV heads of 16, a 96-wide
/// feed-forward, 40 tokens of vocabulary, F32 weights, normal rope over the
/// whole head, no biases, norms, factors or experts; `n_tokens` per run.
pub fn tiny_llama(n_tokens: i64) -> LlamaConfig {
    LlamaConfig {
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        n_ff: 96,
        n_vocab: 40,
        n_tokens,
        rms_eps: 1e-6,
        rope: RopeParams::plain(RopeMode::Normal, 16, 1e4),
        weight_dtype: DType::F32,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::F32,
        tied_output: false,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: QkNorm::None,
        gemma3: None,
        moe: None,
        last_logits_only: false,
        names: LlamaNames::Gguf,
    }
}

/// [`tiny_llama`] as a Qwen 3 MoE-style mixture of experts: `n_embd` wide
/// (4 heads of `n_embd / 4`, NEOX rope base 1e6), 8 experts of `n_ff_exp`,
/// 2 per token, renormalised.
pub fn tiny_moe_llama(n_tokens: i64, n_embd: i64, n_ff_exp: i64) -> LlamaConfig {
    LlamaConfig {
        n_embd,
        head_dim: n_embd / 4,
        rope: RopeParams::plain(RopeMode::Neox, (n_embd / 4) as u32, 1e6),
        moe: Some(Moe {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp,
            renormalise: true,
        }),
        ..tiny_llama(n_tokens)
    }
}
