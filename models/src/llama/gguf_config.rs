//! [`LlamaConfig::from_gguf`]: a llama config from a GGUF file's metadata and
//! tensor infos, as llama.cpp's `llm_load_hparams` reads them.
//!
//! Invariants:
//! - architectures: llama and mistral (llama's graph), qwen2 (NeoX rope, q/k/v
//!   biases), qwen3 (NeoX rope, q/k head norms), qwen3moe (qwen3's attention,
//!   `moe.rs`'s experts in place of the dense FFN), llama with a nonzero
//!   `llama.expert_count` (Mixtral: llama's attention, the same experts),
//!   olmoe (NeoX rope, whole-projection q/k norms, the experts' weights not
//!   renormalised, an untied output), gemma3 (NeoX rope, head norms,
//!   `gemma3.rs`'s additions); anything else is refused, naming the
//!   architecture;
//! - hyperparameters come from `{arch}.*` metadata keys; dtypes, the vocabulary
//!   size, tied output and biases come from the tensor infos, and every weight
//!   the graph declares is checked against the file (name, dtype, shape), so a
//!   returned config always binds (block matrices may differ in dtype, as in
//!   llama.cpp's Q4_K_M files: each takes its own, `LlamaConfig::matrix_dtypes`);
//! - Llama 3's `rope_freqs.weight`, when the file has it, divides each rope
//!   pair's angle (checked like every weight: F32 of `[n_rot / 2]`);
//! - a tensor of the file the graph does not use (an expert matrix without
//!   `expert_count`, a bias of `attn_output`), an `{arch}.*` key it does not
//!   read (`rope.scaling.factor`, a sliding window, `expert_weights_scale`,
//!   ...) and a nonzero `{arch}.expert_count` outside qwen3moe, olmoe and llama are
//!   refused by name, never ignored;
//! - a missing or ill-typed key is an error naming the key and the file; nothing
//!   is guessed except the defaults llama.cpp itself uses (rope base 10000, rope
//!   over the whole head, head width `n_embd / n_head`).

use super::moe::ExpertWidth;
use super::{LlamaConfig, LlamaNames, QkNorm};
use crate::Error;
use crate::gguf_meta::GgufMeta;
use crate::llama::{BlockWeight, MoeWeight};
use ir::files::gguf::GgufFile;
use ir::{RopeMode, RopeParams};

/// The architectures [`LlamaConfig::from_gguf`] accepts.
const SUPPORTED: &str = "llama, mistral, qwen2, qwen3, qwen3moe, olmoe, gemma3";

