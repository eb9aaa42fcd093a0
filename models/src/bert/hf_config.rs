//! [`BertConfig::from_hf_dir`]: a BERT config from a Hugging Face model folder
//! (`config.json`, plus sentence-transformers' `modules.json` when present).
//!
//! Invariants:
//! - every hyperparameter comes from `config.json`; a missing field or one of the
//!   wrong type is an error naming the field and the file;
//! - only what the builder computes is accepted: `model_type` `bert` (when
//!   given), `hidden_act` `gelu` (the exact erf form), absolute positions, and,
//!   when the folder is a sentence-transformers model, mean or `[CLS]` pooling
//!   (mean when the folder has no pooling module); the L2 normalisation
//!   follows `modules.json` (on when the folder has none);
//! - weights are F32, the dtype of the Hugging Face safetensors files, with
//!   Hugging Face names ([`BertNames::HuggingFace`]).

use super::{BertConfig, BertNames, Pooling};
use crate::Error;
use ir::DType;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// sentence-transformers' module type that L2-normalises the embedding.
const NORMALIZE_MODULE: &str = "sentence_transformers.models.Normalize";
/// sentence-transformers' pooling module type.
const POOLING_MODULE: &str = "sentence_transformers.models.Pooling";

impl BertConfig {
    /// Reads the config of the Hugging Face BERT model in `dir` for a sequence of
    /// `n_tokens` tokens.
    pub fn from_hf_dir(dir: &Path, n_tokens: i64) -> Result<BertConfig, Error> {
        let config = Json::read(dir.join("config.json"))?;
        if let Some(kind) = config.opt_str("model_type")?
            && kind != "bert"
        {
            return Err(Error::UnsupportedArchitecture {
                file: config.path.clone(),
                arch: kind.to_owned(),
                supported: "bert",
            });
        }
        let act = config.str("hidden_act")?;
        if act != "gelu" {
            return Err(config.bad(
                "hidden_act",
                format!("is '{act}'; only 'gelu' (the exact erf form) is supported"),
            ));
        }
        if let Some(pos) = config.opt_str("position_embedding_type")?
            && pos != "absolute"
        {
            return Err(config.bad(
                "position_embedding_type",
                format!("is '{pos}'; only 'absolute' is supported"),
            ));
        }
        let n_embd = config.positive("hidden_size")?;
        let n_head = config.positive("num_attention_heads")?;
        if n_embd % n_head != 0 {
            return Err(config.bad(
                "num_attention_heads",
                format!("is {n_head}, which does not divide hidden_size {n_embd}"),
            ));
        }
        if n_tokens < 1 {
            return Err(Error::Unsupported {
                file: config.path.clone(),
                reason: format!("a sequence needs at least one token (got n_tokens = {n_tokens})"),
            });
        }
        let (pooling, l2_normalize) = sentence_transformers_head(dir)?;
        Ok(BertConfig {
            n_layer: config.positive("num_hidden_layers")? as usize,
            n_embd,
            n_head,
            n_ff: config.positive("intermediate_size")?,
            n_vocab: config.positive("vocab_size")?,
            n_ctx_train: config.positive("max_position_embeddings")?,
            n_types: config.positive("type_vocab_size")?,
            n_tokens,
            eps: config.f32("layer_norm_eps")?,
            weight_dtype: DType::F32,
            embd_dtype: DType::F32,
            pooling,
            l2_normalize,
            names: BertNames::HuggingFace,
        })
    }
}

