//! Where the real-model files are: SmolLM2-135M's GGUF and all-MiniLM-L6-v2's
//! Hugging Face folder, installed by `scripts/setup.sh` under `.models/`.
//!
//! Each path comes from its environment variable when set, else from the
//! `NAME=PATH` lines of `.models/paths.env` in the workspace root (which
//! `scripts/setup.sh` writes). `None` means the model is not installed: tests
//! print a skip line and return.

use crate::workspace_root;
use std::path::PathBuf;

/// Variable (and `paths.env` key) naming SmolLM2-135M-Instruct's Q4_1 GGUF file.
pub const SMOLLM2_GGUF: &str = "GGPLAN_SMOLLM2_GGUF";
/// Variable (and `paths.env` key) naming all-MiniLM-L6-v2's model folder
/// (config.json, model.safetensors, tokenizer.json).
pub const MINILM_DIR: &str = "GGPLAN_MINILM_DIR";

/// SmolLM2-135M-Instruct's GGUF file, when installed.
pub fn smollm2_gguf() -> Option<PathBuf> {
    locate(SMOLLM2_GGUF).filter(|p| p.is_file())
}

/// all-MiniLM-L6-v2's model folder, when installed.
pub fn minilm_dir() -> Option<PathBuf> {
    locate(MINILM_DIR).filter(|p| p.join("config.json").is_file())
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
