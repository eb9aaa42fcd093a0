//! The SentencePiece BPE tokenizer stored in a GGUF file's metadata
//! (`tokenizer.ggml.model == "llama"`: Llama 2, Mistral v0.1, Gemma 3), run
//! by [`super::spm`] as llama.cpp runs it.
//!
//! Keys read (after [`super::Tokenizer::from_gguf`] has checked
//! `tokenizer.ggml.model`): `tokenizer.ggml.tokens` (id -> token text, spaces
//! written `▁`), `.scores` (one per token, f32 or integer; merges rank by
//! them), `.token_type` (optional: 2 = unknown, 3 = control, 4 =
//! user-defined, 6 = byte `<0xXX>`), `.bos_token_id`, `.eos_token_id` and
//! `.unknown_token_id` (optional: llama.cpp's defaults 1, 2 and 0 when
//! absent), `.add_bos_token` (default true), `.add_eos_token` (default
//! false) and `.add_space_prefix` (default true), the defaults llama.cpp
//! gives these vocabularies; `.eot_token_id` and `.eom_token_id` (optional:
//! they end a generation, `end_of_generation.rs`). `.pre` and `.merges` are not read: llama.cpp
//! ignores them for this model.
//!
//! Invariants of a returned tokenizer: the scores, types and token ids agree
//! with the vocabulary's size; every byte token's text is `<0xXX>`; BOS and
//! EOS exist whenever they are to be added.

use ir::files::TensorSource;
use ir::files::gguf::GgufFile;

use super::end_of_generation::end_of_generation_ids;
use super::gguf_meta::{TOKEN_TYPE_BYTE, TokenizerMeta};
use super::spm::{Spm, SpmOptions, byte_value};
use super::{Backend, Tokenizer, TokenizerError};

/// Reads the SentencePiece tokenizer of `file` (see the module doc).
pub(super) fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
    let meta = TokenizerMeta::new(file);

    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    if tokens.is_empty() {
        return Err(meta.problem("tokenizer.ggml.tokens", "the vocabulary is empty".into()));
    }
    let n = tokens.len();
    let scores = meta.scores(n)?;
    let types = meta.token_types(n)?;
    if let Some((id, token)) = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .find(|(_, (token, kind))| **kind == TOKEN_TYPE_BYTE && byte_value(token).is_none())
        .map(|(id, (token, _))| (id, token))
    {
        return Err(meta.problem(
            "tokenizer.ggml.token_type",
            format!("token {id} ({token:?}) has type 6 (byte), but its text is not <0xXX>"),
        ));
    }

    // llama.cpp's ids for a "llama" vocabulary whose file names none.
    let id_or = |key: &'static str, default: u32| {
        let default = Some(default).filter(|&id| (id as usize) < n);
        meta.token_id(key, n).map(|id| id.or(default))
    };
    let bos = id_or("tokenizer.ggml.bos_token_id", 1)?;
    let eos = id_or("tokenizer.ggml.eos_token_id", 2)?;
    let end_of_generation = end_of_generation_ids(&meta, &tokens, eos)?;
    // Id 0 always exists: the vocabulary is not empty.
    let unk = id_or("tokenizer.ggml.unknown_token_id", 0)?.unwrap_or(0);
    let add_bos = meta.bool("tokenizer.ggml.add_bos_token")?;
    let add_eos = meta.bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    let add_space_prefix = meta
        .bool("tokenizer.ggml.add_space_prefix")?
        .unwrap_or(true);
    if add_bos.unwrap_or(true) && bos.is_none() {
        let why = match add_bos {
            Some(_) => "missing, but tokenizer.ggml.add_bos_token is true",
            None => {
                "missing, but BOS is to be added (tokenizer.ggml.add_bos_token is absent: true)"
            }
        };
        return Err(meta.problem("tokenizer.ggml.bos_token_id", why.into()));
    }
    if add_eos && eos.is_none() {
        return Err(meta.problem(
            "tokenizer.ggml.eos_token_id",
            "missing, but tokenizer.ggml.add_eos_token is true".into(),
        ));
    }

    let spm = Spm::new(
        &tokens,
        scores,
        &types,
        SpmOptions {
            bos,
            unk,
            add_space_prefix,
            eos_appended: eos.filter(|_| add_eos),
        },
    );
    Ok(Tokenizer {
        backend: Backend::Spm(spm),
        source: file.path().to_path_buf(),
        bos: bos.filter(|_| add_bos.unwrap_or(true)),
        eos,
        end_of_generation,
        vocab_size: n,
    })
}
