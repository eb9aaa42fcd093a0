//! NumPy `.npy` files: reading (format versions 1.0, 2.0, 3.0) and atomic
//! writing, for test vectors exchanged with Python.
//!
//! Layout: `"\x93NUMPY" | major u8 | minor u8 | header_len (u16 LE for 1.x,
//! u32 LE for 2.x and 3.x) | header | data`, where the header is a Python dict
//! literal such as `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`
//! padded with spaces and ending in `\n`.
//!
//! Supported: little-endian `<f4`, `<f8`, `<i4`, `<i8`, `<f2` in C order.
//! Big-endian, other dtypes, structured dtypes and Fortran order are clear
//! errors. The data must be exactly `product(shape) * itemsize` bytes.
//!
//! Hand-written rather than using `npyz`: npyz 0.9 computes the element count
//! with an unchecked product (a debug-build panic on a crafted shape) and
//! allocates the header buffer from the declared length before checking it
//! against the file, and pulls in a Python-literal parser and a bignum crate.
//! The grammar needed here is tiny.
//!
//! Invariants: reading never panics and allocates at most the file's size plus
//! the decoded array; writes go to a temporary file in the destination's
//! directory that is renamed into place, so a failed write never leaves a
//! partial file under the destination name.

use std::io::Write;
use std::path::{Path, PathBuf};

use half::f16;

use super::{FileError, escape_bytes};

/// The six bytes every `.npy` file starts with.
pub const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";

/// A dense array read from a `.npy` file.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    /// Dimensions in NumPy order, outermost first (empty for a scalar).
    pub shape: Vec<u64>,
    /// The elements in C (row-major) order.
    pub data: NpyData,
}

/// The elements of an [`NpyArray`], by element type.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyData {
    /// `<f4`.
    F32(Vec<f32>),
    /// `<f8`.
    F64(Vec<f64>),
    /// `<i4`.
    I32(Vec<i32>),
    /// `<i8`.
    I64(Vec<i64>),
    /// `<f2`.
    F16(Vec<f16>),
}

impl NpyData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            NpyData::F32(v) => v.len(),
            NpyData::F64(v) => v.len(),
            NpyData::I32(v) => v.len(),
            NpyData::I64(v) => v.len(),
            NpyData::F16(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The NumPy `descr` of the element type (`"<f4"`, ...).
    pub fn descr(&self) -> &'static str {
        match self {
            NpyData::F32(_) => "<f4",
            NpyData::F64(_) => "<f8",
            NpyData::I32(_) => "<i4",
            NpyData::I64(_) => "<i8",
            NpyData::F16(_) => "<f2",
        }
    }
}

/// Reads a whole `.npy` file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<NpyArray, FileError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        op: "read",
        source,
    })?;
    parse_npy(&bytes, path)
}

/// Writes `data` with `shape` (outermost first) as a `<f4` `.npy` file,
/// atomically.
pub fn write_npy_f32(path: impl AsRef<Path>, shape: &[u64], data: &[f32]) -> Result<(), FileError> {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy(path.as_ref(), "<f4", 4, shape, &bytes)
}

/// Writes `data` with `shape` (outermost first) as a `<i4` `.npy` file,
/// atomically.
pub fn write_npy_i32(path: impl AsRef<Path>, shape: &[u64], data: &[i32]) -> Result<(), FileError> {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy(path.as_ref(), "<i4", 4, shape, &bytes)
}