/// The pooling of the sentence-transformers pipeline in `dir` (mean when it
/// has no pooling module) and whether it ends with L2 normalisation (true
/// when `modules.json` is absent).
fn sentence_transformers_head(dir: &Path) -> Result<(Pooling, bool), Error> {
    let path = dir.join("modules.json");
    if !path.exists() {
        return Ok((Pooling::Mean, true));
    }
    let modules = read_json(&path)?;
    let modules = modules.as_array().ok_or_else(|| Error::File {
        file: path.clone(),
        reason: "expected a JSON array of modules".into(),
    })?;
    let mut normalize = false;
    let mut pooling = Pooling::Mean;
    for module in modules {
        let kind = module.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == NORMALIZE_MODULE {
            normalize = true;
        }
        if kind == POOLING_MODULE {
            let sub = module.get("path").and_then(Value::as_str).unwrap_or("");
            let config = dir.join(sub).join("config.json");
            if config.exists() {
                pooling = pooling_mode(&Json::read(config)?)?;
            }
        }
    }
    Ok((pooling, normalize))
}

/// The one pooling mode a sentence-transformers pooling config turns on: the
/// mean over tokens or the `[CLS]` token; any other mode, or several, is an
/// error naming the key.
fn pooling_mode(pooling: &Json) -> Result<Pooling, Error> {
    let flag = |key: &str| -> Result<bool, Error> {
        match pooling.map.get(key) {
            None => Ok(false),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| pooling.bad(key, "should be a bool".into())),
        }
    };
    let mean = flag("pooling_mode_mean_tokens")?;
    let cls = flag("pooling_mode_cls_token")?;
    for key in [
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
        "pooling_mode_lasttoken",
    ] {
        if flag(key)? {
            return Err(pooling.bad(
                key,
                "is true; only mean or [CLS] pooling is supported".into(),
            ));
        }
    }
    match (mean, cls) {
        (true, false) => Ok(Pooling::Mean),
        (false, true) => Ok(Pooling::Cls),
        (true, true) => Err(pooling.bad(
            "pooling_mode_cls_token",
            "is true beside pooling_mode_mean_tokens; only one pooling mode is supported".into(),
        )),
        (false, false) => Err(pooling.bad(
            "pooling_mode_mean_tokens",
            "is false and so is pooling_mode_cls_token; one of them must be on".into(),
        )),
    }
}

fn read_json(path: &Path) -> Result<Value, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::File {
        file: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })?;
    serde_json::from_str(&text).map_err(|e| Error::File {
        file: path.to_path_buf(),
        reason: format!("invalid JSON: {e}"),
    })
}

/// A JSON object with typed lookups whose errors name the field and the file.
struct Json {
    path: PathBuf,
    map: Map<String, Value>,
}

impl Json {
    fn read(path: PathBuf) -> Result<Json, Error> {
        match read_json(&path)? {
            Value::Object(map) => Ok(Json { path, map }),
            _ => Err(Error::File {
                file: path,
                reason: "expected a JSON object".into(),
            }),
        }
    }

    fn bad(&self, key: &str, reason: String) -> Error {
        Error::BadValue {
            file: self.path.clone(),
            key: key.to_owned(),
            reason,
        }
    }

    fn get(&self, key: &str) -> Result<&Value, Error> {
        self.map.get(key).ok_or_else(|| Error::MissingKey {
            file: self.path.clone(),
            key: key.to_owned(),
        })
    }

    fn opt_str(&self, key: &str) -> Result<Option<&str>, Error> {
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.bad(key, format!("should be a string but is {v}"))),
        }
    }

    fn str(&self, key: &str) -> Result<&str, Error> {
        let v = self.get(key)?;
        v.as_str()
            .ok_or_else(|| self.bad(key, format!("should be a string but is {v}")))
    }

    /// An integer that is at least 1.
    fn positive(&self, key: &str) -> Result<i64, Error> {
        let v = self.get(key)?;
        match v.as_i64() {
            Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => Ok(n),
            _ => Err(self.bad(
                key,
                format!("should be an integer in 1..={} but is {v}", u32::MAX),
            )),
        }
    }

    /// A finite positive float (an epsilon).
    fn f32(&self, key: &str) -> Result<f32, Error> {
        let v = self.get(key)?;
        match v.as_f64().map(|x| x as f32) {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(self.bad(key, format!("should be a positive number but is {v}"))),
        }
    }
}
