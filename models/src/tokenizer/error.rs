//! The one error type of the tokenizers: every variant names the file, key,
//! value or id that is wrong.

use std::path::PathBuf;

/// Why a tokenizer could not be loaded, or could not encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A Hugging Face `tokenizer.json` (or its `tokenizer_config.json`) could
    /// not be read or parsed.
    #[error("{}: cannot load the tokenizer: {message}", path.display())]
    HfFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A tokenizer metadata key of a GGUF file is missing or malformed.
    #[error("{}: metadata key {key}: {problem}", file.display())]
    Metadata {
        /// The GGUF file.
        file: PathBuf,
        /// The metadata key.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer kind other than byte-level
    /// BPE, WordPiece and SentencePiece BPE.
    #[error(
        "{}: tokenizer.ggml.model is {model:?}; supported: \"gpt2\" (byte-level BPE), \"bert\" (WordPiece), \"llama\" (SentencePiece BPE)",
        file.display()
    )]
    UnsupportedModel {
        /// The GGUF file.
        file: PathBuf,
        /// The value of `tokenizer.ggml.model`.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer whose splitting rules are not
    /// known here.
    #[error(
        "{}: tokenizer.ggml.pre is {pre:?}, an unknown pre-tokenizer (known: {})",
        file.display(),
        known.join(", ")
    )]
    UnknownPreTokenizer {
        /// The GGUF file.
        file: PathBuf,
        /// The value of `tokenizer.ggml.pre`.
        pre: String,
        /// The names that are supported.
        known: Vec<&'static str>,
    },
    /// The vocabulary and merges read from a GGUF file do not form a BPE model
    /// (a merge naming a token that is not in the vocabulary, ...).
    #[error("{}: cannot build the BPE tokenizer: {message}", file.display())]
    Build {
        /// The GGUF file.
        file: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Encoding a text failed.
    #[error("cannot encode {text_start:?}...: {message}")]
    Encode {
        /// The first characters of the text.
        text_start: String,
        /// What went wrong.
        message: String,
    },
    /// Decoding failed inside the tokenizer.
    #[error("cannot decode: {message}")]
    Decode {
        /// What went wrong.
        message: String,
    },
    /// A token id at or beyond the vocabulary size was given to decode.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    IdOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
}