/// Parses the bytes of a `.npy` file; `path` is only used in errors.
fn parse_npy(bytes: &[u8], path: &Path) -> Result<NpyArray, FileError> {
    let (header, data_start) = split_header(bytes, path)?;
    let header = parse_header_dict(header, path)?;
    if header.fortran_order {
        return Err(FileError::NpyFortranOrder {
            path: path.to_path_buf(),
        });
    }
    let item_size: u64 = match header.descr.as_str() {
        "<f4" | "<i4" => 4,
        "<f8" | "<i8" => 8,
        "<f2" => 2,
        _ => {
            return Err(FileError::NpyUnsupportedDtype {
                path: path.to_path_buf(),
                descr: header.descr,
            });
        }
    };
    let payload = &bytes[data_start..];
    let expected = byte_size(&header.shape, item_size).ok_or_else(|| FileError::NpyHeader {
        path: path.to_path_buf(),
        reason: format!(
            "shape {:?} has more elements than fit in memory",
            header.shape
        ),
    })?;
    if expected != payload.len() as u64 {
        return Err(FileError::ShapeDataMismatch {
            path: path.to_path_buf(),
            shape: header.shape,
            expected_bytes: expected,
            actual_bytes: payload.len() as u64,
        });
    }
    Ok(NpyArray {
        shape: header.shape,
        data: decode(&header.descr, payload),
    })
}

/// `product(shape) * item_size`, or `None` on overflow.
fn byte_size(shape: &[u64], item_size: u64) -> Option<u64> {
    shape
        .iter()
        .try_fold(item_size, |acc, &d| acc.checked_mul(d))
}

/// Decodes little-endian elements; `descr` is one of the supported five.
fn decode(descr: &str, payload: &[u8]) -> NpyData {
    fn le<const N: usize, T>(payload: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
        payload
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                from(a)
            })
            .collect()
    }
    match descr {
        "<f4" => NpyData::F32(le(payload, f32::from_le_bytes)),
        "<f8" => NpyData::F64(le(payload, f64::from_le_bytes)),
        "<i4" => NpyData::I32(le(payload, i32::from_le_bytes)),
        "<i8" => NpyData::I64(le(payload, i64::from_le_bytes)),
        _ => NpyData::F16(le(payload, f16::from_le_bytes)),
    }
}

/// Checks magic and version; returns the header text and where data starts.
fn split_header<'a>(bytes: &'a [u8], path: &Path) -> Result<(&'a str, usize), FileError> {
    let header_error = |reason: String| FileError::NpyHeader {
        path: path.to_path_buf(),
        reason,
    };
    let truncated = |offset: u64, needed: u64, what: &str| FileError::Truncated {
        path: path.to_path_buf(),
        offset,
        needed,
        file_size: bytes.len() as u64,
        what: what.to_owned(),
    };
    let magic = bytes.get(..6).ok_or_else(|| truncated(0, 6, "the magic"))?;
    if magic != NPY_MAGIC {
        return Err(FileError::BadMagic {
            path: path.to_path_buf(),
            format: "NumPy .npy",
            found: escape_bytes(magic),
            expected: "\\x93NUMPY",
        });
    }
    let version = bytes
        .get(6..8)
        .ok_or_else(|| truncated(6, 2, "the version"))?;
    let (len_size, len) = match version[0] {
        1 => (
            2,
            bytes
                .get(8..10)
                .map(|b| u64::from(u16::from_le_bytes([b[0], b[1]]))),
        ),
        2 | 3 => (
            4,
            bytes
                .get(8..12)
                .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        ),
        major => {
            let reason = format!("unsupported format version {major}.{}", version[1]);
            return Err(header_error(reason));
        }
    };
    let len = len.ok_or_else(|| truncated(8, len_size, "the header length"))?;
    let start = 8 + len_size as usize;
    // `get` bounds the declared length by the file before anything is copied.
    let text = usize::try_from(len)
        .ok()
        .and_then(|l| bytes.get(start..start.checked_add(l)?))
        .ok_or_else(|| truncated(start as u64, len, "the header"))?;
    let text = std::str::from_utf8(text)
        .map_err(|e| header_error(format!("header is not valid UTF-8: {e}")))?;
    Ok((text, start + text.len()))
}

/// The three fields of a `.npy` header.
#[derive(Debug, PartialEq)]
struct NpyHeader {
    descr: String,
    fortran_order: bool,
    shape: Vec<u64>,
}

/// A value in the header dict.
enum PyValue {
    Str(String),
    Bool(bool),
    Tuple(Vec<u64>),
}

