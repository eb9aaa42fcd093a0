//! The byte-level BPE tokenizer stored in a GGUF file's metadata
//! (`tokenizer.ggml.model == "gpt2"`), rebuilt with the `tokenizers` crate.
//!
//! Keys read (after [`super::Tokenizer::from_gguf`] has checked
//! `tokenizer.ggml.model`): `tokenizer.ggml.pre` (the split rules, see
//! [`super::pre`]), `.tokens` (id -> token string, in byte-level characters),
//! `.merges` (`"a b"` strings, highest priority first), `.token_type`
//! (optional: 3 = control, 4 = user-defined), `.bos_token_id`,
//! `.eos_token_id` and `.add_bos_token` (optional; BOS is added only when the
//! file says so), `.eot_token_id` and `.eom_token_id` (optional: they end a
//! generation, `end_of_generation.rs`).
//!
//! Invariants of a returned tokenizer: every token string maps to its id (the
//! first id when a string repeats, so a repeat's later ids decode to nothing);
//! control tokens are special (matched in input text, left out of decoded
//! text); user-defined tokens are matched in input text and decoded as written;
//! BOS and EOS ids are inside the vocabulary; BOS exists whenever it is to be
//! added.

use ir::files::TensorSource;
use ir::files::gguf::GgufFile;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use super::end_of_generation::end_of_generation_ids;
use super::gguf_meta::{TokenizerMeta, add_typed_tokens};
use super::{Backend, Tokenizer, TokenizerError, pre};

/// Reads the byte-level BPE tokenizer of `file` (see the module doc).
pub(super) fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
    let path = file.path().to_path_buf();
    let meta = TokenizerMeta::new(file);

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
    let end_of_generation = end_of_generation_ids(&meta, &tokens, eos)?;
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

    add_typed_tokens(&mut inner, &tokens, &types);

    Ok(Tokenizer {
        backend: Backend::Hf {
            inner: Box::new(inner),
            add_special_tokens: false,
        },
        source: path,
        bos: bos.filter(|_| add_bos),
        eos,
        end_of_generation,
        vocab_size: tokens.len(),
    })
}
