//! SentencePiece BPE as llama.cpp runs it (`llm_tokenizer_spm`): the model
//! behind GGUF vocabularies with `tokenizer.ggml.model == "llama"` (Llama 2,
//! Mistral v0.1, Gemma 3), read by [`super::gguf_spm`].
//!
//! Encoding, step by step:
//! 1. Special tokens written in the text (control, user-defined and unknown
//!    tokens: llama.cpp's partitioning with `parse_special` on, which
//!    `generate` asks for) are cut out as one id each, token by token, the
//!    longest text first (ties by id: llama.cpp's sort leaves them
//!    unspecified); each token splits every text fragment left so far at its
//!    non-overlapping occurrences, leftmost first.
//! 2. Each remaining text fragment gets a leading space when
//!    `add_space_prefix` is set and it starts the text or follows a special
//!    token; every `' '` becomes `'▁'` (U+2581).
//! 3. The fragment is split into characters, and the adjacent pair whose
//!    concatenation is a vocabulary token (of any type) with the highest score
//!    is merged, again and again, ties to the leftmost pair, until no pair
//!    forms a token.
//! 4. Each final piece is its token; a piece outside the vocabulary (only
//!    single characters can be) becomes its UTF-8 bytes as byte tokens
//!    (`<0xXX>`, else the one-byte token, else the unknown token, where
//!    llama.cpp throws instead).
//!
//! Decoding concatenates the pieces: normal tokens with `'▁'` read as `' '`,
//! user-defined tokens as written, byte tokens as their byte; control,
//! unknown, unused and undefined tokens give nothing (llama.cpp's
//! `token_to_piece` without `special`). With `add_space_prefix`, the first
//! token (the second after a leading BOS) loses one leading space, the one
//! encoding put there, so that plain text round-trips, as SentencePiece's own
//! decoder does (llama.cpp's `llama_detokenize` keeps it after a BOS). Bytes
//! that are not valid UTF-8 (a character cut short) read as U+FFFD.
//!
//! Why not `tokenizers`' BPE, the usual conversion (merges derived from the
//! scores: every split of a token into two tokens is a merge, ranked by the
//! token's score, with byte fallback)? On Gemma 3 270M's vocabulary it gave
//! llama.cpp's ids for 2,300 plain-text strings, but it cannot be exact in
//! general, and it is slow to build:
//! - its merge order is a fixed rank per pair, so of two different pairs
//!   with equal scores it merges the same one first wherever they stand:
//!   with `ab` and `ba` scored alike, it gets one of `aba` and `bab` wrong
//!   (llama.cpp merges the leftmost pair: `ab a`, `ba b`);
//! - it turns a character outside the vocabulary into bytes before merging,
//!   where SentencePiece can still merge it with a neighbour into a token,
//!   and it makes the whole character the unknown token when one of its
//!   bytes has no byte token;
//! - its added-token split takes the leftmost-longest match over all tokens
//!   at once, not llama.cpp's one token at a time, longest first;
//! - for Gemma 3 (262,144 tokens) it derives 514,847 merges and takes about
//!   1 s to build (test profile), where the maps here take 0.11 to 0.3 s
//!   (0.11 to 0.18 s in release).
//!
//! Known difference from llama.cpp: its loader promotes some tokens to control
//! by their text (`</s>` in Gemma 3, typed user-defined, as an end of
//! generation), so that it decodes them as nothing; here the GGUF type
//! decides, and `</s>` decodes as written. Encoding is unaffected (with
//! specials parsed, both are matched as one id). llama.cpp's left- and
//! right-stripping attributes, set by model name (Phi-3, Jina), are not
//! applied.
//!
//! Invariants: every token text maps to its id (the first id when a text
//! repeats); every merge result is a vocabulary token, so only single
//! characters fall back to bytes; `decode` never fails for ids inside the
//! vocabulary.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::ops::Range;

use super::gguf_meta::{
    TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL, TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNKNOWN,
    TOKEN_TYPE_USER_DEFINED,
};

/// SentencePiece's mark for a space (U+2581, "▁").
const SPACE_MARK: char = '\u{2581}';

