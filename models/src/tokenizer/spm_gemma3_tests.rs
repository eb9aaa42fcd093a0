//! Gemma 3 270M's real SentencePiece vocabulary (262,144 tokens, scores,
//! byte fallback, 6,249 control and 165 user-defined tokens, no space prefix)
//! against llama.cpp's own ids. Runs when the model is installed (see
//! [`gemma3_gguf`]).

use std::path::PathBuf;

use super::*;
use ir::files::gguf::GgufFile;

/// Variable (and `.models/paths.env` key) naming Gemma 3 270M's GGUF file.
const GEMMA3_GGUF: &str = "GGPLAN_GEMMA3_GGUF";
/// The variable that turns a missing model into a test failure.
const REQUIRE_MODELS: &str = "GGPLAN_REQUIRE_MODELS";

/// Gemma 3 270M's GGUF file: the variable, else its line in the workspace's
/// `.models/paths.env` (written by `scripts/setup.sh`), as the workspace
/// tests' `ggplan_tests::models::gemma3_gguf` finds it (this crate cannot
/// depend on that one). `None` when it is not installed, a panic instead
/// under `GGPLAN_REQUIRE_MODELS=1`.
fn gemma3_gguf() -> Option<PathBuf> {
    let from_env = std::env::var_os(GEMMA3_GGUF)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let found = from_env
        .or_else(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let env = std::fs::read_to_string(root.join(".models/paths.env")).ok()?;
            env.lines()
                .filter_map(|line| line.split_once('='))
                .find(|(k, _)| k.trim() == GEMMA3_GGUF)
                .map(|(_, v)| PathBuf::from(v.trim()))
        })
        .filter(|p| p.is_file());
    let require = std::env::var_os(REQUIRE_MODELS).is_some_and(|v| v == "1");
    if found.is_none() && require {
        panic!(
            "{REQUIRE_MODELS}=1 but the model of {GEMMA3_GGUF} is not installed (neither the \
             variable nor .models/paths.env names an existing file): run scripts/setup.sh"
        );
    }
    found
}

/// Prompts and llama.cpp's ids for them (BOS = 2 first, as Gemma 3's
/// `add_bos_token` asks), measured with the vendored llama.cpp:
/// `.rpc/bin/llama-capture $GGPLAN_GEMMA3_GGUF out.json --prompt TEXT`
/// (its `tokens`) for every non-empty prompt. llama-capture tokenizes with
/// `parse_special` off, so for the empty prompt (which it refuses) and the
/// two with control tokens in the text, the ids are from a ten-line harness
/// linking the same `libllama.a` that loads the model `vocab_only` and calls
/// `llama_tokenize(vocab, text, len, ids, n, /*add_special*/ true,
/// /*parse_special*/ true)`, as `generate` parses specials; for the other 16
/// prompts that harness gives llama-capture's ids too.
const LLAMA_CPP_IDS: &[(&str, &[u32])] = &[
    ("Hello world", &[2, 9259, 1902]),
    (
        "The quick brown fox jumps over the lazy dog.",
        &[
            2, 818, 3823, 8864, 37423, 38167, 1024, 506, 31770, 4799, 236761,
        ],
    ),
    (" leading space", &[2, 5830, 2557]),
    ("trailing space ", &[2, 136697, 2557, 236743]),
    (
        "multiple   spaces  between    words",
        &[2, 43819, 139, 35220, 138, 19195, 140, 8992],
    ),
    ("   ", &[2, 139]),
    (
        "line one\nline two\n\nthree\ttab\t\tdouble tab\r\n",
        &[
            2, 1257, 886, 107, 1257, 1156, 108, 19891, 255968, 4823, 255969, 7902, 6937, 251, 107,
        ],
    ),
    (
        "digits 12345 and 2024-06-01, pi = 3.14159, 1,000,000",
        &[
            2, 67161, 236743, 236770, 236778, 236800, 236812, 236810, 532, 236743, 236778, 236771,
            236778, 236812, 236772, 236771, 236825, 236772, 236771, 236770, 236764, 4604, 578,
            236743, 236800, 236761, 236770, 236812, 236770, 236810, 236819, 236764, 236743, 236770,
            236764, 236771, 236771, 236771, 236764, 236771, 236771, 236771,
        ],
    ),
    (
        "Punctuation: (a), [b], {c}; \"quoted\" 'single' -- ... !? #hash @at $5 100% a&b",
        &[
            2, 236791, 23733, 3145, 236787, 568, 236746, 779, 870, 236763, 1604, 642, 236755, 3796,
            623, 148758, 236775, 756, 18999, 236789, 2617, 3729, 1717, 236881, 997, 11240, 1392,
            502, 609, 236810, 236743, 236770, 236771, 236771, 236908, 496, 236880, 236763,
        ],
    ),
    (
        "naïve café, Ελληνικά, русский, Straße",
        &[
            2, 1789, 238527, 560, 33443, 236764, 23883, 109959, 42220, 236764, 170362, 236764,
            80176,
        ],
    ),
    (
        "日本語の文章と中文句子。한국어도 있습니다.",
        &[
            2, 94951, 236945, 30886, 237032, 55041, 161832, 236924, 114216, 155318, 27028, 236761,
        ],
    ),
    (
        "emoji 😀👍🏽 family 👨\u{200d}👩\u{200d}👧 flag 🇫🇷",
        &[
            2, 67906, 163543, 240493, 242713, 2523, 236743, 243874, 237243, 243767, 237243, 244814,
            8134, 236743, 246598, 242644,
        ],
    ),
    (
        "outside the vocabulary: 🫨 𓀀 𠀀",
        &[
            2, 71681, 506, 38038, 236787, 236743, 478, 397, 409, 406, 236743, 478, 385, 366, 366,
            236743, 478, 398, 366, 366,
        ],
    ),
    (
        "fn main() {\n    println!(\"hi\");\n}\n",
        &[
            2, 15059, 1689, 825, 642, 107, 140, 4629, 36492, 2202, 1443, 107, 236783, 107,
        ],
    ),
    (
        "<b>bold</b> and <span>html</span>",
        &[2, 200, 15640, 209, 532, 236743, 220, 3185, 231],
    ),
    (
        "SentencePiece merges the highest-scoring pair first; internationalization and counterrevolutionary are long words.",
        &[
            2, 138895, 74394, 130450, 506, 7310, 236772, 101246, 6727, 1171, 236793, 5251, 1854,
            532, 6651, 226156, 659, 1440, 4171, 236761,
        ],
    ),
    ("", &[2]),
    (
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        &[2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107],
    ),
    (
        "<bos>text after a written BOS",
        &[2, 2, 1005, 1308, 496, 5267, 161375],
    ),
];

