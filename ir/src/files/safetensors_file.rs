//! A safetensors reader over a read-only memory map, using the `safetensors`
//! crate's header types and validation.
//!
//! File layout: `header_len u64 LE | JSON header | data`, the header mapping
//! each tensor name to `{dtype, shape, data_offsets: [begin, end]}` relative to
//! the data, plus an optional `__metadata__` string map.
//!
//! Shapes are row-major, outermost first; ggml's `ne` is innermost first, so
//! they are reversed: a PyTorch `[384, 1536]` weight has `ne = [1536, 384, 1, 1]`.
//!
//! Unusable tensors do not stop the file from opening. A tensor whose dtype has
//! no [`DType`] (only F32, F16, BF16 and I32 map) or that has more than 4
//! dimensions is left out of [`TensorSource::tensor`] and
//! [`TensorSource::tensor_names`]; [`TensorSource::require_tensor`] reports why,
//! and [`SafetensorsFile::unusable_tensor_names`] lists them. Real checkpoints
//! often carry such tensors (an I64 `position_ids` buffer in BERT models) that a
//! model never reads.
//!
//! Invariants of an opened [`SafetensorsFile`]: the header is valid UTF-8 JSON
//! that the `safetensors` crate accepts (offsets contiguous, each tensor's byte
//! length matching its shape and dtype), and the data section is exactly as long
//! as the offsets say. The header framing is checked here with checked
//! arithmetic before the crate sees it, so a crafted header cannot make an
//! addition overflow.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensorError};

use super::{FileError, StoredTensor, TensorSource, ggml_shape_and_size};
use crate::dtype::DType;

/// Largest JSON header accepted (the `safetensors` crate's own limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor as the header declares it.
#[derive(Clone, Debug)]
struct Entry {
    dtype: Dtype,
    shape: Vec<usize>,
    /// Absolute byte range in the file.
    start: usize,
    end: usize,
    /// `Some` when the tensor maps to a ggml dtype and shape.
    usable: Option<(DType, [i64; 4])>,
}

/// An open safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    mmap: Mmap,
    entries: BTreeMap<String, Entry>,
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("n_tensors", &self.entries.len())
            .finish()
    }
}

impl SafetensorsFile {
    /// Opens, maps and validates a safetensors file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile, FileError> {
        let path = path.as_ref();
        let mmap = super::map_read_only(path)?;
        let (entries, metadata) = parse_header(&mmap, path)?;
        Ok(SafetensorsFile {
            path: path.to_path_buf(),
            mmap,
            entries,
            metadata,
        })
    }

    /// The `__metadata__` string map (empty when absent), sorted by key.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Names of tensors that cannot be handed out (unsupported dtype or more
    /// than 4 dimensions), sorted.
    pub fn unusable_tensor_names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(_, e)| e.usable.is_none())
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

impl TensorSource for SafetensorsFile {
    fn tensor(&self, name: &str) -> Option<StoredTensor<'_>> {
        let (key, entry) = self.entries.get_key_value(name)?;
        let (dtype, ne) = entry.usable?;
        Some(StoredTensor {
            name: key,
            dtype,
            ne,
            data: self.mmap.get(entry.start..entry.end)?,
        })
    }

    /// Usable tensor names, sorted.
    fn tensor_names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(_, e)| e.usable.is_some())
            .map(|(n, _)| n.as_str())
            .collect()
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn require_tensor(&self, name: &str) -> Result<StoredTensor<'_>, FileError> {
        let Some(entry) = self.entries.get(name) else {
            return Err(FileError::TensorNotFound {
                path: self.path.clone(),
                tensor: name.to_owned(),
            });
        };
        // Re-derive the mapping to get the error that made it unusable.
        ggml_dtype_and_shape(&self.path, name, entry.dtype, &entry.shape)?;
        self.tensor(name).ok_or_else(|| FileError::TensorNotFound {
            path: self.path.clone(),
            tensor: name.to_owned(),
        })
    }
}

type Parsed = (BTreeMap<String, Entry>, BTreeMap<String, String>);

