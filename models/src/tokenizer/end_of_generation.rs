//! Which token ids end a generation: llama.cpp's end-of-generation set.
//!
//! A chat model ends its turn with a token that is often not the file's EOS:
//! Gemma 3 writes `<end_of_turn>` (106) while its EOS is `<eos>` (1); SmolLM2
//! ends a turn with `<|im_end|>` (its EOS) but a document with
//! `<|endoftext|>`. llama.cpp stops at any of: the EOS id, the ids
//! `tokenizer.ggml.eot_token_id` and `tokenizer.ggml.eom_token_id` name, and
//! every token whose text is one of [`END_OF_GENERATION_TEXTS`]. This module
//! computes the same set from a GGUF vocabulary.
//!
//! Invariant: the returned ids are sorted, distinct and inside the vocabulary.

use super::TokenizerError;
use super::gguf_meta::TokenizerMeta;

/// Token texts llama.cpp treats as ending a generation wherever they appear
/// in a vocabulary (chat-turn and end-of-text markers of the model families
/// it knows).
pub(super) const END_OF_GENERATION_TEXTS: [&str; 12] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<|end_of_text|>",
];

/// The end-of-generation ids of a GGUF vocabulary `tokens` whose EOS is
/// `eos` (see the module doc); errors name a bad `eot`/`eom` key.
pub(super) fn end_of_generation_ids<S: AsRef<str>>(
    meta: &TokenizerMeta<'_>,
    tokens: &[S],
    eos: Option<u32>,
) -> Result<Vec<u32>, TokenizerError> {
    let n = tokens.len();
    let mut ids: Vec<u32> = eos.into_iter().collect();
    ids.extend(meta.token_id("tokenizer.ggml.eot_token_id", n)?);
    ids.extend(meta.token_id("tokenizer.ggml.eom_token_id", n)?);
    ids.extend(
        (0u32..)
            .zip(tokens)
            .filter(|(_, text)| END_OF_GENERATION_TEXTS.contains(&text.as_ref()))
            .map(|(id, _)| id),
    );
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}
