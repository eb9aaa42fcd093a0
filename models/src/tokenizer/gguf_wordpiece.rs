//! The WordPiece tokenizer stored in a GGUF file's metadata
//! (`tokenizer.ggml.model == "bert"`, written by llama.cpp's converter from a
//! BERT tokenizer), rebuilt with the `tokenizers` crate the way a BERT
//! `tokenizer.json` (all-MiniLM-L6-v2's) describes it: the BERT normaliser
//! (clean text, spaces around CJK characters, lower-casing, accents stripped),
//! the BERT pre-tokenizer (split on whitespace and punctuation), WordPiece
//! with `##` continuations and the unknown token, and `[CLS] ... [SEP]`
//! around every sequence.
//!
//! Keys read: `tokenizer.ggml.tokens`, `.token_type` (optional: 3 = control,
//! 4 = user-defined), `.unknown_token_id`, `.cls_token_id` (else
//! `.bos_token_id`, where newer converters put `[CLS]`),
//! `.seperator_token_id` (llama.cpp's spelling; else `.eos_token_id`) and
//! `.eos_token_id` (optional). `.pre` is not read: llama.cpp's WordPiece
//! splits words by fixed rules, whatever it says.
//!
//! The phantom-space vocabulary: the converter rewrites every non-control
//! token, `##piece` (a continuation) to `piece` and `word` (a word start) to
//! `▁word` (U+2581); control tokens (`[CLS]`, `[SEP]`, `[PAD]`, `[MASK]`,
//! `[UNK]`) are kept. [`unphantom`] undoes it. The one ambiguity, a
//! continuation whose own text starts with `▁`, does not occur in BERT
//! vocabularies.
//!
//! GGUF does not record the normaliser's options: lower-casing is always on,
//! as in llama.cpp's own WordPiece tokenizer.
//!
//! Invariants of a returned tokenizer: every token string maps to its id (the
//! first id when a string repeats); control tokens are special (matched in
//! input text as written, left out of decoded text); user-defined tokens are
//! matched in input text; the `[CLS]`, `[SEP]` and unknown ids are inside the
//! vocabulary, and `encode` puts `[CLS]` first and `[SEP]` last.

use ir::files::TensorSource;
use ir::files::gguf::GgufFile;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
// WordPiece's own vocabulary alias is private; BPE's is the same map type.
use tokenizers::models::bpe::Vocab;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;

use super::gguf_meta::{TOKEN_TYPE_CONTROL, TokenizerMeta, add_typed_tokens};
use super::{Backend, Tokenizer, TokenizerError};

/// The word-start marker of llama.cpp's phantom-space vocabularies (U+2581).
const PHANTOM_SPACE: &str = "\u{2581}";
/// WordPiece's continuation prefix.
const CONTINUATION: &str = "##";

/// Reads the WordPiece tokenizer of `file` (see the module doc).
pub(super) fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
    let path = file.path().to_path_buf();
    let meta = TokenizerMeta::new(file);

    let stored = meta.strings("tokenizer.ggml.tokens")?;
    if stored.is_empty() {
        return Err(meta.problem("tokenizer.ggml.tokens", "the vocabulary is empty".into()));
    }
    let n = stored.len();
    let types = meta.token_types(n)?;
    let tokens: Vec<String> = stored
        .iter()
        .zip(&types)
        .map(|(token, &kind)| unphantom(token, kind))
        .collect();

    let required = |key: &'static str, fallback: Option<&'static str>| {
        let id = match meta.token_id(key, n)? {
            Some(id) => Some(id),
            None => match fallback {
                Some(other) => meta.token_id(other, n)?,
                None => None,
            },
        };
        id.ok_or_else(|| {
            let also = fallback.map_or(String::new(), |f| format!(" (and so is {f})"));
            meta.problem(
                key,
                format!("missing{also}; a WordPiece tokenizer needs it"),
            )
        })
    };
    let unk = required("tokenizer.ggml.unknown_token_id", None)?;
    let cls = required(
        "tokenizer.ggml.cls_token_id",
        Some("tokenizer.ggml.bos_token_id"),
    )?;
    let sep = required(
        "tokenizer.ggml.seperator_token_id",
        Some("tokenizer.ggml.eos_token_id"),
    )?;
    let eos = meta.token_id("tokenizer.ggml.eos_token_id", n)?;
    let token = |id: u32| tokens[id as usize].clone();

    let mut vocab = Vocab::default();
    for (id, t) in (0u32..).zip(&tokens) {
        vocab.entry(t.clone()).or_insert(id);
    }
    let build_error = |message: String| TokenizerError::Build {
        file: path.clone(),
        message,
    };
    let model = WordPiece::builder()
        .vocab(vocab)
        .unk_token(token(unk))
        .continuing_subword_prefix(CONTINUATION.into())
        .build()
        .map_err(|e| build_error(e.to_string()))?;
    let mut inner = tokenizers::Tokenizer::new(model);
    inner.with_normalizer(Some(BertNormalizer::new(true, true, None, true)));
    inner.with_pre_tokenizer(Some(BertPreTokenizer));
    inner.with_post_processor(Some(BertProcessing::new(
        (token(sep), sep),
        (token(cls), cls),
    )));
    inner.with_decoder(Some(WordPieceDecoder::new(CONTINUATION.into(), true)));

    add_typed_tokens(&mut inner, &tokens, &types);

    Ok(Tokenizer {
        backend: Backend::Hf {
            inner: Box::new(inner),
            add_special_tokens: true,
        },
        source: path,
        bos: None,
        eos,
        // An encoder: nothing is generated past its separator.
        end_of_generation: eos.into_iter().collect(),
        vocab_size: n,
    })
}

/// The WordPiece spelling of a token stored in phantom-space form with GGUF
/// token type `kind`: control tokens as stored, `▁word` as `word`, any other
/// `piece` as `##piece`.
pub(super) fn unphantom(stored: &str, kind: i64) -> String {
    if kind == TOKEN_TYPE_CONTROL {
        return stored.to_owned();
    }
    match stored.strip_prefix(PHANTOM_SPACE) {
        Some(word) => word.to_owned(),
        None => format!("{CONTINUATION}{stored}"),
    }
}