/// Frames and parses the JSON header and checks it against the file length.
fn parse_header(bytes: &[u8], path: &Path) -> Result<Parsed, FileError> {
    let file_size = bytes.len() as u64;
    let corrupt = |offset: u64, reason: String| FileError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    let truncated = |offset: u64, needed: u64, what: &str| FileError::Truncated {
        path: path.to_path_buf(),
        offset,
        needed,
        file_size,
        what: what.to_owned(),
    };

    let len_bytes: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| truncated(0, 8, "the header length"))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_BYTES {
        let reason = format!("header length {header_len} exceeds {MAX_HEADER_BYTES} bytes");
        return Err(corrupt(0, reason));
    }
    // header_len <= 1e8, so these casts and the addition cannot overflow.
    let data_start = 8 + header_len as usize;
    let header = bytes
        .get(8..data_start)
        .ok_or_else(|| truncated(8, header_len, "the JSON header"))?;
    let header = std::str::from_utf8(header)
        .map_err(|e| corrupt(8, format!("header is not valid UTF-8: {e}")))?;
    let metadata: Metadata = serde_json::from_str(header).map_err(|e| FileError::Safetensors {
        path: path.to_path_buf(),
        source: SafeTensorError::InvalidHeaderDeserialization(e),
    })?;

    let data_len = bytes.len() - data_start;
    if metadata.data_len() != data_len {
        let reason = format!(
            "tensor offsets cover {} data bytes but {data_len} follow the header",
            metadata.data_len()
        );
        return Err(corrupt(data_start as u64, reason));
    }
    let entries = collect_entries(&metadata, data_start, path);
    let user_metadata = metadata
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    Ok((entries, user_metadata))
}

/// Turns the validated header into entries with absolute byte ranges.
fn collect_entries(metadata: &Metadata, data_start: usize, path: &Path) -> BTreeMap<String, Entry> {
    let mut entries = BTreeMap::new();
    for name in metadata.offset_keys() {
        let Some(info) = metadata.info(&name) else {
            continue;
        };
        // Offsets are within the data section (checked against its length).
        let (begin, end) = info.data_offsets;
        let usable = ggml_dtype_and_shape(path, &name, info.dtype, &info.shape).ok();
        let entry = Entry {
            dtype: info.dtype,
            shape: info.shape.clone(),
            start: data_start + begin,
            end: data_start + end,
            usable,
        };
        entries.insert(name, entry);
    }
    entries
}