/// Options of a SentencePiece vocabulary that its tokens do not carry.
pub(super) struct SpmOptions {
    /// The BOS id (whether or not encoding adds it), which decoding skips
    /// over to find the start of the text.
    pub(super) bos: Option<u32>,
    /// The id of the unknown token, for bytes without a byte token.
    pub(super) unk: u32,
    /// Put a space before the text, and after every special token in it.
    pub(super) add_space_prefix: bool,
    /// Appended to every encoding (`tokenizer.ggml.add_eos_token`).
    pub(super) eos_appended: Option<u32>,
}

/// A SentencePiece BPE vocabulary ready to encode and decode (see the module
/// doc).
pub(super) struct Spm {
    /// Token text to id, every type included (merges may form any token).
    ids: HashMap<Box<str>, u32>,
    /// Score of each id; higher merges first.
    scores: Vec<f32>,
    /// Control, user-defined and unknown tokens with their ids, in the order
    /// they are cut out of the text: longest first, then by id.
    specials: Vec<(Box<str>, u32)>,
    /// What each id decodes to (empty for tokens left out).
    pieces: Vec<Box<[u8]>>,
    /// The token of each byte, for characters outside the vocabulary.
    /// (256 entries, boxed to keep [`super::Backend`] small.)
    byte_tokens: Box<[Option<u32>]>,
    options: SpmOptions,
}

/// Part of the text being encoded: a special token cut out, or text between.
enum Fragment {
    Special(u32),
    Text(Range<usize>),
}

/// One piece of a text fragment during merging: bytes `start..start + len` of
/// the escaped text, in a list linked by index; `len == 0` once merged into
/// its left neighbour.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbols `left` and `right` (adjacent when pushed)
/// into a token of score `score` spanning `len` bytes.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Bigram {
    /// The heap pops the highest score first, then the leftmost pair.
    /// (Scores are never NaN and -0.0 was read as 0.0, so `total_cmp` orders
    /// them as llama.cpp's `<` does.)
    fn cmp(&self, other: &Bigram) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Bigram) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Bigram) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