/// Parses `{'descr': ..., 'fortran_order': ..., 'shape': (...), }`.
fn parse_header_dict(text: &str, path: &Path) -> Result<NpyHeader, FileError> {
    let mut p = DictParser {
        s: text.as_bytes(),
        pos: 0,
    };
    let error = |reason: String| FileError::NpyHeader {
        path: path.to_path_buf(),
        reason: format!("{reason} in header {:?}", text.trim_end()),
    };
    let entries = p.dict().map_err(error)?;
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    for (key, value) in entries {
        match (key.as_str(), value) {
            ("descr", PyValue::Str(s)) => descr = Some(s),
            ("descr", _) => {
                return Err(error("'descr' is not a string (structured dtype?)".into()));
            }
            ("fortran_order", PyValue::Bool(b)) => fortran_order = Some(b),
            ("shape", PyValue::Tuple(t)) => shape = Some(t),
            (k, _) => return Err(error(format!("unexpected key or value type for '{k}'"))),
        }
    }
    match (descr, fortran_order, shape) {
        (Some(descr), Some(fortran_order), Some(shape)) => Ok(NpyHeader {
            descr,
            fortran_order,
            shape,
        }),
        _ => Err(error(
            "missing one of 'descr', 'fortran_order', 'shape'".into(),
        )),
    }
}

/// A recursive-descent parser for the one-level dict NumPy writes.
struct DictParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl DictParser<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.s.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!(
                "expected '{}' at character {}",
                c as char, self.pos
            ))
        }
    }

    fn dict(&mut self) -> Result<Vec<(String, PyValue)>, String> {
        self.expect(b'{')?;
        let mut entries = Vec::new();
        while !self.eat(b'}') {
            let key = self.string()?;
            self.expect(b':')?;
            entries.push((key, self.value()?));
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        match self.peek() {
            None => Ok(entries),
            Some(_) => Err(format!(
                "unexpected text after the dict at character {}",
                self.pos
            )),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a string at character {}", self.pos)),
        };
        let start = self.pos + 1;
        let len = self.s[start..]
            .iter()
            .position(|&c| c == quote)
            .ok_or("unterminated string")?;
        let body = &self.s[start..start + len];
        if body.contains(&b'\\') {
            return Err("escapes in strings are not supported".into());
        }
        self.pos = start + len + 1;
        Ok(String::from_utf8_lossy(body).into_owned())
    }

    fn value(&mut self) -> Result<PyValue, String> {
        match self.peek() {
            Some(b'\'' | b'"') => self.string().map(PyValue::Str),
            Some(b'(') => self.tuple().map(PyValue::Tuple),
            _ if self.keyword("True") => Ok(PyValue::Bool(true)),
            _ if self.keyword("False") => Ok(PyValue::Bool(false)),
            _ => Err(format!("unsupported value at character {}", self.pos)),
        }
    }

    fn keyword(&mut self, word: &str) -> bool {
        let found = self.s[self.pos..].starts_with(word.as_bytes());
        if found {
            self.pos += word.len();
        }
        found
    }

    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut items = Vec::new();
        while !self.eat(b')') {
            items.push(self.integer()?);
            if !self.eat(b',') {
                self.expect(b')')?;
                break;
            }
        }
        Ok(items)
    }

    fn integer(&mut self) -> Result<u64, String> {
        self.peek();
        let start = self.pos;
        while self.s.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        let digits = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or_default();
        let n = digits
            .parse()
            .map_err(|_| format!("expected a dimension at character {start}"))?;
        self.eat(b'L'); // Python 2 longs
        Ok(n)
    }
}

/// The header text NumPy would write, padded so data starts on a 64-byte
/// boundary, and the format major version needed for its length.
fn header_bytes(descr: &str, shape: &[u64]) -> (u8, Vec<u8>) {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    let (major, preamble) = if dict.len() + 1 + 10 <= 65535 {
        (1, 10)
    } else {
        (2, 12)
    };
    let total = (preamble + dict.len() + 1).next_multiple_of(64);
    let mut text = dict.into_bytes();
    text.resize(total - preamble - 1, b' ');
    text.push(b'\n');
    (major, text)
}

