//! A Hugging Face `tokenizer.json` (all-MiniLM-L6-v2's BERT WordPiece:
//! lower-casing normaliser, BERT pre-tokenizer, `[CLS] ... [SEP]` template).
//!
//! The file's own pipeline runs unchanged, with two exceptions: its padding and
//! truncation are switched off, so `encode` returns the whole text's ids and
//! the caller (which sizes the graph) decides about length. The EOS id comes
//! from `eos_token` in the `tokenizer_config.json` beside the file, when there
//! is one (BERT has none).

use std::path::Path;

use super::{Backend, Tokenizer, TokenizerError};

/// Loads `path` (see the module doc).
pub(super) fn from_hf_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
    let error = |message: String| TokenizerError::HfFile {
        path: path.to_path_buf(),
        message,
    };
    let mut inner = tokenizers::Tokenizer::from_file(path).map_err(|e| error(e.to_string()))?;
    inner.with_padding(None);
    inner
        .with_truncation(None)
        .map_err(|e| error(e.to_string()))?;
    let eos = match path.parent().map(|dir| dir.join("tokenizer_config.json")) {
        Some(config) if config.is_file() => eos_from_config(&config, &inner)?,
        _ => None,
    };
    let vocab_size = inner.get_vocab_size(true);
    Ok(Tokenizer {
        backend: Backend::Hf {
            inner: Box::new(inner),
            add_special_tokens: true,
        },
        source: path.to_path_buf(),
        bos: None,
        eos,
        end_of_generation: eos.into_iter().collect(),
        vocab_size,
    })
}

/// The id of `eos_token` (a string or `{"content": ...}`) in a
/// `tokenizer_config.json`, if it names one.
fn eos_from_config(
    config: &Path,
    inner: &tokenizers::Tokenizer,
) -> Result<Option<u32>, TokenizerError> {
    let error = |message: String| TokenizerError::HfFile {
        path: config.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(config).map_err(|e| error(e.to_string()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| error(e.to_string()))?;
    let token = match json.get("eos_token") {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(s)) => s.as_str(),
        Some(v) => v.get("content").and_then(|c| c.as_str()).ok_or_else(|| {
            error(format!(
                "eos_token is neither a string nor {{\"content\": ...}}: {v}"
            ))
        })?,
    };
    inner
        .token_to_id(token)
        .map(Some)
        .ok_or_else(|| error(format!("eos_token {token:?} is not in the vocabulary")))
}
