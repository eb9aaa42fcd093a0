//! [`LlamaConfig::from_gguf`]: a llama config from a GGUF file's metadata and
//! tensor infos, as llama.cpp's `llm_load_hparams` reads them.
//!
//! Invariants:
//! - architectures: llama and mistral (llama's graph), qwen2 (NeoX rope, q/k/v
//!   biases); anything else is refused, naming the architecture;
//! - hyperparameters come from `{arch}.*` metadata keys; dtypes, the vocabulary
//!   size, tied output and biases come from the tensor infos, and every weight
//!   the graph declares is checked against the file (name, dtype, shape), so a
//!   returned config always binds (every block matrix must share one dtype,
//!   since the builder takes one);
//! - a missing or ill-typed key is an error naming the key and the file; nothing
//!   is guessed except the defaults llama.cpp itself uses (rope base 10000, rope
//!   over the whole head, head width `n_embd / n_head`).

use super::{LlamaConfig, LlamaNames};
use crate::Error;
use crate::llama::BlockWeight;
use ir::files::TensorSource;
use ir::files::gguf::{GgufFile, GgufTensorInfo};
use ir::layout::fmt_ne;
use ir::{Role, RopeMode, RopeParams};
use std::path::PathBuf;

/// The architectures [`LlamaConfig::from_gguf`] accepts.
const SUPPORTED: &str = "llama, mistral, qwen2";

impl LlamaConfig {
    /// Reads the config of a llama, mistral or qwen2 GGUF file for batches of
    /// `n_tokens` tokens. Weight names are [`LlamaNames::Gguf`]; the output is
    /// tied to the token embedding when the file has no `output.weight`; q/k/v
    /// biases are used when the file has `blk.0.attn_q.bias`.
    ///
    /// Every weight of the resulting graph is checked against the file: a
    /// missing tensor is [`Error::MissingTensor`], one of another shape or
    /// dtype is [`Error::BadTensor`], both naming the file and the tensor.
    pub fn from_gguf(file: &GgufFile, n_tokens: i64) -> Result<LlamaConfig, Error> {
        let meta = Meta {
            file,
            path: file.path().to_path_buf(),
        };
        let arch = meta.str("general.architecture")?;
        // All three name their tensors as llama does; qwen2 rotates halves
        // (NeoX) and adds q/k/v biases, which are read from the tensors.
        let rope_mode = match arch {
            "llama" | "mistral" => RopeMode::Normal,
            "qwen2" => RopeMode::Neox,
            other => {
                return Err(Error::UnsupportedArchitecture {
                    file: meta.path.clone(),
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

        let n_layer = meta.positive(&key("block_count"))?;
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
        let output = file.tensor_info(&names.output());
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
            weight_dtype: meta.tensor(&names.block(0, BlockWeight::Wq))?.dtype,
            embd_dtype: embd.dtype,
            output_dtype: output.map_or(embd.dtype, |t| t.dtype),
            tied_output: output.is_none(),
            qkv_bias: file.tensor_info(&names.bias(0, BlockWeight::Wq)).is_some(),
            names,
        };
        meta.check_binds(&cfg)?;
        Ok(cfg)
    }
}

/// Typed metadata lookups whose errors name the key and the file.
struct Meta<'a> {
    file: &'a GgufFile,
    path: PathBuf,
}

impl<'a> Meta<'a> {
    fn missing(&self, key: &str) -> Error {
        Error::MissingKey {
            file: self.path.clone(),
            key: key.to_owned(),
        }
    }

    fn bad(&self, key: &str, reason: String) -> Error {
        Error::BadValue {
            file: self.path.clone(),
            key: key.to_owned(),
            reason,
        }
    }

    fn unsupported(&self, reason: String) -> Error {
        Error::Unsupported {
            file: self.path.clone(),
            reason,
        }
    }

    fn wrong_type(&self, key: &str, expected: &str) -> Error {
        let found = self.file.get(key).map_or("absent", |v| v.type_name());
        self.bad(key, format!("should be {expected} but is a {found}"))
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, Error> {
        match self.file.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, "a string")),
        }
    }

    fn str(&self, key: &str) -> Result<&'a str, Error> {
        self.opt_str(key)?.ok_or_else(|| self.missing(key))
    }

    /// An integer that is at least 1, as `i64`.
    fn opt_positive(&self, key: &str) -> Result<Option<i64>, Error> {
        let Some(v) = self.file.get(key) else {
            return Ok(None);
        };
        let n = v
            .as_i64()
            .ok_or_else(|| self.wrong_type(key, "an integer"))?;
        if !(1..=i64::from(u32::MAX)).contains(&n) {
            return Err(self.bad(key, format!("is {n}, outside 1..={}", u32::MAX)));
        }
        Ok(Some(n))
    }

    fn positive(&self, key: &str) -> Result<i64, Error> {
        self.opt_positive(key)?.ok_or_else(|| self.missing(key))
    }

    /// A finite float.
    fn opt_f32(&self, key: &str) -> Result<Option<f32>, Error> {
        let Some(v) = self.file.get(key) else {
            return Ok(None);
        };
        let x = v.as_f64().ok_or_else(|| self.wrong_type(key, "a number"))? as f32;
        if !x.is_finite() {
            return Err(self.bad(key, format!("is {x}, not a finite f32")));
        }
        Ok(Some(x))
    }

    fn f32(&self, key: &str) -> Result<f32, Error> {
        self.opt_f32(key)?.ok_or_else(|| self.missing(key))
    }

    fn bad_tensor(&self, tensor: &str, reason: String) -> Error {
        Error::BadTensor {
            file: self.path.clone(),
            tensor: tensor.to_owned(),
            reason,
        }
    }

    /// Every weight of `cfg`'s graph is in the file with the dtype and shape
    /// the graph declares (the prefill and cached graphs declare the same).
    fn check_binds(&self, cfg: &LlamaConfig) -> Result<(), Error> {
        let graph = super::build_prefill(cfg)
            .map_err(|e| self.unsupported(format!("the model does not form a graph: {e}")))?;
        for id in graph.with_role(Role::Weight) {
            let want = graph.tensor(id);
            let have = self.tensor(&want.name)?;
            if (have.dtype, have.ne) != (want.dtype(), want.ne()) {
                let hint = if have.ne == want.ne() && have.dtype != want.dtype() {
                    let first = cfg.names.block(0, BlockWeight::Wq);
                    format!(
                        " (norms and biases are f32; block matrices share the dtype of '{first}',                          mixed dtypes are not supported)"
                    )
                } else {
                    String::new()
                };
                return Err(self.bad_tensor(
                    &want.name,
                    format!(
                        "is {} {} but the model needs {} {}{hint}",
                        have.dtype,
                        fmt_ne(&have.ne),
                        want.dtype(),
                        fmt_ne(&want.ne())
                    ),
                ));
            }
        }
        Ok(())
    }

    fn tensor(&self, name: &str) -> Result<&'a GgufTensorInfo, Error> {
        self.file
            .tensor_info(name)
            .ok_or_else(|| Error::MissingTensor {
                file: self.path.clone(),
                tensor: name.to_owned(),
            })
    }
}
