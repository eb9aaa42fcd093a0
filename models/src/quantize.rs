//! Requantizing a GGUF file: every weight matrix re-encoded in a target format,
//! everything else copied.
//!
//! [`plan_quantization`] decides each tensor's output type from the input's
//! names and shapes alone; [`quantize_gguf`] applies that plan (dequantize each
//! source row with `kernels::quant::dequantize_row`, encode it with
//! `quantize_row`) and writes the result with [`ir::files::gguf_write`].
//!
//! Rules, per input tensor:
//! - a tensor of 2 or more dimensions whose name ends in `.weight`, stored as a
//!   float or quantized type, gets the target type (below) when `ne0` is a whole
//!   number of that type's blocks; when the target type equals the stored type
//!   its bytes are copied unchanged;
//! - every other tensor (norms, biases, 1-D tensors, I32 tensors, rows that are
//!   not a whole number of blocks) keeps its type and bytes;
//! - metadata is copied, with `general.file_type` set to llama.cpp's number for
//!   the target ([`QuantType::file_type`]) and `general.quantization_version`
//!   (2) added when the input lacks it.
//!
//! `q4_k_m` follows llama.cpp's Q4_K_M mix: Q6_K for the output head
//! (`output.weight`, or `token_embd.weight` when the model has no
//! `output.weight` and ties the two), Q6_K for `attn_v` and `ffn_down` in the
//! layers where llama.cpp "uses more bits" (layer `i` of `n`: `i < n/8`, or
//! `i >= 7n/8`, or `(i - n/8) % 3 == 2`), Q4_K for everything else.
//!
//! Fallback: K-quants need `ne0` to be a multiple of 256. Where it is not (as
//! SmolLM2's 576), the tensor takes llama.cpp's fallback type: Q5_0 for Q4_K,
//! Q5_1 for Q5_K and Q8_0 for Q6_K (all need only a multiple of 32). Each
//! fallback is recorded in [`TensorPlan::wanted`] and counted by
//! [`QuantizeSummary::fallbacks`], so callers can say so.
//!
//! Invariant: the output holds the input's tensors in the input's order, with
//! the same names and shapes; only types and bytes change.

use std::path::Path;

use ir::DType;
use ir::files::gguf::{GgufFile, GgufValue};
use ir::files::gguf_write::{GgufTensorData, write_gguf};
use ir::files::{FileError, TensorSource};
use kernels::quant::{dequantize_row, quantize_row};

/// The output formats `ggplan quantize --type` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum QuantType {
    /// Every weight matrix Q4_0.
    Q4_0,
    /// Every weight matrix Q4_1.
    Q4_1,
    /// Every weight matrix Q8_0.
    Q8_0,
    /// Every weight matrix Q5_0.
    Q5_0,
    /// Every weight matrix Q5_1.
    Q5_1,
    /// Every weight matrix Q4_K (llama.cpp's Q4_K_S file type).
    Q4K,
    /// Every weight matrix Q5_K (llama.cpp's Q5_K_S file type).
    Q5K,
    /// Every weight matrix Q6_K.
    Q6K,
    /// llama.cpp's Q4_K_M mix (see the module doc).
    Q4KM,
}

impl QuantType {
    /// Every type, in the order `--help` lists them.
    pub const ALL: [QuantType; 9] = [
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
        QuantType::Q4K,
        QuantType::Q5K,
        QuantType::Q6K,
        QuantType::Q4KM,
    ];

    /// The name on the command line (`"q4_k_m"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "q4_0",
            QuantType::Q4_1 => "q4_1",
            QuantType::Q8_0 => "q8_0",
            QuantType::Q5_0 => "q5_0",
            QuantType::Q5_1 => "q5_1",
            QuantType::Q4K => "q4_k",
            QuantType::Q5K => "q5_k",
            QuantType::Q6K => "q6_k",
            QuantType::Q4KM => "q4_k_m",
        }
    }

    /// The type called `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<QuantType> {
        let name = name.to_ascii_lowercase();
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// llama.cpp's `general.file_type` number (`LLAMA_FTYPE_MOSTLY_*`); plain
    /// `q4_k` and `q5_k` are its `_S` variants.
    pub fn file_type(self) -> u32 {
        match self {
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q8_0 => 7,
            QuantType::Q5_0 => 8,
            QuantType::Q5_1 => 9,
            QuantType::Q4K => 14,
            QuantType::Q5K => 16,
            QuantType::Q6K => 18,
            QuantType::Q4KM => 15,
        }
    }

    /// The type of most weight matrices.
    fn base(self) -> DType {
        match self {
            QuantType::Q4_0 => DType::Q4_0,
            QuantType::Q4_1 => DType::Q4_1,
            QuantType::Q8_0 => DType::Q8_0,
            QuantType::Q5_0 => DType::Q5_0,
            QuantType::Q5_1 => DType::Q5_1,
            QuantType::Q4K | QuantType::Q4KM => DType::Q4_K,
            QuantType::Q5K => DType::Q5_K,
            QuantType::Q6K => DType::Q6_K,
        }
    }
}

