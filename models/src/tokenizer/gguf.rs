//! The byte-level BPE tokenizer stored in a GGUF file's metadata
//! (`tokenizer.ggml.model == "gpt2"`), rebuilt with the `tokenizers` crate.
//!
//! Keys read: `tokenizer.ggml.model`, `.pre` (the split rules, see
//! [`super::pre`]), `.tokens` (id -> token string, in byte-level characters),
//! `.merges` (`"a b"` strings, highest priority first), `.token_type`
//! (optional: 3 = control, 4 = user-defined), `.bos_token_id`,
//! `.eos_token_id` and `.add_bos_token` (optional; BOS is added only when the
//! file says so).
//!
//! Invariants of a returned tokenizer: every token string maps to its id (the
//! first id when a string repeats, so a repeat's later ids decode to nothing);
//! control tokens are special (matched in input text, left out of decoded
//! text); user-defined tokens are matched in input text and decoded as written;
//! BOS and EOS ids are inside the vocabulary; BOS exists whenever it is to be
//! added.

use ir::files::TensorSource;
use ir::files::gguf::{GgufFile, GgufValue};
use tokenizers::AddedToken;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use super::{Tokenizer, TokenizerError, pre};

/// GGUF token type of control tokens (`<|endoftext|>`, `<|im_start|>`, ...).
const TOKEN_TYPE_CONTROL: i64 = 3;
/// GGUF token type of user-defined tokens (added words matched verbatim).
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Reads the tokenizer of `file` (see the module doc).
pub(super) fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
    let path = file.path().to_path_buf();
    let meta = Meta { file };

    let model = meta.str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(TokenizerError::UnsupportedModel {
            file: path,
            model: model.to_owned(),
        });
    }
    let pre_name = meta.str("tokenizer.ggml.pre")?;
    let pre = pre::lookup(pre_name).ok_or_else(|| TokenizerError::UnknownPreTokenizer {
        file: path.clone(),
        pre: pre_name.to_owned(),
        known: pre::known_names(),
    })?;

    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    if tokens.is_empty() {
        return Err(meta.problem("tokenizer.ggml.tokens", "the vocabulary is empty".into()));
    }
    let merges = meta
        .strings("tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| {
                    meta.problem(
                        "tokenizer.ggml.merges",
                        format!("element {i} ({m:?}) is not two tokens separated by a space"),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let types = meta.token_types(tokens.len())?;
    let bos = meta.token_id("tokenizer.ggml.bos_token_id", tokens.len())?;
    let eos = meta.token_id("tokenizer.ggml.eos_token_id", tokens.len())?;
    let add_bos = meta.bool("tokenizer.ggml.add_bos_token")?.unwrap_or(false);
    if add_bos && bos.is_none() {
        return Err(meta.problem(
            "tokenizer.ggml.bos_token_id",
            "missing, but tokenizer.ggml.add_bos_token is true".into(),
        ));
    }

    let mut vocab = Vocab::default();
    for (id, token) in (0u32..).zip(&tokens) {
        vocab.entry((*token).to_owned()).or_insert(id);
    }
    let build_error = |message: String| TokenizerError::Build {
        file: path.clone(),
        message,
    };
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|e| build_error(e.to_string()))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(pre.build().map_err(build_error)?));
    inner.with_decoder(Some(ByteLevel::new(false, true, false)));

    let added = |wanted: i64, special: bool| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(&types)
            .filter(|(_, t)| **t == wanted)
            .map(|(token, _)| AddedToken::from(*token, special))
            .collect()
    };
    inner.add_special_tokens(&added(TOKEN_TYPE_CONTROL, true));
    inner.add_tokens(&added(TOKEN_TYPE_USER_DEFINED, false));

    Ok(Tokenizer {
        inner,
        source: path,
        add_special_tokens: false,
        bos: bos.filter(|_| add_bos),
        eos,
        vocab_size: tokens.len(),
    })
}

/// Typed access to the tokenizer keys of one GGUF file, with errors that name
/// the file and the key.
struct Meta<'a> {
    file: &'a GgufFile,
}

impl<'a> Meta<'a> {
    fn problem(&self, key: &'static str, problem: String) -> TokenizerError {
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

    fn str(&self, key: &'static str) -> Result<&'a str, TokenizerError> {
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
    fn strings(&self, key: &'static str) -> Result<Vec<&'a str>, TokenizerError> {
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
    fn token_types(&self, n_tokens: usize) -> Result<Vec<i64>, TokenizerError> {
        const KEY: &str = "tokenizer.ggml.token_type";
        if self.file.get(KEY).is_none() {
            return Ok(vec![1; n_tokens]);
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

    /// An optional token id, which must be inside the vocabulary.
    fn token_id(&self, key: &'static str, n_tokens: usize) -> Result<Option<u32>, TokenizerError> {
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
    fn bool(&self, key: &'static str) -> Result<Option<bool>, TokenizerError> {
        let Some(v) = self.file.get(key) else {
            return Ok(None);
        };
        v.as_bool()
            .map(Some)
            .ok_or_else(|| self.wrong_type(key, "a bool", v))
    }
}
