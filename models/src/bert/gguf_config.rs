//! [`BertConfig::from_gguf`]: a BERT config from a GGUF file laid out as
//! llama.cpp's converter (`convert_hf_to_gguf.py`, class `BertModel`)
//! writes it.
//!
//! Keys read (all under the architecture `bert`): `bert.block_count`,
//! `bert.context_length` (rows of the position table),
//! `bert.embedding_length`, `bert.feed_forward_length`,
//! `bert.attention.head_count`, `bert.attention.layer_norm_epsilon`,
//! `bert.attention.causal` (optional; must not be true) and
//! `bert.pooling_type` (1 = mean, 2 = `[CLS]`; the converter writes it from
//! a sentence-transformers pooling module).
//!
//! Invariants:
//! - `general.architecture` must be `bert`; anything else is refused,
//!   naming the architecture;
//! - the vocabulary size, the number of token types and the dtypes come
//!   from the tensor infos (`token_embd.weight`, `token_types.weight`,
//!   `blk.0.attn_q.weight`), and every weight the graph declares is checked
//!   against the file (name, dtype, shape), so a returned config always
//!   binds: the layer matrices share one dtype, the token table may have its
//!   own (F16 conversions keep the position and token-type tables F32),
//!   norms and biases are F32;
//! - a missing or ill-typed key is an error naming the key and the file;
//!   nothing is guessed. The one choice not in the file is the L2
//!   normalisation: GGUF records no sentence-transformers `Normalize`
//!   module, so it is on, as llama.cpp's embedding tool does by default.

use super::{BertConfig, BertNames, LayerPart, Pooling};
use crate::Error;
use crate::gguf_meta::GgufMeta;
use ir::files::gguf::GgufFile;

/// The architecture [`BertConfig::from_gguf`] accepts.
const ARCH: &str = "bert";
/// llama.cpp's pooling types (`LLAMA_POOLING_TYPE_*`, gguf-py `PoolingType`).
const POOLING_NAMES: [&str; 5] = ["none", "mean", "cls", "last", "rank"];

impl BertConfig {
    /// Reads the config of a BERT GGUF file for a sequence of `n_tokens`
    /// tokens. Weight names are [`BertNames::Gguf`].
    ///
    /// Every weight of the resulting graph is checked against the file: a
    /// missing tensor is [`Error::MissingTensor`], one of another shape or
    /// dtype is [`Error::BadTensor`], both naming the file and the tensor.
    pub fn from_gguf(file: &GgufFile, n_tokens: i64) -> Result<BertConfig, Error> {
        let meta = GgufMeta::new(file);
        let arch = meta.str("general.architecture")?;
        if arch != ARCH {
            return Err(Error::UnsupportedArchitecture {
                file: meta.path().to_path_buf(),
                arch: arch.to_owned(),
                supported: ARCH,
            });
        }
        if n_tokens < 1 {
            return Err(meta.unsupported(format!(
                "a sequence needs at least one token (got n_tokens = {n_tokens})"
            )));
        }
        let key = |suffix: &str| format!("{ARCH}.{suffix}");

        let n_layer = meta.block_count(&key("block_count"))?;
        let n_embd = meta.positive(&key("embedding_length"))?;
        let n_head = meta.positive(&key("attention.head_count"))?;
        let n_ff = meta.positive(&key("feed_forward_length"))?;
        let n_ctx_train = meta.positive(&key("context_length"))?;
        let eps_key = key("attention.layer_norm_epsilon");
        let eps = meta.f32(&eps_key)?;
        if eps <= 0.0 {
            return Err(meta.bad(&eps_key, format!("is {eps}; it must be positive")));
        }
        if n_embd % n_head != 0 {
            return Err(meta.bad(
                &key("attention.head_count"),
                format!("is {n_head}, which does not divide the embedding length {n_embd}"),
            ));
        }
        if meta.opt_bool(&key("attention.causal"))? == Some(true) {
            return Err(meta.unsupported(format!(
                "{} is true: causal attention is not supported (BERT encoders attend in both \
                 directions)",
                key("attention.causal")
            )));
        }
        let pooling = read_pooling(&meta, &key("pooling_type"))?;

        let names = BertNames::Gguf;
        let embd = meta.tensor(names.word_embeddings())?;
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
        let first_matrix = names.layer_weight(0, LayerPart::Query);
        let cfg = BertConfig {
            n_layer: n_layer as usize,
            n_embd,
            n_head,
            n_ff,
            n_vocab: embd.ne[1],
            n_ctx_train,
            n_types: meta.tensor(names.token_type_embeddings())?.ne[1],
            n_tokens,
            eps,
            weight_dtype: meta.tensor(&first_matrix)?.dtype,
            embd_dtype: embd.dtype,
            pooling,
            l2_normalize: true,
            names,
        };
        meta.check_binds(
            super::build_encoder(&cfg),
            &format!(
                "norms, biases and the position and token-type tables are f32; layer matrices \
                 share the dtype of '{first_matrix}'; mixed dtypes are not supported"
            ),
        )?;
        Ok(cfg)
    }
}

/// `bert.pooling_type`: 1 (mean) or 2 (`[CLS]`); the others are named in the
/// error.
fn read_pooling(meta: &GgufMeta<'_>, key: &str) -> Result<Pooling, Error> {
    let kind = meta.opt_u64(key)?.ok_or_else(|| meta.missing(key))?;
    match kind {
        1 => Ok(Pooling::Mean),
        2 => Ok(Pooling::Cls),
        other => {
            let name = usize::try_from(other)
                .ok()
                .and_then(|i| POOLING_NAMES.get(i))
                .map_or(String::new(), |n| format!(" ({n})"));
            Err(meta.bad(
                key,
                format!("is {other}{name}; supported: 1 (mean), 2 (cls)"),
            ))
        }
    }
}
