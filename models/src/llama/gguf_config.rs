//! [`LlamaConfig::from_gguf`]: a llama config from a GGUF file's metadata and
//! tensor infos, as llama.cpp's `llm_load_hparams` reads them.
//!
//! Invariants:
//! - hyperparameters come from `{arch}.*` metadata keys; dtypes and the vocabulary
//!   size come from the tensor infos, so the config always binds to the file's
//!   tensors (every block matrix must share one dtype, since the builder takes one);
//! - a missing or ill-typed key is an error naming the key and the file; nothing
//!   is guessed except the defaults llama.cpp itself uses (rope base 10000, rope
//!   over the whole head, head width `n_embd / n_head`).

use super::{LlamaConfig, LlamaNames};
use crate::Error;
use crate::llama::BlockWeight;
use ir::files::TensorSource;
use ir::files::gguf::{GgufFile, GgufTensorInfo};
use ir::{RopeMode, RopeParams};
use std::path::PathBuf;

/// The architectures [`LlamaConfig::from_gguf`] accepts.
const SUPPORTED: &str = "llama";

impl LlamaConfig {
    /// Reads the config of a llama-architecture GGUF file for a prefill of
    /// `n_tokens` tokens. Weight names are [`LlamaNames::Gguf`]; the output is
    /// tied to the token embedding when the file has no `output.weight`.
    pub fn from_gguf(file: &GgufFile, n_tokens: i64) -> Result<LlamaConfig, Error> {
        let meta = Meta {
            file,
            path: file.path().to_path_buf(),
        };
        let arch = meta.str("general.architecture")?;
        let rope_mode = match arch {
            "llama" => RopeMode::Normal,
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
            return Err(meta.unsupported(format!(
                "tensor '{}' has rows of {} values but {} is {n_embd}",
                embd.name,
                embd.ne[0],
                key("embedding_length")
            )));
        }
        let n_vocab = embd.ne[1];
        let weight_dtype = meta.tensor(&names.block(0, BlockWeight::Wq))?.dtype;
        for il in 0..n_layer as usize {
            for w in BlockWeight::ALL {
                if matches!(w, BlockWeight::AttnNorm | BlockWeight::FfnNorm) {
                    continue;
                }
                let t = meta.tensor(&names.block(il, w))?;
                if t.dtype != weight_dtype {
                    return Err(meta.unsupported(format!(
                        "tensor '{}' is {} but '{}' is {weight_dtype}; \
                         block matrices of mixed dtypes are not supported",
                        t.name,
                        t.dtype,
                        names.block(0, BlockWeight::Wq)
                    )));
                }
            }
        }
        let output = file.tensor_info(&names.output());
        let tied_output = output.is_none();
        let output_dtype = output.map_or(embd.dtype, |t| t.dtype);

        Ok(LlamaConfig {
            n_layer: n_layer as usize,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_vocab,
            n_tokens,
            rms_eps,
            rope: RopeParams::plain(rope_mode, n_rot as u32, freq_base),
            weight_dtype,
            embd_dtype: embd.dtype,
            output_dtype,
            tied_output,
            names,
        })
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

    fn tensor(&self, name: &str) -> Result<&'a GgufTensorInfo, Error> {
        self.file
            .tensor_info(name)
            .ok_or_else(|| Error::MissingTensor {
                file: self.path.clone(),
                tensor: name.to_owned(),
            })
    }
}