/// What happens to one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// The tensor's name.
    pub name: String,
    /// Its type in the input.
    pub from: DType,
    /// Its type in the output.
    pub to: DType,
    /// The type the rules asked for when a fallback replaced it (a K-quant on
    /// a row that is not a whole number of 256-value blocks).
    pub wanted: Option<DType>,
}

impl TensorPlan {
    /// Whether the bytes are re-encoded (rather than copied).
    pub fn requantized(&self) -> bool {
        self.from != self.to
    }
}

/// What [`quantize_gguf`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantizeSummary {
    /// One entry per tensor, in file order.
    pub tensors: Vec<TensorPlan>,
    /// Bytes of tensor data read.
    pub tensor_bytes_in: u64,
    /// Bytes of tensor data written.
    pub tensor_bytes_out: u64,
    /// Size of the input file.
    pub file_bytes_in: u64,
    /// Size of the output file.
    pub file_bytes_out: u64,
}

impl QuantizeSummary {
    /// Tensors per output type, in [`DType`] order.
    pub fn count_by_type(&self) -> Vec<(DType, usize)> {
        count(self.tensors.iter().map(|t| t.to))
    }

    /// Tensors whose wanted type fell back, per wanted type (in [`DType`]
    /// order), with the type used instead.
    pub fn fallbacks(&self) -> Vec<(DType, DType, usize)> {
        let mut out: Vec<(DType, DType, usize)> = Vec::new();
        for t in &self.tensors {
            let Some(wanted) = t.wanted else { continue };
            match out.iter_mut().find(|(w, u, _)| *w == wanted && *u == t.to) {
                Some(entry) => entry.2 += 1,
                None => out.push((wanted, t.to, 1)),
            }
        }
        out.sort();
        out
    }
}