/// The ggml dtype and `ne` of a safetensors tensor, or why it has none.
fn ggml_dtype_and_shape(
    path: &Path,
    name: &str,
    dtype: Dtype,
    shape: &[usize],
) -> Result<(DType, [i64; 4]), FileError> {
    let dtype = match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        other => {
            return Err(FileError::UnsupportedSafetensorsDtype {
                path: path.to_path_buf(),
                tensor: name.to_owned(),
                dtype: format!("{other:?}"),
            });
        }
    };
    let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
    let (ne, _) = ggml_shape_and_size(path, name, dtype, &dims)?;
    Ok((dtype, ne))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::test_support::{Lcg, temp_path};
    use safetensors::tensor::TensorView;

    fn sample_file_bytes() -> Vec<u8> {
        let f32_data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let f16_data: Vec<u8> = (0..4)
            .flat_map(|i| half::f16::from_f32(i as f32).to_le_bytes())
            .collect();
        let bf16_data: Vec<u8> = (0..8)
            .flat_map(|i| half::bf16::from_f32(i as f32).to_le_bytes())
            .collect();
        let i32_data = 7i32.to_le_bytes().to_vec();
        let i64_data: Vec<u8> = (0..2i64).flat_map(|i| i.to_le_bytes()).collect();
        let five_d = 1.5f32.to_le_bytes().to_vec();
        let view = |dtype, shape: &[usize], data| {
            TensorView::new(dtype, shape.to_vec(), data).expect("consistent view")
        };
        let tensors = vec![
            ("weight", view(Dtype::F32, &[2, 3], &f32_data[..])),
            ("half", view(Dtype::F16, &[4], &f16_data[..])),
            ("brain", view(Dtype::BF16, &[2, 2, 2], &bf16_data[..])),
            ("scalar", view(Dtype::I32, &[], &i32_data[..])),
            ("position_ids", view(Dtype::I64, &[1, 2], &i64_data[..])),
            ("five_d", view(Dtype::F32, &[1, 1, 1, 1, 1], &five_d[..])),
        ];
        let info = [("format".to_owned(), "pt".to_owned())]
            .into_iter()
            .collect();
        safetensors::serialize(tensors, Some(info)).expect("serialize")
    }

    fn parse(bytes: &[u8]) -> Result<Parsed, FileError> {
        parse_header(bytes, Path::new("test.safetensors"))
    }

    #[test]
    fn reads_tensors_with_reversed_shapes() {
        let path = temp_path("st", "safetensors");
        std::fs::write(&path, sample_file_bytes()).expect("write");
        let file = SafetensorsFile::open(&path);
        std::fs::remove_file(&path).ok();
        let file = file.expect("opens");

        assert_eq!(file.tensor_names(), ["brain", "half", "scalar", "weight"]);
        assert_eq!(file.unusable_tensor_names(), ["five_d", "position_ids"]);
        assert_eq!(
            file.metadata().get("format").map(String::as_str),
            Some("pt")
        );

        let w = file.tensor("weight").expect("weight");
        assert_eq!((w.dtype, w.ne), (DType::F32, [3, 2, 1, 1]));
        let floats: Vec<f32> = w
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(floats, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let h = file.tensor("half").expect("half");
        assert_eq!((h.dtype, h.ne, h.data.len()), (DType::F16, [4, 1, 1, 1], 8));
        let b = file.tensor("brain").expect("brain");
        assert_eq!((b.dtype, b.ne), (DType::BF16, [2, 2, 2, 1]));
        let s = file.tensor("scalar").expect("scalar");
        assert_eq!(
            (s.dtype, s.ne, s.data),
            (DType::I32, [1, 1, 1, 1], &7i32.to_le_bytes()[..])
        );

        assert!(file.tensor("position_ids").is_none());
        let err = file.require_tensor("position_ids").expect_err("i64");
        assert!(
            matches!(err, FileError::UnsupportedSafetensorsDtype { ref dtype, .. } if dtype == "I64"),
            "{err}"
        );
        let err = file.require_tensor("five_d").expect_err("5-d");
        assert!(
            matches!(err, FileError::TooManyDims { n_dims: 5, .. }),
            "{err}"
        );
        assert!(matches!(
            file.require_tensor("missing"),
            Err(FileError::TensorNotFound { .. })
        ));
        assert_eq!(
            file.require_tensor("weight").expect("usable").ne,
            [3, 2, 1, 1]
        );
    }

    #[test]
    fn pytorch_linear_weight_shape_is_reversed() {
        let data = vec![0u8; 384 * 1536 * 2];
        let view = TensorView::new(Dtype::F16, vec![384, 1536], &data).expect("view");
        let bytes = safetensors::serialize([("fc.weight", view)], None).expect("serialize");
        let (entries, _) = parse(&bytes).expect("parses");
        assert_eq!(
            entries["fc.weight"].usable,
            Some((DType::F16, [1536, 384, 1, 1]))
        );
    }

    #[test]
    fn truncation_at_every_length_is_an_error() {
        let bytes = sample_file_bytes();
        for len in 0..bytes.len() {
            assert!(
                parse(&bytes[..len]).is_err(),
                "truncated to {len} bytes parsed"
            );
        }
        let path = temp_path("st-trunc", "safetensors");
        std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
        let result = SafetensorsFile::open(&path);
        std::fs::remove_file(&path).ok();
        assert!(result.is_err());
    }

    #[test]
    fn random_mutations_never_panic() {
        let original = sample_file_bytes();
        let mut rng = Lcg(0xfeed);
        for _ in 0..600 {
            let mut bytes = original.clone();
            for _ in 0..=rng.below(4) {
                let i = rng.below(bytes.len());
                bytes[i] = rng.next_u32() as u8;
            }
            if let Ok((entries, _)) = parse(&bytes) {
                for e in entries.values() {
                    assert!(e.start <= e.end && e.end <= bytes.len());
                }
            }
        }
    }

    #[test]
    fn offsets_summing_past_usize_are_an_error_not_a_panic() {
        let chunk = 1u64 << 61;
        let tensors: Vec<String> = (0..7u64)
            .map(|k| {
                format!(
                    r#""t{k}":{{"dtype":"U8","shape":[{chunk}],"data_offsets":[{},{}]}}"#,
                    k * chunk,
                    (k + 1) * chunk
                )
            })
            .collect();
        let header = format!("{{{}}}", tensors.join(","));
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        assert!(parse(&bytes).is_err());
    }

    #[test]
    fn huge_header_length_is_an_error() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend(b"{}");
        let err = parse(&bytes).expect_err("too large");
        assert!(err.to_string().contains("header length"), "{err}");
    }
}
