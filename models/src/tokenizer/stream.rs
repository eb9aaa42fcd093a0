//! Streaming detokenisation: text out as ids come in, one at a time.
//!
//! A byte-level BPE token can end in the middle of a UTF-8 character (an emoji
//! is often split over two to four tokens), and decoders such as WordPiece's
//! decide spacing from a token's neighbour. So the decoder keeps the ids not
//! yet emitted plus the last emitted ones as context, decodes them together,
//! and emits only what follows the context's own text, and only once it does
//! not end in U+FFFD (the mark of an incomplete character).
//!
//! Invariants: nothing returned ends in an incomplete character; for
//! byte-level BPE and SentencePiece, whose decoding concatenates the tokens'
//! bytes, everything `push` returned, then `finish`, concatenates to
//! `Tokenizer::decode` of all ids pushed (for SentencePiece with
//! `add_space_prefix`, whose decoding drops the first token's leading space,
//! as long as BOS, if pushed, comes first). Other decoders see each token
//! with the previous one, which is what WordPiece's spacing depends on.

use super::{Tokenizer, TokenizerError};

/// Incremental decoder for generation (see the module doc).
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    /// Context ids (already emitted) followed by pending ids.
    ids: Vec<u32>,
    /// How many of `ids` are context.
    n_context: usize,
    /// `decode` of the context ids.
    context_text: String,
}

impl<'t> StreamDecoder<'t> {
    /// A decoder with nothing pushed yet.
    pub fn new(tokenizer: &'t Tokenizer) -> StreamDecoder<'t> {
        StreamDecoder {
            tokenizer,
            ids: Vec::new(),
            n_context: 0,
            context_text: String::new(),
        }
    }

    /// Adds one id; returns the text that became complete (often empty while a
    /// character is still incomplete). Fails for an id outside the vocabulary,
    /// leaving the decoder as it was.
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.tokenizer.check_id(id)?;
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with(char::REPLACEMENT_CHARACTER) {
            return Ok(String::new());
        }
        let new = self.after_context(&text);
        // What was pending is now context for the next ids.
        self.ids.drain(..self.n_context);
        self.n_context = self.ids.len();
        self.context_text = self.tokenizer.decode(&self.ids)?;
        Ok(new)
    }

    /// The text still held back (an incomplete character at the end shows as
    /// U+FFFD); the decoder starts afresh afterwards.
    pub fn finish(&mut self) -> String {
        let rest = if self.ids.len() > self.n_context {
            // Ids were checked when pushed, so decoding cannot fail on them.
            let text = self.tokenizer.decode(&self.ids).unwrap_or_default();
            self.after_context(&text)
        } else {
            String::new()
        };
        self.ids.clear();
        self.n_context = 0;
        self.context_text.clear();
        rest
    }

    /// The part of `text` (a decode of context + pending ids) after the
    /// context's own text. Decoders that rewrite earlier text when more follows
    /// are handled by emitting from the first difference.
    fn after_context(&self, text: &str) -> String {
        if let Some(rest) = text.strip_prefix(self.context_text.as_str()) {
            return rest.to_owned();
        }
        // Where all chars compared are equal, the shorter length is a char
        // boundary of both.
        let common = text
            .char_indices()
            .zip(self.context_text.chars())
            .find(|((_, a), b)| a != b)
            .map_or(text.len().min(self.context_text.len()), |((i, _), _)| i);
        text[common..].to_owned()
    }
}
