//! The pre-tokenizers named by GGUF's `tokenizer.ggml.pre`: how text is cut
//! into pieces before BPE merges run inside each piece.
//!
//! Each name maps to the split rules its model's Hugging Face `tokenizer.json`
//! uses (the same rules llama.cpp applies for that name). The regexes are
//! applied to the raw text, before the byte-level mapping, and every piece
//! (matched or not) is kept (`Isolated`), so no text is ever dropped.

use tokenizers::SplitDelimiterBehavior;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};

/// GPT-2's split (also the one built into [`ByteLevel`] with `use_regex`):
/// English contractions, letter runs, digit runs and other-symbol runs, each
/// with one optional leading space, and whitespace runs that leave their last
/// space to the next word.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama 3's split: case-insensitive contractions, letter runs with one
/// optional non-letter/digit prefix, digits in groups of at most three,
/// symbol runs with trailing newlines, newline runs, then whitespace.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama 3's with every digit on its own.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One digit (any script): isolated before GPT-2's split by the `smollm`
/// family, so numbers are tokenized digit by digit.
const ONE_DIGIT: &str = r"\p{N}";

/// A supported `tokenizer.ggml.pre` value and how it splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreTokenizerKind {
    /// Regexes applied one after the other, each splitting the previous one's
    /// pieces further.
    splits: &'static [&'static str],
    /// Whether BPE takes a whole piece that is itself in the vocabulary without
    /// running merges (Llama 3's `ignore_merges`).
    pub(crate) ignore_merges: bool,
}

/// Every supported name with its rules.
const KNOWN: &[(&str, PreTokenizerKind)] = &[
    (
        "gpt-2",
        PreTokenizerKind {
            splits: &[GPT2],
            ignore_merges: false,
        },
    ),
    (
        "smollm",
        PreTokenizerKind {
            splits: &[ONE_DIGIT, GPT2],
            ignore_merges: false,
        },
    ),
    (
        "starcoder",
        PreTokenizerKind {
            splits: &[ONE_DIGIT, GPT2],
            ignore_merges: false,
        },
    ),
    (
        "llama-bpe",
        PreTokenizerKind {
            splits: &[LLAMA3],
            ignore_merges: true,
        },
    ),
    (
        "qwen2",
        PreTokenizerKind {
            splits: &[QWEN2],
            ignore_merges: false,
        },
    ),
];

/// The names [`lookup`] accepts.
pub(crate) fn known_names() -> Vec<&'static str> {
    KNOWN.iter().map(|(name, _)| *name).collect()
}

/// The rules for the pre-tokenizer called `name`, if known.
pub(crate) fn lookup(name: &str) -> Option<PreTokenizerKind> {
    KNOWN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, kind)| *kind)
}

impl PreTokenizerKind {
    /// The pre-tokenizer: each regex split in order, then the byte-level
    /// mapping (bytes to the printable characters BPE vocabularies use).
    pub(crate) fn build(&self) -> Result<PreTokenizerWrapper, String> {
        let mut steps = Vec::with_capacity(self.splits.len() + 1);
        for regex in self.splits {
            let split = Split::new(
                SplitPattern::Regex((*regex).to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| format!("pre-tokenizer regex {regex:?}: {e}"))?;
            steps.push(PreTokenizerWrapper::Split(split));
        }
        // The splits above already cut the text: the byte-level step only maps.
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
            false, true, false,
        )));
        Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
    }
}
