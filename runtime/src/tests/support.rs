//! What several runtime tests share.

use ir::DType;
use ir::files::gguf_write::{GgufTensorData, write_gguf};

/// A GGUF file at a fresh temporary path holding `tensors`; removed on drop.
pub struct TempGguf(pub std::path::PathBuf);

impl TempGguf {
    /// Writes the file; `stem` makes its name unique within this process.
    pub fn new(stem: &str, tensors: &[(&str, DType, [i64; 4], &[u8])]) -> TempGguf {
        let path = std::env::temp_dir().join(format!(
            "ggplan-runtime-test-{}-{stem}.gguf",
            std::process::id()
        ));
        let shapes: Vec<Vec<u64>> = tensors
            .iter()
            .map(|t| t.2.iter().map(|&n| n as u64).collect())
            .collect();
        let data: Vec<GgufTensorData<'_>> = tensors
            .iter()
            .zip(&shapes)
            .map(|(t, ne)| GgufTensorData {
                name: t.0,
                dtype: t.1,
                ne,
                data: t.3,
            })
            .collect();
        write_gguf(&path, &[], &data).unwrap();
        TempGguf(path)
    }
}

impl Drop for TempGguf {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
