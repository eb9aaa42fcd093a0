//! [`Family::of`]: which builder a GGUF file is for, by its
//! `general.architecture`.
//!
//! Invariant: an architecture no builder reads is an error naming it and
//! listing the supported ones ([`SUPPORTED_ARCHITECTURES`]); nothing is guessed.

use crate::Error;
use crate::gguf_meta::GgufMeta;
use ir::files::gguf::GgufFile;

/// Every architecture a GGUF front-end reads, for messages.
pub const SUPPORTED_ARCHITECTURES: &str =
    "llama, mistral, qwen2, qwen3, qwen3moe, olmoe, gemma3 (decoders), bert (encoders)";

/// The builders, by model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Llama-family decoders (`llama`, `mistral`, `qwen2`, `qwen3`, `qwen3moe`, `olmoe`,
    /// `gemma3`):
    /// [`crate::llama::LlamaConfig::from_gguf`].
    Llama,
    /// BERT encoders (`bert`): [`crate::bert::BertConfig::from_gguf`].
    Bert,
}

impl Family {
    /// The family of `file`'s `general.architecture`.
    pub fn of(file: &GgufFile) -> Result<Family, Error> {
        let meta = GgufMeta::new(file);
        match meta.str("general.architecture")? {
            "llama" | "mistral" | "qwen2" | "qwen3" | "qwen3moe" | "olmoe" | "gemma3" => {
                Ok(Family::Llama)
            }
            "bert" => Ok(Family::Bert),
            other => Err(Error::UnsupportedArchitecture {
                file: meta.path().to_path_buf(),
                arch: other.to_owned(),
                supported: SUPPORTED_ARCHITECTURES,
            }),
        }
    }
}