impl LlamaConfig {
    /// Reads the config of a llama, mistral, qwen2, qwen3, qwen3moe, olmoe or gemma3 GGUF file for
    /// batches of `n_tokens` tokens. Weight names are [`LlamaNames::Gguf`];
    /// the output is tied to the token embedding when the file has no
    /// `output.weight`; q/k/v biases are used when the file has
    /// `blk.0.attn_q.bias`, head norms when it has `blk.0.attn_q_norm.weight`,
    /// rope frequency factors when it has `rope_freqs.weight`.
    ///
    /// Every weight of the resulting graph is checked against the file: a
    /// missing tensor is [`Error::MissingTensor`], one of another shape or
    /// dtype is [`Error::BadTensor`], both naming the file and the tensor.
    pub fn from_gguf(file: &GgufFile, n_tokens: i64) -> Result<LlamaConfig, Error> {
        let meta = GgufMeta::new(file);
        let arch = meta.str("general.architecture")?;
        // All three name their tensors as llama does; qwen2 rotates halves
        // (NeoX) and adds q/k/v biases, which are read from the tensors.
        let rope_mode = match arch {
            "llama" | "mistral" => RopeMode::Normal,
            "qwen2" | "qwen3" | "qwen3moe" | "olmoe" | "gemma3" => RopeMode::Neox,
            other => {
                return Err(Error::UnsupportedArchitecture {
                    file: meta.path().to_path_buf(),
                    arch: other.to_owned(),
                    supported: SUPPORTED,
                });
            }
        };
        let key = |suffix: &str| format!("{arch}.{suffix}");
        if n_tokens < 1 {
            return Err(meta.unsupported(format!(
                "a prefill needs at least one token (got n_tokens = {n_tokens})"
            )));
        }

        let n_layer = meta.block_count(&key("block_count"))?;
        let n_embd = meta.positive(&key("embedding_length"))?;
        let n_head = meta.positive(&key("attention.head_count"))?;
        let n_head_kv = meta.positive(&key("attention.head_count_kv"))?;
        let n_ff = meta.positive(&key("feed_forward_length"))?;
        let rms_eps = meta.f32(&key("attention.layer_norm_rms_epsilon"))?;
        let freq_base = meta.opt_f32(&key("rope.freq_base"))?.unwrap_or(10000.0);

        if n_embd % n_head != 0 {
            return Err(meta.bad(
                &key("attention.head_count"),
                format!("is {n_head}, which does not divide the embedding length {n_embd}"),
            ));
        }
        let head_dim = meta
            .opt_positive(&key("attention.key_length"))?
            .unwrap_or(n_embd / n_head);
        if let Some(v) = meta.opt_positive(&key("attention.value_length"))?
            && v != head_dim
        {
            return Err(meta.unsupported(format!(
                "value heads of width {v} differ from key heads of width {head_dim}"
            )));
        }
        if n_head % n_head_kv != 0 {
            return Err(meta.bad(
                &key("attention.head_count_kv"),
                format!("is {n_head_kv}, which does not divide the head count {n_head}"),
            ));
        }
        let n_rot = meta
            .opt_positive(&key("rope.dimension_count"))?
            .unwrap_or(head_dim);
        if n_rot > head_dim {
            return Err(meta.bad(
                &key("rope.dimension_count"),
                format!("is {n_rot}, wider than a head ({head_dim})"),
            ));
        }
        if let Some(kind) = meta.opt_str(&key("rope.scaling.type"))?
            && kind != "none"
        {
            return Err(meta.unsupported(format!(
                "rope scaling '{kind}' ({}) is not supported",
                key("rope.scaling.type")
            )));
        }

        // Mixtures of experts: qwen3moe, Mixtral (a `llama` file with
        // experts, which llama.cpp routes as it does qwen3moe's) and OLMoE
        // (the same without renormalising the chosen experts' weights).
        let n_expert = meta.opt_u64(&key("expert_count"))?.unwrap_or(0);
        let routing = match arch {
            "qwen3moe" => Some((ExpertWidth::OwnKey, true)),
            "llama" if n_expert > 0 => Some((ExpertWidth::FeedForward, true)),
            "olmoe" => Some((ExpertWidth::FeedForward, false)),
            _ => None,
        };
        let moe = routing
            .map(|(w, renorm)| super::moe::read(&meta, arch, n_ff, w, renorm))
            .transpose()?;
        if n_expert > 0 && moe.is_none() {
            return Err(meta.unsupported(format!(
                "{} is {n_expert}: mixture-of-experts layers are not supported",
                key("expert_count")
            )));
        }

        // Every other `{arch}.*` key is refused by name. The training context
        // bounds nothing here (the graph's context is chosen when it is
        // built, as llama.cpp's --ctx-size is); the vocabulary size is checked
        // against the token embedding below.
        let gemma3 = (arch == "gemma3")
            .then(|| super::gemma3::read(&meta, n_layer, n_embd, n_head, head_dim))
            .transpose()?;
        let gemma3_keys: &[&str] = if gemma3.is_some() {
            &super::gemma3::KEYS
        } else {
            &[]
        };
        let moe_keys: &[&str] = if moe.is_some() {
            &super::moe::KEYS
        } else {
            &[]
        };
        meta.refuse_unknown_keys(
            arch,
            &[
                gemma3_keys,
                moe_keys,
                &[
                    "block_count",
                    "embedding_length",
                    "attention.head_count",
                    "attention.head_count_kv",
                    "feed_forward_length",
                    "attention.layer_norm_rms_epsilon",
                    "rope.freq_base",
                    "attention.key_length",
                    "attention.value_length",
                    "rope.dimension_count",
                    "rope.scaling.type",
                    "expert_count",
                    "context_length",
                    "vocab_size",
                ],
            ]
            .concat(),
        )?;

        let names = LlamaNames::Gguf;
        let embd = meta.tensor(&names.token_embd())?;
        if embd.ne[0] != n_embd {
            return Err(meta.bad_tensor(
                &embd.name,
                format!(
                    "has rows of {} values but {} is {n_embd}",
                    embd.ne[0],
                    key("embedding_length")
                ),
            ));
        }
        if let Some(n_vocab) = meta.opt_u64(&key("vocab_size"))?
            && n_vocab != embd.ne[1] as u64
        {
            return Err(meta.bad(
                &key("vocab_size"),
                format!("is {n_vocab}, but '{}' has {} rows", embd.name, embd.ne[1]),
            ));
        }
        let output = file.tensor_info(&names.output());
        if arch == "olmoe" {
            // llama.cpp requires OLMoE's output projection (never tied).
            meta.tensor(&names.output())?;
        }
        let weight_dtype = meta.tensor(&names.block(0, BlockWeight::Wq))?.dtype;
        // Matrices of another dtype than the first (a quantization mix).
        let mut matrix_dtypes = std::collections::BTreeMap::new();
        for il in 0..n_layer as usize {
            for w in BlockWeight::ALL {
                if matches!(w, BlockWeight::AttnNorm | BlockWeight::FfnNorm) {
                    continue;
                }
                let name = names.block(il, w);
                if let Some(t) = file.tensor_info(&name).filter(|t| t.dtype != weight_dtype) {
                    matrix_dtypes.insert(name, t.dtype);
                }
            }
            for w in MoeWeight::ALL.iter().filter(|_| moe.is_some()) {
                let name = names.moe(il, *w);
                if let Some(t) = file.tensor_info(&name).filter(|t| t.dtype != weight_dtype) {
                    matrix_dtypes.insert(name, t.dtype);
                }
            }
        }
        let cfg = LlamaConfig {
            n_layer: n_layer as usize,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_vocab: embd.ne[1],
            n_tokens,
            rms_eps,
            rope: RopeParams::plain(rope_mode, n_rot as u32, freq_base),
            weight_dtype,
            matrix_dtypes,
            embd_dtype: embd.dtype,
            output_dtype: output.map_or(embd.dtype, |t| t.dtype),
            tied_output: output.is_none(),
            qkv_bias: file.tensor_info(&names.bias(0, BlockWeight::Wq)).is_some(),
            rope_factors: file.tensor_info(&names.rope_factors()).is_some(),
            // OLMoE norms each token's whole query and key projections.
            qk_norm: match (arch, file.tensor_info(&names.head_norm(0, false))) {
                ("olmoe", _) => QkNorm::Whole,
                (_, Some(_)) => QkNorm::PerHead,
                (_, None) => QkNorm::None,
            },
            gemma3,
            moe,
            last_logits_only: false,
            names,
        };
        if let Some(m) = &moe {
            super::moe::check_router_rows(&meta, &cfg, m, arch)?;
        }
        let first = cfg.names.block(0, BlockWeight::Wq);
        meta.check_binds(
            super::build_prefill(&cfg),
            &format!(
                "norms and biases are f32; block matrices (and experts) take their own dtypes, \
                 '{first}''s by default"
            ),
        )?;
        Ok(cfg)
    }
}