/// The byte a byte token's text `<0xXX>` names (two hex digits, as
/// SentencePiece writes them).
pub(super) fn byte_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl Spm {
    /// The vocabulary of `tokens`, with `scores` and GGUF `types` (one per
    /// token). Byte tokens must have `<0xXX>` texts ([`byte_value`]); the
    /// reader checks that first.
    pub(super) fn new(
        tokens: &[&str],
        scores: Vec<f32>,
        types: &[i64],
        options: SpmOptions,
    ) -> Spm {
        debug_assert_eq!(scores.len(), tokens.len(), "one score per token");
        let mut ids = HashMap::with_capacity(tokens.len());
        for (id, token) in (0u32..).zip(tokens) {
            ids.entry(Box::from(*token)).or_insert(id);
        }
        let mut specials: Vec<(Box<str>, u32)> = (0u32..)
            .zip(tokens.iter().zip(types))
            .filter(|(_, (token, kind))| {
                !token.is_empty()
                    && matches!(
                        **kind,
                        TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED | TOKEN_TYPE_UNKNOWN
                    )
            })
            .map(|(id, (token, _))| (Box::from(*token), id))
            .collect();
        specials.sort_by(|(a, a_id), (b, b_id)| b.len().cmp(&a.len()).then(a_id.cmp(b_id)));
        let pieces = tokens
            .iter()
            .zip(types)
            .map(|(token, &kind)| -> Box<[u8]> {
                match kind {
                    TOKEN_TYPE_NORMAL => token.replace(SPACE_MARK, " ").into_bytes().into(),
                    TOKEN_TYPE_USER_DEFINED => token.as_bytes().into(),
                    TOKEN_TYPE_BYTE => byte_value(token).into_iter().collect(),
                    _ => Box::default(),
                }
            })
            .collect();
        let byte_tokens = (0..=u8::MAX)
            .map(|byte| {
                ids.get(format!("<0x{byte:02X}>").as_str())
                    .or_else(|| {
                        byte.is_ascii()
                            .then(|| ids.get(char::from(byte).to_string().as_str()))
                            .flatten()
                    })
                    .copied()
            })
            .collect();
        Spm {
            ids,
            scores,
            specials,
            pieces,
            byte_tokens,
            options,
        }
    }

    /// Appends the ids of `text` to `ids` (see the module doc; BOS is the
    /// caller's).
    pub(super) fn encode(&self, text: &str, ids: &mut Vec<u32>) {
        let mut after_special = true;
        for fragment in self.partition(text) {
            match fragment {
                Fragment::Special(id) => {
                    ids.push(id);
                    after_special = true;
                }
                Fragment::Text(range) => {
                    let mut escaped = String::with_capacity(range.len() + 3);
                    if self.options.add_space_prefix && after_special {
                        escaped.push(SPACE_MARK);
                    }
                    escaped.extend(
                        text[range]
                            .chars()
                            .map(|c| if c == ' ' { SPACE_MARK } else { c }),
                    );
                    self.merge(&escaped, ids);
                    after_special = false;
                }
            }
        }
        ids.extend(self.options.eos_appended);
    }

    /// The text of `ids`, which the caller has checked are in the vocabulary
    /// (see the module doc).
    pub(super) fn decode(&self, ids: &[u32]) -> String {
        let start = match ids {
            [first, ..] if Some(*first) == self.options.bos => 1,
            _ => 0,
        };
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let piece = self.pieces.get(id as usize).map_or(&[][..], |p| &p[..]);
            if i == start && self.options.add_space_prefix {
                bytes.extend_from_slice(piece.strip_prefix(b" ").unwrap_or(piece));
            } else {
                bytes.extend_from_slice(piece);
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// `text` cut into special tokens and the text between them (step 1 of
    /// the module doc); no text fragment is empty.
    fn partition(&self, text: &str) -> Vec<Fragment> {
        let mut fragments = Vec::new();
        if text.is_empty() {
            return fragments;
        }
        fragments.push(Fragment::Text(0..text.len()));
        for (special, id) in &self.specials {
            if !text.contains(&**special) {
                continue;
            }
            let mut split = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(range) = fragment else {
                    split.push(fragment);
                    continue;
                };
                let mut start = range.start;
                for (at, _) in text[range.clone()].match_indices(&**special) {
                    let at = range.start + at;
                    if at > start {
                        split.push(Fragment::Text(start..at));
                    }
                    split.push(Fragment::Special(*id));
                    start = at + special.len();
                }
                if start < range.end {
                    split.push(Fragment::Text(start..range.end));
                }
            }
            fragments = split;
        }
        fragments
    }

    /// Appends the ids of `text` (escaped, one fragment) to `ids`: steps 3
    /// and 4 of the module doc.
    fn merge(&self, text: &str, ids: &mut Vec<u32>) {
        let n = text.chars().count();
        let mut symbols: Vec<Symbol> = text
            .char_indices()
            .enumerate()
            .map(|(i, (start, c))| Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
            })
            .collect();
        let mut queue = BinaryHeap::new();
        for right in 1..n {
            self.push_bigram(text, &symbols, right - 1, right, &mut queue);
        }
        while let Some(bigram) = queue.pop() {
            let (left, right) = (symbols[bigram.left], symbols[bigram.right]);
            // A pair one of whose symbols has merged since is stale.
            if left.len == 0 || right.len == 0 || left.len + right.len != bigram.len {
                continue;
            }
            symbols[bigram.left].len += right.len;
            symbols[bigram.right].len = 0;
            symbols[bigram.left].next = right.next;
            if let Some(next) = right.next {
                symbols[next].prev = Some(bigram.left);
                self.push_bigram(text, &symbols, bigram.left, next, &mut queue);
            }
            if let Some(prev) = left.prev {
                self.push_bigram(text, &symbols, prev, bigram.left, &mut queue);
            }
        }
        let mut at = (n > 0).then_some(0);
        while let Some(i) = at {
            let symbol = symbols[i];
            let piece = &text[symbol.start..symbol.start + symbol.len];
            match self.ids.get(piece) {
                Some(&id) => ids.push(id),
                None => ids.extend(piece.bytes().map(|b| self.byte_token(b))),
            }
            at = symbol.next;
        }
    }

    /// Queues the merge of adjacent symbols `left` and `right` when their
    /// text together is a token.
    fn push_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let start = symbols[left].start;
        let len = symbols[left].len + symbols[right].len;
        if let Some(&id) = self.ids.get(&text[start..start + len]) {
            queue.push(Bigram {
                score: self.scores[id as usize],
                left,
                right,
                len,
            });
        }
    }

    /// The token of `byte` for a character outside the vocabulary: its byte
    /// token, else the unknown token.
    fn byte_token(&self, byte: u8) -> u32 {
        // 256 entries: every byte indexes one.
        self.byte_tokens[usize::from(byte)].unwrap_or(self.options.unk)
    }
}
