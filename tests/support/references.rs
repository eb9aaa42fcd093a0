//! The reference outputs in `../shared/references/` (PyTorch fp64 and
//! llama.cpp runs of the real models) and small helpers to read them.

use crate::workspace_root;
use ir::files::npy::{NpyData, read_npy};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The references folder.
pub fn references() -> PathBuf {
    workspace_root().join("../shared/references")
}

/// A JSON file.
pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A `.npy` array as (shape, f64 values in row-major order).
pub fn read_npy_f64(path: &Path) -> (Vec<u64>, Vec<f64>) {
    let a = read_npy(path).unwrap_or_else(|e| panic!("{e}"));
    let values = match a.data {
        NpyData::F32(v) => v.into_iter().map(f64::from).collect(),
        NpyData::F64(v) => v,
        other => panic!("{}: unexpected dtype {}", path.display(), other.descr()),
    };
    (a.shape, values)
}

/// The prompt of llama.cpp's SmolLM2 greedy reference run.
pub const SMOLLM2_PROMPT: &str = "Once upon a time, in a small village by the sea, there lived a";

/// llama.cpp's 32-token greedy continuation of [`SMOLLM2_PROMPT`] on
/// SmolLM2's dequantized F32 weights (`smollm2/greedy32_llamacpp_f32.json`).
pub fn smollm2_greedy32() -> Vec<u32> {
    let greedy = read_json(&references().join("smollm2/greedy32_llamacpp_f32.json"));
    token_ids(&greedy["generated_ids"])
        .into_iter()
        .map(|t| t as u32)
        .collect()
}

/// A JSON array of token ids.
pub fn token_ids(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("token ids are an array")
        .iter()
        .map(|t| t.as_i64().expect("token ids are integers"))
        .collect()
}

/// Index of the first largest value.
pub fn argmax(row: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}
