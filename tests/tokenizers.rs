//! The tokenizers on the real models, against the references in
//! `../shared/references/`:
//!
//! - SmolLM2-135M-Instruct's GGUF tokenizer (byte-level BPE, pre-tokenizer
//!   `smollm`): the reference prompt gives exactly its 16 token ids; tricky
//!   strings round-trip; streaming decoding reproduces text with emoji exactly
//!   and never emits a replacement character;
//! - all-MiniLM-L6-v2's `tokenizer.json` (WordPiece): both reference sentences
//!   give exactly their ids, `[CLS]` and `[SEP]` included.
//!
//! Without the model files (installed by `scripts/setup.sh`) each test prints
//! a skip line and passes.

use ggplan_tests::models::{minilm_dir, smollm2_gguf};
use ggplan_tests::workspace_root;
use ir::files::gguf::GgufFile;
use models::{StreamDecoder, Tokenizer};
use serde_json::Value;
use std::path::Path;

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("token ids are an array")
        .iter()
        .map(|t| u32::try_from(t.as_u64().expect("token ids are integers")).unwrap())
        .collect()
}

fn smollm2() -> Option<Tokenizer> {
    let Some(path) = smollm2_gguf() else {
        eprintln!("skipped: SmolLM2 GGUF not found (GGPLAN_SMOLLM2_GGUF); run scripts/setup.sh");
        return None;
    };
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    Some(Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}")))
}

#[test]
fn smollm2_encodes_the_reference_prompt_exactly() {
    let Some(tok) = smollm2() else { return };
    let reference =
        read_json(&workspace_root().join("../shared/references/smollm2/top20_torch_fp64.json"));
    let prompt = reference["prompt_text_prefix"].as_str().unwrap();
    let want = ids(&reference["token_ids"]);
    assert_eq!(want.len(), 16);
    assert_eq!(tok.encode(prompt).unwrap(), want);
    assert_eq!(tok.decode(&want).unwrap(), prompt);
    for (id, piece) in want
        .iter()
        .zip(reference["token_pieces"].as_array().unwrap())
    {
        assert_eq!(tok.decode(&[*id]).unwrap(), piece.as_str().unwrap());
    }
    assert_eq!(tok.vocab_size(), 49152);
    assert!(
        tok.eos_id()
            .is_some_and(|id| (id as usize) < tok.vocab_size())
    );
}

const TRICKY: &[&str] = &[
    "Hello, world!",
    "naïve café — Ελληνικά, 日本語のテキスト, русский текст",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇫🇷 and ✨sparkles✨",
    "digits 1234567890, 3.14159 and 2024-06-01",
    "multiple   spaces\tand\ttabs  ",
    "new\nlines\n\n\nand\r\nCRLF\n",
    "  leading and trailing spaces  ",
    "code: fn main() { println!(\"{}\", x[0] >= 1); }",
    "I'm sure you'll see they've done it",
];

#[test]
fn smollm2_round_trips_tricky_strings() {
    let Some(tok) = smollm2() else { return };
    for s in TRICKY {
        let ids = tok.encode(s).unwrap();
        assert!(!ids.is_empty(), "{s:?}");
        assert_eq!(tok.decode(&ids).unwrap(), *s, "{ids:?}");
    }
    // Digits are tokenized one by one (the smollm pre-tokenizer).
    assert_eq!(tok.encode("2024").unwrap().len(), 4);
}

#[test]
fn smollm2_stream_decoding_reproduces_emoji_text() {
    let Some(tok) = smollm2() else { return };
    for text in TRICKY {
        let ids = tok.encode(text).unwrap();
        let mut stream = StreamDecoder::new(&tok);
        let mut out = String::new();
        for &id in &ids {
            let piece = stream.push(id).unwrap();
            assert!(
                !piece.contains(char::REPLACEMENT_CHARACTER),
                "{text:?}: {piece:?}"
            );
            out.push_str(&piece);
        }
        out.push_str(&stream.finish());
        assert_eq!(out, *text);
    }
    // Some emoji span several tokens, so something must have been held back.
    let ids = tok.encode("🇫🇷👨‍👩‍👧").unwrap();
    let mut stream = StreamDecoder::new(&tok);
    let held = ids
        .iter()
        .filter(|&&id| stream.push(id).unwrap().is_empty())
        .count();
    assert!(held > 0, "{ids:?}");
}

#[test]
fn minilm_encodes_the_reference_sentences_exactly() {
    let Some(dir) = minilm_dir() else {
        eprintln!("skipped: all-MiniLM-L6-v2 not found (GGPLAN_MINILM_DIR); run scripts/setup.sh");
        return;
    };
    let tok =
        Tokenizer::from_hf_file(&dir.join("tokenizer.json")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.vocab_size(), 30522);
    let reference = read_json(&workspace_root().join("../shared/references/minilm/reference.json"));
    let sentences = reference["sentences"].as_array().unwrap();
    let all_ids = reference["token_ids"].as_array().unwrap();
    assert_eq!(sentences.len(), 2);
    for (sentence, want) in sentences.iter().zip(all_ids) {
        let sentence = sentence.as_str().unwrap();
        let want = ids(want);
        assert_eq!(tok.encode(sentence).unwrap(), want, "{sentence:?}");
        // Lower-cased, with [CLS]/[SEP] left out.
        assert_eq!(tok.decode(&want).unwrap(), sentence.to_lowercase());
        // Streaming gives the same text, spaces included.
        let mut stream = StreamDecoder::new(&tok);
        let mut out: String = want.iter().map(|&id| stream.push(id).unwrap()).collect();
        out.push_str(&stream.finish());
        assert_eq!(out, sentence.to_lowercase());
    }
}