/// Prompts holding control tokens, which decoding leaves out.
fn has_control_tokens(prompt: &str) -> bool {
    ["<start_of_turn>", "<end_of_turn>", "<bos>"]
        .iter()
        .any(|t| prompt.contains(t))
}

#[test]
fn gemma3_ids_equal_llama_cpps_and_decode_round_trips() {
    let Some(path) = gemma3_gguf() else {
        eprintln!("skipped: Gemma 3 270M is not installed ({GEMMA3_GGUF}, scripts/setup.sh)");
        return;
    };
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let start = std::time::Instant::now();
    let tok = Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("Gemma 3 tokenizer built in {:?}", start.elapsed());
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(tok.eos_id(), Some(1));
    // A chat turn ends with `<end_of_turn>` (106), not EOS: llama.cpp stops at both.
    assert_eq!(tok.end_of_generation_ids(), [1, 106]);

    let mut wrong = Vec::new();
    for &(prompt, want) in LLAMA_CPP_IDS {
        let ids = tok.encode(prompt).unwrap();
        if ids != want {
            wrong.push(format!("{prompt:?}:\n  ours  {ids:?}\n  llama {want:?}"));
            continue;
        }
        if has_control_tokens(prompt) {
            continue;
        }
        assert_eq!(tok.decode(&ids).unwrap(), prompt, "{ids:?}");
        // Streamed one id at a time, the same text.
        let mut stream = StreamDecoder::new(&tok);
        let mut streamed = String::new();
        for &id in &ids {
            streamed.push_str(&stream.push(id).unwrap());
        }
        streamed.push_str(&stream.finish());
        assert_eq!(streamed, prompt);
    }
    assert!(
        wrong.is_empty(),
        "{} of {} prompts differ from llama.cpp:\n{}",
        wrong.len(),
        LLAMA_CPP_IDS.len(),
        wrong.join("\n")
    );
    // Control tokens are left out of decoded text; the rest is as written.
    let chat = tok
        .encode("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")
        .unwrap();
    assert_eq!(tok.decode(&chat).unwrap(), "user\nHi\nmodel\n");
}