/// Writes a `.npy` file through a temporary file renamed into place.
fn write_npy(
    path: &Path,
    descr: &str,
    item_size: u64,
    shape: &[u64],
    data: &[u8],
) -> Result<(), FileError> {
    let expected = byte_size(shape, item_size);
    if expected != Some(data.len() as u64) {
        return Err(FileError::ShapeDataMismatch {
            path: path.to_path_buf(),
            shape: shape.to_vec(),
            expected_bytes: expected.unwrap_or(u64::MAX),
            actual_bytes: data.len() as u64,
        });
    }
    let (major, header) = header_bytes(descr, shape);
    let mut bytes = NPY_MAGIC.to_vec();
    bytes.extend([major, 0]);
    match major {
        1 => bytes.extend((header.len() as u16).to_le_bytes()),
        _ => bytes.extend((header.len() as u32).to_le_bytes()),
    }
    bytes.extend(header);
    bytes.extend(data);
    write_atomically(path, &bytes)
}

/// Writes `bytes` to a fresh temporary file next to `path`, then renames it
/// onto `path`; on failure the temporary file is removed.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let temp = temp_path_next_to(path);
    let io_error = |op, source| FileError::Io {
        path: path.to_path_buf(),
        op,
        source,
    };
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| io_error("create a temporary file for", e))?;
        file.write_all(bytes).map_err(|e| io_error("write", e))?;
        file.sync_all().map_err(|e| io_error("sync", e))?;
        std::fs::rename(&temp, path).map_err(|e| io_error("rename the temporary file onto", e))
    })();
    if result.is_err() {
        // Best effort: the temporary may not exist if creating it failed.
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// `dir/.name.tmp-<pid>-<n>` for `dir/name`.
fn temp_path_next_to(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(|| "npy".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::test_support::{Lcg, temp_path};

    /// `np.save(f, np.arange(6, dtype='<f8').reshape(2, 3) / 4)` (NumPy 2.4).
    const NUMPY_F64: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }                                                          \n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xd0?\x00\x00\x00\x00\x00\x00\xe0?\x00\x00\x00\x00\x00\x00\xe8?\x00\x00\x00\x00\x00\x00\xf0?\x00\x00\x00\x00\x00\x00\xf4?";
    /// `np.save(f, np.array([1.5, -2, 0.25], dtype='<f2'))`.
    const NUMPY_F16: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }                                                            \n\x00>\x00\xc0\x004";
    /// `np.save(f, np.array([[-1], [2**40]], dtype='<i8'))`.
    const NUMPY_I64: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }                                                          \n\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x01\x00\x00";

    fn parse(bytes: &[u8]) -> Result<NpyArray, FileError> {
        parse_npy(bytes, Path::new("test.npy"))
    }

    #[test]
    fn round_trips_f32_and_i32() {
        let path = temp_path("rt", "npy");
        let f = [1.0f32, -2.5, 3.25, 0.0, f32::MAX, -0.0];
        write_npy_f32(&path, &[2, 3], &f).expect("write f32");
        let read = read_npy(&path).expect("read f32");
        assert_eq!(read.shape, [2, 3]);
        assert_eq!(read.data, NpyData::F32(f.to_vec()));

        let i = [7i32, -1, i32::MIN, i32::MAX, 0];
        write_npy_i32(&path, &[5], &i).expect("write i32 over the old file");
        let read = read_npy(&path).expect("read i32");
        assert_eq!((read.shape, read.data), (vec![5], NpyData::I32(i.to_vec())));

        let bytes = std::fs::read(&path).expect("bytes");
        assert_eq!(
            (10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize) % 64,
            0
        );
        std::fs::remove_file(&path).ok();

        write_npy_f32(&path, &[], &[2.0]).expect("scalar");
        assert_eq!(read_npy(&path).expect("scalar").shape, Vec::<u64>::new());
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn reads_files_written_by_numpy() {
        let a = parse(NUMPY_F64).expect("f64");
        assert_eq!(a.shape, [2, 3]);
        assert_eq!(a.data, NpyData::F64(vec![0.0, 0.25, 0.5, 0.75, 1.0, 1.25]));
        let a = parse(NUMPY_F16).expect("f16");
        let expected = [1.5f32, -2.0, 0.25].map(f16::from_f32).to_vec();
        assert_eq!((a.shape, a.data), (vec![3], NpyData::F16(expected)));
        let a = parse(NUMPY_I64).expect("i64");
        assert_eq!(
            (a.shape, a.data),
            (vec![2, 1], NpyData::I64(vec![-1, 1 << 40]))
        );
    }

    #[test]
    fn write_with_wrong_shape_fails_and_leaves_no_file() {
        let path = temp_path("bad-shape", "npy");
        let err = write_npy_f32(&path, &[2, 2], &[1.0; 3]).expect_err("3 values for 2x2");
        assert!(matches!(
            err,
            FileError::ShapeDataMismatch {
                expected_bytes: 16,
                ..
            }
        ));
        assert!(!path.exists());

        let missing_dir = std::env::temp_dir()
            .join("ggplan-no-such-dir")
            .join("x.npy");
        let err = write_npy_i32(&missing_dir, &[1], &[1]).expect_err("no directory");
        assert!(matches!(err, FileError::Io { .. }), "{err}");
    }

    #[test]
    fn truncation_at_every_length_is_an_error() {
        let path = temp_path("trunc", "npy");
        write_npy_f32(&path, &[2, 3], &[1.0; 6]).expect("write");
        let bytes = std::fs::read(&path).expect("read back");
        std::fs::remove_file(&path).ok();
        for len in 0..bytes.len() {
            assert!(
                parse(&bytes[..len]).is_err(),
                "truncated to {len} bytes parsed"
            );
        }
        let err = parse(&bytes[..bytes.len() - 2]).expect_err("short data");
        assert!(matches!(
            err,
            FileError::ShapeDataMismatch {
                actual_bytes: 22,
                ..
            }
        ));
    }

    #[test]
    fn header_errors_are_specific() {
        let with_header = |dict: &str| {
            let mut b = NPY_MAGIC.to_vec();
            b.extend([1, 0]);
            b.extend((dict.len() as u16).to_le_bytes());
            b.extend(dict.as_bytes());
            b
        };
        let fortran = with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (0,), }\n");
        assert!(matches!(
            parse(&fortran),
            Err(FileError::NpyFortranOrder { .. })
        ));
        let big = with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (0,), }\n");
        assert!(matches!(
            parse(&big),
            Err(FileError::NpyUnsupportedDtype { .. })
        ));
        let huge = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
        );
        assert!(matches!(parse(&huge), Err(FileError::NpyHeader { .. })));
        let missing = with_header("{'descr': '<f4', 'shape': (1,)}");
        assert!(matches!(parse(&missing), Err(FileError::NpyHeader { .. })));
        let mut v4 = with_header("{}");
        v4[6] = 4;
        assert!(matches!(parse(&v4), Err(FileError::NpyHeader { .. })));
        assert!(matches!(
            parse(b"PK\x03\x04zipfile"),
            Err(FileError::BadMagic { .. })
        ));
        // Python 2 style longs and no trailing comma still parse.
        let py2 = [
            with_header("{'descr':'<i4','fortran_order':False,'shape':(1L,)}"),
            5i32.to_le_bytes().to_vec(),
        ]
        .concat();
        assert_eq!(parse(&py2).expect("py2 header").data, NpyData::I32(vec![5]));
    }

    #[test]
    fn random_mutations_never_panic() {
        let path = temp_path("mut", "npy");
        write_npy_f32(&path, &[5], &[1.0, 2.0, 3.0, 4.0, 5.0]).expect("write");
        let original = std::fs::read(&path).expect("read back");
        std::fs::remove_file(&path).ok();
        let mut rng = Lcg(0xabc);
        for _ in 0..500 {
            let mut bytes = original.clone();
            for _ in 0..=rng.below(3) {
                let i = rng.below(bytes.len().min(80));
                bytes[i] = rng.next_u32() as u8;
            }
            let _ = parse(&bytes);
        }
    }
}