/// Occurrences of each dtype, sorted by dtype.
fn count(dtypes: impl Iterator<Item = DType>) -> Vec<(DType, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for d in dtypes {
        *counts.entry(d).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

/// Decides every tensor's output type (see the module doc), in file order.
pub fn plan_quantization(file: &GgufFile, target: QuantType) -> Vec<TensorPlan> {
    let infos = file.tensor_infos();
    let has_output = infos.iter().any(|t| t.name == "output.weight");
    let layers_of = |suffix: &str| {
        infos
            .iter()
            .filter(|t| layer_of(&t.name, suffix).is_some())
            .count()
    };
    let n_attn_v = layers_of("attn_v.weight");
    let n_ffn_down = layers_of("ffn_down.weight");
    infos
        .iter()
        .map(|t| {
            let keep = TensorPlan {
                name: t.name.clone(),
                from: t.dtype,
                to: t.dtype,
                wanted: None,
            };
            let eligible = t.n_dims >= 2 && t.name.ends_with(".weight") && t.dtype != DType::I32;
            if !eligible {
                return keep;
            }
            let wanted = match target {
                QuantType::Q4KM => {
                    let is_head =
                        t.name == "output.weight" || (t.name == "token_embd.weight" && !has_output);
                    let more_bits =
                        |suffix, n| layer_of(&t.name, suffix).is_some_and(|i| use_more_bits(i, n));
                    if is_head
                        || more_bits("attn_v.weight", n_attn_v)
                        || more_bits("ffn_down.weight", n_ffn_down)
                    {
                        DType::Q6_K
                    } else {
                        DType::Q4_K
                    }
                }
                _ => target.base(),
            };
            let ne0 = t.ne[0] as u64;
            let (to, fallback) = if ne0.is_multiple_of(wanted.block_elems()) {
                (wanted, None)
            } else if let Some(instead) = k_quant_fallback(wanted)
                && ne0.is_multiple_of(instead.block_elems())
            {
                (instead, Some(wanted))
            } else {
                return keep;
            };
            TensorPlan {
                to,
                wanted: fallback,
                ..keep
            }
        })
        .collect()
}

/// llama.cpp's type for a K-quant tensor whose rows are not whole
/// super-blocks (`None` for the other types).
fn k_quant_fallback(dtype: DType) -> Option<DType> {
    match dtype {
        DType::Q4_K => Some(DType::Q5_0),
        DType::Q5_K => Some(DType::Q5_1),
        DType::Q6_K => Some(DType::Q8_0),
        _ => None,
    }
}

/// The layer number `i` of a tensor named `blk.{i}.{suffix}`.
fn layer_of(name: &str, suffix: &str) -> Option<usize> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    (tail == suffix).then(|| layer.parse().ok()).flatten()
}

/// llama.cpp's rule for the layers of a Q4_K_M file that get Q6_K: the first
/// and last eighth, and every third layer in between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// Requantizes the GGUF file `input` into `output` as `target` (see the module
/// doc); `output` is written atomically and must not be `input`.
///
/// Errors: the input cannot be opened or is not a valid GGUF file, `output` is
/// the input ([`FileError::OutputIsInput`]), or the output cannot be written.
pub fn quantize_gguf(
    input: &Path,
    output: &Path,
    target: QuantType,
) -> Result<QuantizeSummary, FileError> {
    if same_file(input, output) {
        return Err(FileError::OutputIsInput {
            path: output.to_path_buf(),
        });
    }
    let file = GgufFile::open(input)?;
    let plan = plan_quantization(&file, target);
    let mut bytes = Vec::with_capacity(plan.len());
    let mut tensor_bytes_in = 0;
    for p in &plan {
        let stored = file.require_tensor(&p.name)?;
        tensor_bytes_in += stored.data.len() as u64;
        bytes.push(if p.requantized() {
            std::borrow::Cow::Owned(requantize(stored.data, p.from, p.to, stored.ne[0] as usize))
        } else {
            std::borrow::Cow::Borrowed(stored.data)
        });
    }
    let metadata = output_metadata(&file, target);
    let shapes: Vec<Vec<u64>> = file
        .tensor_infos()
        .iter()
        .map(|t| {
            t.ne[..t.n_dims as usize]
                .iter()
                .map(|&d| d as u64)
                .collect()
        })
        .collect();
    let tensors: Vec<GgufTensorData<'_>> = plan
        .iter()
        .zip(&bytes)
        .zip(&shapes)
        .map(|((p, data), ne)| GgufTensorData {
            name: &p.name,
            dtype: p.to,
            ne,
            data,
        })
        .collect();
    write_gguf(output, &metadata, &tensors)?;
    let size = |path: &Path| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(QuantizeSummary {
        tensor_bytes_out: bytes.iter().map(|b| b.len() as u64).sum(),
        tensors: plan,
        tensor_bytes_in,
        file_bytes_in: size(input),
        file_bytes_out: size(output),
    })
}

/// Whether two paths name the same file (the output need not exist yet).
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The input's metadata (sorted by key) with the target's file type.
fn output_metadata(file: &GgufFile, target: QuantType) -> Vec<(String, GgufValue)> {
    let mut metadata: Vec<(String, GgufValue)> = file
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut set = |key: &str, value: GgufValue, overwrite: bool| match metadata
        .iter_mut()
        .find(|(k, _)| k == key)
    {
        Some(entry) if overwrite => entry.1 = value,
        Some(_) => {}
        None => metadata.push((key.to_owned(), value)),
    };
    set(
        "general.file_type",
        GgufValue::U32(target.file_type()),
        true,
    );
    set("general.quantization_version", GgufValue::U32(2), false);
    metadata
}

/// Re-encodes rows of `ne0` values from `from` to `to`, on all cores.
fn requantize(src: &[u8], from: DType, to: DType, ne0: usize) -> Vec<u8> {
    // The plan only picks types whose blocks divide ne0, so both row sizes exist.
    let src_row = from.row_bytes(ne0 as u64).unwrap_or(0) as usize;
    let dst_row = to.row_bytes(ne0 as u64).unwrap_or(0) as usize;
    let rows = src.len().checked_div(src_row).unwrap_or(0);
    let mut out = vec![0u8; rows * dst_row];
    if rows == 0 || dst_row == 0 {
        return out;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows_per_chunk = rows.div_ceil(threads);
    std::thread::scope(|scope| {
        for (src_chunk, dst_chunk) in src
            .chunks(rows_per_chunk * src_row)
            .zip(out.chunks_mut(rows_per_chunk * dst_row))
        {
            scope.spawn(move || {
                let mut values = vec![0f32; ne0];
                for (s, d) in src_chunk
                    .chunks_exact(src_row)
                    .zip(dst_chunk.chunks_exact_mut(dst_row))
                {
                    dequantize_row(from, s, &mut values);
                    quantize_row(to, &values, d);
                }
            });
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_layers_match_llama_cpp_for_30_and_32_layers() {
        let picked = |n| (0..n).filter(|&i| use_more_bits(i, n)).collect::<Vec<_>>();
        // n = 32: n/8 = 4, 7n/8 = 28.
        assert_eq!(
            picked(32),
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        // n = 30: n/8 = 3, 7n/8 = 26.
        assert_eq!(
            picked(30),
            [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]
        );
    }

    #[test]
    fn layer_numbers_come_from_blk_names_only() {
        assert_eq!(layer_of("blk.17.attn_v.weight", "attn_v.weight"), Some(17));
        assert_eq!(layer_of("blk.17.attn_v.bias", "attn_v.weight"), None);
        assert_eq!(layer_of("blk.x.attn_v.weight", "attn_v.weight"), None);
        assert_eq!(layer_of("output.weight", "attn_v.weight"), None);
    }

    #[test]
    fn every_type_name_parses_back() {
        for t in QuantType::ALL {
            assert_eq!(QuantType::parse(t.name()), Some(t));
            assert_eq!(QuantType::parse(&t.name().to_uppercase()), Some(t));
        }
        assert_eq!(QuantType::parse("q8_1"), None);
    }
}
