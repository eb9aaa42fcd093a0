//! The greedy continuation shared by the builder's and the imported graphs'
//! generation: one token at a time until the token count, an
//! end-of-generation token or a full context.
//!
//! Invariant: every generated id is passed to `on` as text (through one
//! [`StreamDecoder`], so multi-byte characters come out whole) before the
//! next step runs; the last generated id is never fed back.

use super::generator::{GenerateEvent, StopReason, argmax};
use crate::Result;
use models::{StreamDecoder, Tokenizer};

/// What the continuation produced.
pub(super) struct Continuation {
    /// The generated ids, `first` among them.
    pub generated_ids: Vec<u32>,
    /// Why it stopped.
    pub stop: StopReason,
    /// Decode steps run.
    pub steps: usize,
    /// Bytes of weights and cache the steps read, all together.
    pub read_bytes: u64,
}

/// One decode step: the logits after token `id` at position `n_past`, and
/// the bytes the step read.
pub(super) type DecodeStep<'a> = dyn FnMut(u32, i64) -> Result<(Vec<f32>, u64)> + 'a;

/// Continues greedily from `first` (the prompt's next token) with `n_past`
/// tokens cached in a context of `n_ctx`: at most `max_tokens` ids, stopping
/// at an end-of-generation token unless `ignore_eos`.
pub(super) fn continue_greedily(
    tokenizer: &Tokenizer,
    first: u32,
    (mut n_past, n_ctx): (i64, i64),
    (max_tokens, ignore_eos): (usize, bool),
    on: &mut dyn FnMut(GenerateEvent<'_>),
    step: &mut DecodeStep<'_>,
) -> Result<Continuation> {
    let mut stream = StreamDecoder::new(tokenizer);
    let mut generated_ids = Vec::new();
    let (mut steps, mut read_bytes) = (0usize, 0u64);
    let mut next = first;
    let stop = loop {
        generated_ids.push(next);
        on(GenerateEvent::Text(&stream.push(next)?));
        if generated_ids.len() >= max_tokens {
            break StopReason::MaxTokens;
        }
        if !ignore_eos && tokenizer.is_end_of_generation(next) {
            break StopReason::EndOfGeneration;
        }
        if n_past >= n_ctx {
            break StopReason::ContextFull;
        }
        let (logits, read) = step(next, n_past)?;
        read_bytes += read;
        steps += 1;
        n_past += 1;
        next = argmax(&logits);
    };
    on(GenerateEvent::Text(&stream.finish()));
    Ok(Continuation {
        generated_ids,
        stop,
        steps,
        read_bytes,
    })
}
