//! Tokenizers: text to token ids and back, for the models in this crate.
//!
//! Three sources, one [`Tokenizer`] type:
//! - [`Tokenizer::from_hf_file`]: a `tokenizer.json` as it is (BERT WordPiece
//!   for all-MiniLM-L6-v2), less its padding and truncation;
//! - [`Tokenizer::from_gguf`]: the vocabulary in a GGUF file's metadata,
//!   by `tokenizer.ggml.model`: `gpt2`, a byte-level BPE with the split rules
//!   its `tokenizer.ggml.pre` names (`smollm`, `starcoder`, `gpt-2`,
//!   `llama-bpe`, `qwen2`; `gguf_bpe.rs`), `bert`, a WordPiece stored in
//!   llama.cpp's phantom-space form (`gguf_wordpiece.rs`), or `llama`, a
//!   SentencePiece BPE ranked by `tokenizer.ggml.scores` (Gemma 3;
//!   `gguf_spm.rs`).
//!
//! The first two run on Hugging Face's `tokenizers` crate (pure Rust: its
//! `fancy-regex` engine, not onig's C); SentencePiece runs on `spm.rs`, the
//! bigram merge of llama.cpp's `llm_tokenizer_spm` written out, because the
//! crate's BPE cannot reproduce it exactly (its module doc says where).
//!
//! [`StreamDecoder`] turns ids into text one at a time for generation, holding
//! back bytes until they form whole characters.
//!
//! Invariants: `encode` adds only the special tokens its source asks for
//! (`[CLS]`/`[SEP]` by a `tokenizer.json`'s template and for every GGUF
//! WordPiece; BOS only when a GGUF BPE's `tokenizer.ggml.add_bos_token` is
//! true; for SentencePiece, BOS unless `add_bos_token` is false and EOS when
//! `add_eos_token` is true, llama.cpp's defaults); special tokens written in
//! the input text are recognised as such; `decode` rejects ids outside the
//! vocabulary and leaves special tokens out of its text; for byte-level BPE
//! and SentencePiece without special tokens in the text,
//! `decode(encode(s)) == s` (SentencePiece: when `s` has no `▁` and every
//! byte has a byte token, as in Gemma 3).

mod end_of_generation;
mod error;
mod gguf_bpe;
mod gguf_meta;
mod gguf_spm;
mod gguf_wordpiece;
mod hf;
mod pre;
mod spm;
#[cfg(test)]
mod spm_gemma3_tests;
#[cfg(test)]
mod spm_tests;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wordpiece_tests;

use std::path::{Path, PathBuf};

pub use error::TokenizerError;
pub use stream::StreamDecoder;

/// A loaded tokenizer (see the module doc).
pub struct Tokenizer {
    backend: Backend,
    /// The file it was read from, for messages.
    source: PathBuf,
    /// Prepended by `encode` (GGUF files that ask for BOS).
    bos: Option<u32>,
    eos: Option<u32>,
    /// Ids that end a generation (EOS among them), sorted.
    end_of_generation: Vec<u32>,
    vocab_size: usize,
}

/// What encodes and decodes, by source.
enum Backend {
    /// A `tokenizers` pipeline (`tokenizer.json`, GGUF BPE and WordPiece).
    Hf {
        /// Boxed: it is over a kilobyte.
        inner: Box<tokenizers::Tokenizer>,
        /// Whether its post-processor adds special tokens.
        add_special_tokens: bool,
    },
    /// A GGUF SentencePiece vocabulary.
    Spm(spm::Spm),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("end_of_generation", &self.end_of_generation)
            .finish()
    }
}

impl Tokenizer {
    /// The `tokenizer.json` of a Hugging Face model folder (BERT WordPiece for
    /// all-MiniLM-L6-v2: lower-casing, `[CLS]`/`[SEP]` added). Its padding and
    /// truncation are switched off.
    pub fn from_hf_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
        hf::from_hf_file(path)
    }

    /// The tokenizer in a GGUF file's metadata: `tokenizer.ggml.model` must be
    /// `"gpt2"` (byte-level BPE, whose `tokenizer.ggml.pre` must be a known
    /// pre-tokenizer: `smollm`, `gpt-2`, `llama-bpe`, `qwen2`, `starcoder`),
    /// `"bert"` (WordPiece) or `"llama"` (SentencePiece BPE with scores);
    /// anything else is an error naming the file and the value.
    pub fn from_gguf(file: &ir::files::gguf::GgufFile) -> Result<Tokenizer, TokenizerError> {
        match gguf_meta::TokenizerMeta::new(file).str("tokenizer.ggml.model")? {
            "gpt2" => gguf_bpe::from_gguf(file),
            "bert" => gguf_wordpiece::from_gguf(file),
            "llama" => gguf_spm::from_gguf(file),
            other => Err(TokenizerError::UnsupportedModel {
                file: ir::files::TensorSource::path(file).to_path_buf(),
                model: other.to_owned(),
            }),
        }
    }

    /// The ids of `text`, with the special tokens the source adds.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let error = |message: String| TokenizerError::Encode {
            text_start: text.chars().take(40).collect(),
            message,
        };
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        ids.extend(self.bos);
        match &self.backend {
            Backend::Hf {
                inner,
                add_special_tokens,
            } => {
                let encoding = inner
                    .encode(text, *add_special_tokens)
                    .map_err(|e| error(e.to_string()))?;
                ids.extend_from_slice(encoding.get_ids());
            }
            Backend::Spm(spm) => spm.encode(text, &mut ids),
        }
        Ok(ids)
    }

    /// The text of `ids`, special tokens left out. Bytes that do not form
    /// valid UTF-8 (a sequence cut short) appear as U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        for &id in ids {
            self.check_id(id)?;
        }
        match &self.backend {
            Backend::Hf { inner, .. } => {
                inner.decode(ids, true).map_err(|e| TokenizerError::Decode {
                    message: e.to_string(),
                })
            }
            Backend::Spm(spm) => Ok(spm.decode(ids)),
        }
    }

    /// The end-of-sequence id, when the source names one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `id` ends a generation: EOS, or for a GGUF vocabulary any of
    /// llama.cpp's end-of-generation tokens (`end_of_generation.rs`).
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_of_generation.binary_search(&id).is_ok()
    }

    /// The ids that end a generation, sorted.
    pub fn end_of_generation_ids(&self) -> &[u32] {
        &self.end_of_generation
    }

    /// Number of token ids (special and added tokens included).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// `Ok` when `id` is inside the vocabulary.
    fn check_id(&self, id: u32) -> Result<(), TokenizerError> {
        if (id as usize) < self.vocab_size {
            Ok(())
        } else {
            Err(TokenizerError::IdOutOfRange {
                id,
                vocab_size: self.vocab_size,
            })
        }
    }
}
