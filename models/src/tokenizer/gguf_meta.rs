//! [`TokenizerMeta`]: typed access to the `tokenizer.ggml.*` keys of a GGUF
//! file, shared by the BPE, WordPiece and SentencePiece readers.
//!
//! Invariant: every error is [`TokenizerError::Metadata`], naming the file,
//! the key and what is wrong with it (missing, wrong type, out of range).

use ir::files::TensorSource;
use ir::files::gguf::{GgufFile, GgufValue};

use super::TokenizerError;

/// GGUF token type of ordinary tokens.
pub(super) const TOKEN_TYPE_NORMAL: i64 = 1;
/// GGUF token type of the unknown token (`<unk>`).
pub(super) const TOKEN_TYPE_UNKNOWN: i64 = 2;
/// GGUF token type of control tokens (`<|endoftext|>`, `[CLS]`, ...).
pub(super) const TOKEN_TYPE_CONTROL: i64 = 3;
/// GGUF token type of user-defined tokens (added words matched verbatim).
pub(super) const TOKEN_TYPE_USER_DEFINED: i64 = 4;
/// GGUF token type of byte tokens (`<0x41>`: one byte, SentencePiece's
/// fallback for characters outside the vocabulary).
pub(super) const TOKEN_TYPE_BYTE: i64 = 6;

/// Registers the file's control tokens as special tokens and its user-defined
/// tokens as added tokens (`types[i]` is token i's GGUF type), so that each
/// matches verbatim as one id and never goes through the model's splitting.
pub(super) fn add_typed_tokens<S: AsRef<str>>(
    inner: &mut tokenizers::Tokenizer,
    tokens: &[S],
    types: &[i64],
) {
    let added = |wanted: i64, special: bool| -> Vec<tokenizers::AddedToken> {
        tokens
            .iter()
            .zip(types)
            .filter(|(_, t)| **t == wanted)
            .map(|(token, _)| tokenizers::AddedToken::from(token.as_ref().to_owned(), special))
            .collect()
    };
    inner.add_special_tokens(&added(TOKEN_TYPE_CONTROL, true));
    inner.add_tokens(&added(TOKEN_TYPE_USER_DEFINED, false));
}

/// Typed access to the tokenizer keys of one GGUF file, with errors that name
/// the file and the key.
pub(super) struct TokenizerMeta<'a> {
    file: &'a GgufFile,
}

impl<'a> TokenizerMeta<'a> {
    pub(super) fn new(file: &'a GgufFile) -> TokenizerMeta<'a> {
        TokenizerMeta { file }
    }

    pub(super) fn problem(&self, key: &'static str, problem: String) -> TokenizerError {
        TokenizerError::Metadata {
            file: self.file.path().to_path_buf(),
            key,
            problem,
        }
    }

    fn value(&self, key: &'static str) -> Result<&'a GgufValue, TokenizerError> {
        self.file
            .get(key)
            .ok_or_else(|| self.problem(key, "missing".into()))
    }

    fn wrong_type(&self, key: &'static str, want: &str, got: &GgufValue) -> TokenizerError {
        self.problem(key, format!("expected {want}, found {}", got.type_name()))
    }

    pub(super) fn str(&self, key: &'static str) -> Result<&'a str, TokenizerError> {
        let v = self.value(key)?;
        v.as_str()
            .ok_or_else(|| self.wrong_type(key, "a string", v))
    }

    fn array(&self, key: &'static str) -> Result<&'a [GgufValue], TokenizerError> {
        let v = self.value(key)?;
        v.as_array()
            .ok_or_else(|| self.wrong_type(key, "an array", v))
    }

    /// An array of strings.
    pub(super) fn strings(&self, key: &'static str) -> Result<Vec<&'a str>, TokenizerError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().ok_or_else(|| {
                    self.problem(
                        key,
                        format!("element {i} is a {}, not a string", v.type_name()),
                    )
                })
            })
            .collect()
    }

    /// `tokenizer.ggml.token_type`, one integer per token; all normal (1)
    /// when absent.
    pub(super) fn token_types(&self, n_tokens: usize) -> Result<Vec<i64>, TokenizerError> {
        const KEY: &str = "tokenizer.ggml.token_type";
        if self.file.get(KEY).is_none() {
            return Ok(vec![TOKEN_TYPE_NORMAL; n_tokens]);
        }
        let types = self
            .array(KEY)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_i64().ok_or_else(|| {
                    self.problem(
                        KEY,
                        format!("element {i} is a {}, not an integer", v.type_name()),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if types.len() != n_tokens {
            return Err(self.problem(
                KEY,
                format!("{} entries for {n_tokens} tokens", types.len()),
            ));
        }
        Ok(types)
    }

    /// `tokenizer.ggml.scores`, one number per token (f32 or integer
    /// elements, as llama.cpp accepts), none NaN. A `-0.0` is read as `0.0`,
    /// so that scores compare as llama.cpp compares them.
    pub(super) fn scores(&self, n_tokens: usize) -> Result<Vec<f32>, TokenizerError> {
        const KEY: &str = "tokenizer.ggml.scores";
        if self.file.get(KEY).is_none() {
            return Err(self.problem(
                KEY,
                "missing; a SentencePiece vocabulary needs one score per token (its merges are \
                 ranked by them)"
                    .into(),
            ));
        }
        let scores = self
            .array(KEY)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_f64() {
                Some(x) if x.is_nan() => Err(self.problem(KEY, format!("element {i} is NaN"))),
                // `+ 0.0` turns -0.0 into 0.0 and leaves every other value.
                Some(x) => Ok(x as f32 + 0.0),
                None => Err(self.problem(
                    KEY,
                    format!("element {i} is a {}, not a number", v.type_name()),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if scores.len() != n_tokens {
            return Err(self.problem(
                KEY,
                format!("{} entries for {n_tokens} tokens", scores.len()),
            ));
        }
        Ok(scores)
    }

    /// An optional token id, which must be inside the vocabulary.
    pub(super) fn token_id(
        &self,
        key: &'static str,
        n_tokens: usize,
    ) -> Result<Option<u32>, TokenizerError> {
        let Some(v) = self.file.get(key) else {
            return Ok(None);
        };
        let id = v
            .as_u64()
            .ok_or_else(|| self.wrong_type(key, "a non-negative integer", v))?;
        match u32::try_from(id) {
            Ok(id) if (id as usize) < n_tokens => Ok(Some(id)),
            _ => Err(self.problem(
                key,
                format!("id {id} is outside the {n_tokens}-token vocabulary"),
            )),
        }
    }

    /// An optional bool.
    pub(super) fn bool(&self, key: &'static str) -> Result<Option<bool>, TokenizerError> {
        let Some(v) = self.file.get(key) else {
            return Ok(None);
        };
        v.as_bool()
            .map(Some)
            .ok_or_else(|| self.wrong_type(key, "a bool", v))
    }
}
