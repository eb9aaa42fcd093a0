//! Where the real-model files are: SmolLM2-135M's GGUF, all-MiniLM-L6-v2's
//! Hugging Face folder and Gemma 3 270M's GGUF, installed by
//! `scripts/setup.sh` under `.models/`.
//!
//! Each path comes from its environment variable when set, else from the
//! `NAME=PATH` lines of `.models/paths.env` in the workspace root (which
//! `scripts/setup.sh` writes). `None` means the model is not installed: tests
//! print a skip line and return. Under `GGPLAN_REQUIRE_MODELS=1` (set by
//! `scripts/test.sh`, so in CI) a missing model is a failure instead: a test
//! that would skip panics naming the variable, so CI cannot pass by skipping.

use crate::workspace_root;
use std::path::PathBuf;

/// Variable (and `paths.env` key) naming SmolLM2-135M-Instruct's Q4_1 GGUF file.
pub const SMOLLM2_GGUF: &str = "GGPLAN_SMOLLM2_GGUF";
/// Variable (and `paths.env` key) naming all-MiniLM-L6-v2's model folder
/// (config.json, model.safetensors, tokenizer.json).
pub const MINILM_DIR: &str = "GGPLAN_MINILM_DIR";

/// Variable (and `paths.env` key) naming Gemma 3 270M's Q4_K_M GGUF file.
pub const GEMMA3_GGUF: &str = "GGPLAN_GEMMA3_GGUF";

/// The variable that turns a missing model into a test failure.
pub const REQUIRE_MODELS: &str = "GGPLAN_REQUIRE_MODELS";

/// SmolLM2-135M-Instruct's GGUF file, when installed (see the module doc for
/// [`REQUIRE_MODELS`]).
pub fn smollm2_gguf() -> Option<PathBuf> {
    required(SMOLLM2_GGUF, locate(SMOLLM2_GGUF).filter(|p| p.is_file()))
}

/// Gemma 3 270M's GGUF file, when installed (see the module doc for
/// [`REQUIRE_MODELS`]).
pub fn gemma3_gguf() -> Option<PathBuf> {
    required(GEMMA3_GGUF, locate(GEMMA3_GGUF).filter(|p| p.is_file()))
}

/// all-MiniLM-L6-v2's model folder, when installed (see the module doc for
/// [`REQUIRE_MODELS`]).
pub fn minilm_dir() -> Option<PathBuf> {
    required(
        MINILM_DIR,
        locate(MINILM_DIR).filter(|p| p.join("config.json").is_file()),
    )
}

/// `found`, or a panic naming `key` when models are required.
fn required(key: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    let require = std::env::var_os(REQUIRE_MODELS).is_some_and(|v| v == "1");
    check_required(key, found, require)
}

fn check_required(key: &str, found: Option<PathBuf>, require: bool) -> Option<PathBuf> {
    if found.is_none() && require {
        panic!(
            "{REQUIRE_MODELS}=1 but the model of {key} is not installed (neither the variable \
             nor .models/paths.env names an existing file): run scripts/setup.sh"
        );
    }
    found
}

/// The path under `key`: the environment variable, else `.models/paths.env`.
fn locate(key: &str) -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(key).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(v));
    }
    let env = std::fs::read_to_string(workspace_root().join(".models/paths.env")).ok()?;
    env.lines()
        .filter_map(|line| line.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| PathBuf::from(v.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_skips_unless_models_are_required() {
        assert_eq!(check_required(SMOLLM2_GGUF, None, false), None);
        let here = Some(PathBuf::from("model.gguf"));
        assert_eq!(check_required(SMOLLM2_GGUF, here.clone(), true), here);
        let required = std::panic::catch_unwind(|| check_required(MINILM_DIR, None, true));
        let message = *required.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("GGPLAN_MINILM_DIR") && message.contains("setup.sh"));
    }
}
