//! Reading a capture file: every field typed and checked, every error naming
//! the field and the tensor (see the module invariants in `super`).

use super::{Capture, CaptureError, CapturedCopy, CapturedSplit, CapturedTensor};
use serde_json::{Map, Value};
use std::path::Path;

const FORMAT: &str = "ggplan-llama-capture";
const VERSION: u64 = 1;

const TOP_KEYS: &[&str] = &[
    "format",
    "version",
    "model",
    "architecture",
    "args",
    "n_vocab",
    "n_ctx",
    "tokens",
    "positions",
    "logits",
    "tensors",
    "nodes",
    "splits",
    "copies",
    "reserve",
    "greedy",
];
const TENSOR_KEYS: &[&str] = &[
    "id",
    "name",
    "op",
    "desc",
    "type",
    "ne",
    "nb",
    "op_params",
    "flags",
    "src",
    "view_src",
    "view_offs",
    "buffer",
    "node",
    "copy_of",
    "reconstructed",
    "data_hex",
];

/// Reads and checks a capture file written by `scripts/llama-capture.sh`.
pub fn read_capture(path: &Path) -> Result<Capture, CaptureError> {
    let file_error = |reason: String| CaptureError::File {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| file_error(e.to_string()))?;
    let r = Reader { path };
    let top = r.object(&json, "the file")?;
    r.known_keys(top, TOP_KEYS, "the file")?;
    let format = r.str(top, "format", "")?;
    if format != FORMAT {
        return Err(r.bad("format", format!("is '{format}', expected '{FORMAT}'")));
    }
    let version = r.u64(top, "version", "")?;
    if version != VERSION {
        return Err(r.bad(
            "version",
            format!("is {version}; this ggplan reads version {VERSION}"),
        ));
    }
    let tensors = (r.array(top, "tensors", "")?.iter().enumerate())
        .map(|(i, t)| r.tensor(i, t))
        .collect::<Result<Vec<_>, _>>()?;
    let capture = Capture {
        path: path.to_path_buf(),
        model: r.str(top, "model", "")?.to_string(),
        architecture: r.str(top, "architecture", "")?.to_string(),
        args: (r.array(top, "args", "")?.iter().enumerate())
            .map(|(i, a)| r.as_str(a, &format!("args[{i}]")).map(str::to_string))
            .collect::<Result<_, _>>()?,
        n_vocab: r.u64(top, "n_vocab", "")?,
        n_ctx: r.u64(top, "n_ctx", "")?,
        tokens: (r.array(top, "tokens", "")?.iter().enumerate())
            .map(|(i, t)| r.as_i64(t, &format!("tokens[{i}]")))
            .collect::<Result<_, _>>()?,
        greedy: match top.get("greedy") {
            None => Vec::new(),
            Some(_) => (r.array(top, "greedy", "")?.iter().enumerate())
                .map(|(i, t)| r.as_i64(t, &format!("greedy[{i}]")))
                .collect::<Result<_, _>>()?,
        },
        nodes: r.ids(top, "nodes", "", tensors.len())?,
        splits: (r.array(top, "splits", "")?.iter().enumerate())
            .map(|(i, s)| r.split(i, s, tensors.len()))
            .collect::<Result<_, _>>()?,
        copies: (r.array(top, "copies", "")?.iter().enumerate())
            .map(|(i, c)| r.copy(i, c, tensors.len()))
            .collect::<Result<_, _>>()?,
        reserve: (r.array(top, "reserve", "")?.iter().enumerate())
            .map(|(i, l)| r.as_str(l, &format!("reserve[{i}]")).map(str::to_string))
            .collect::<Result<_, _>>()?,
        tensors,
    };
    r.consistent(&capture)?;
    Ok(capture)
}

/// How an unsigned field is described when it is something else.
const NON_NEGATIVE: &str = "a non-negative integer";

struct Reader<'a> {
    path: &'a Path,
}

impl Reader<'_> {
    fn bad(&self, place: &str, reason: impl Into<String>) -> CaptureError {
        CaptureError::Field {
            path: self.path.to_path_buf(),
            place: place.to_string(),
            reason: reason.into(),
        }
    }

    fn object<'v>(
        &self,
        v: &'v Value,
        place: &str,
    ) -> Result<&'v Map<String, Value>, CaptureError> {
        v.as_object()
            .ok_or_else(|| self.bad(place, "is not an object"))
    }

    fn known_keys(
        &self,
        o: &Map<String, Value>,
        known: &[&str],
        place: &str,
    ) -> Result<(), CaptureError> {
        let unknown: Vec<&str> = (o.keys().map(String::as_str))
            .filter(|k| !known.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(self.bad(
            place,
            format!("unknown keys {unknown:?} (this ggplan reads capture version {VERSION})"),
        ))
    }

    fn field<'v>(
        &self,
        o: &'v Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'v Value, CaptureError> {
        o.get(key)
            .ok_or_else(|| self.bad(&format!("{at}{key}"), "is missing"))
    }

    /// `v` read by `get`, or an error saying it is not `what`: one reader for
    /// every scalar type, so their errors read alike.
    fn typed<'v, T>(
        &self,
        v: &'v Value,
        place: &str,
        what: &str,
        get: impl FnOnce(&'v Value) -> Option<T>,
    ) -> Result<T, CaptureError> {
        get(v).ok_or_else(|| self.bad(place, format!("is {v}, not {what}")))
    }

    /// Field `key` of `o`, read by `get` (see [`Reader::typed`]).
    fn keyed<'v, T>(
        &self,
        o: &'v Map<String, Value>,
        key: &str,
        at: &str,
        what: &str,
        get: impl FnOnce(&'v Value) -> Option<T>,
    ) -> Result<T, CaptureError> {
        self.typed(self.field(o, key, at)?, &format!("{at}{key}"), what, get)
    }

    fn as_str<'v>(&self, v: &'v Value, place: &str) -> Result<&'v str, CaptureError> {
        self.typed(v, place, "a string", Value::as_str)
    }

    fn as_u64(&self, v: &Value, place: &str) -> Result<u64, CaptureError> {
        self.typed(v, place, NON_NEGATIVE, Value::as_u64)
    }

    fn as_i64(&self, v: &Value, place: &str) -> Result<i64, CaptureError> {
        self.typed(v, place, "an integer", Value::as_i64)
    }

    fn str<'v>(
        &self,
        o: &'v Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'v str, CaptureError> {
        self.keyed(o, key, at, "a string", Value::as_str)
    }

    fn u64(&self, o: &Map<String, Value>, key: &str, at: &str) -> Result<u64, CaptureError> {
        self.keyed(o, key, at, NON_NEGATIVE, Value::as_u64)
    }

    fn bool(&self, o: &Map<String, Value>, key: &str, at: &str) -> Result<bool, CaptureError> {
        self.keyed(o, key, at, "true or false", Value::as_bool)
    }

    fn array<'v>(
        &self,
        o: &'v Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'v Vec<Value>, CaptureError> {
        let v = self.field(o, key, at)?;
        v.as_array()
            .ok_or_else(|| self.bad(&format!("{at}{key}"), "is not an array"))
    }

    /// An array of tensor ids below `n`.
    fn ids(
        &self,
        o: &Map<String, Value>,
        key: &str,
        at: &str,
        n: usize,
    ) -> Result<Vec<usize>, CaptureError> {
        (self.array(o, key, at)?.iter().enumerate())
            .map(|(i, v)| {
                let place = format!("{at}{key}[{i}]");
                let id = self.as_u64(v, &place)?;
                if id >= n as u64 {
                    return Err(
                        self.bad(&place, format!("tensor {id} does not exist ({n} tensors)"))
                    );
                }
                Ok(id as usize)
            })
            .collect()
    }

    /// `N` integers.
    fn ints<const N: usize>(
        &self,
        o: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<[i64; N], CaptureError> {
        let values = self.array(o, key, at)?;
        if values.len() != N {
            return Err(self.bad(
                &format!("{at}{key}"),
                format!("has {} values, expected {N}", values.len()),
            ));
        }
        let mut out = [0i64; N];
        for (i, v) in values.iter().enumerate() {
            out[i] = self.as_i64(v, &format!("{at}{key}[{i}]"))?;
        }
        Ok(out)
    }

    fn tensor(&self, i: usize, v: &Value) -> Result<CapturedTensor, CaptureError> {
        let at0 = format!("tensors[{i}]");
        let o = self.object(v, &at0)?;
        let name = o.get("name").and_then(Value::as_str).unwrap_or("?");
        let at = format!("{at0} '{name}' .");
        self.known_keys(o, TENSOR_KEYS, &at0)?;
        if self.u64(o, "id", &at)? != i as u64 {
            return Err(self.bad(
                &format!("{at}id"),
                format!("is not {i}: tensors must be listed by id"),
            ));
        }
        let ne = self.ints::<4>(o, "ne", &at)?;
        if let Some(k) = ne.iter().position(|&n| n < 1) {
            return Err(self.bad(&format!("{at}ne[{k}]"), format!("is {}, below 1", ne[k])));
        }
        let nb = self.ints::<4>(o, "nb", &at)?;
        if let Some(k) = nb.iter().position(|&n| n < 0) {
            return Err(self.bad(&format!("{at}nb[{k}]"), "is negative"));
        }
        let words = self.ints::<16>(o, "op_params", &at)?;
        let mut op_params = [0i32; 16];
        for (k, w) in words.iter().enumerate() {
            op_params[k] = i32::try_from(*w)
                .map_err(|_| self.bad(&format!("{at}op_params[{k}]"), "is not a 32-bit word"))?;
        }
        // Sources are earlier tensors, but ggml_cast's CPY names itself as
        // its destination (src[1]); the import refuses that by name.
        let src = self.ids(o, "src", &at, i + 1)?;
        let op = self.str(o, "op", &at)?;
        if let Some(j) = (0..src.len()).find(|&j| src[j] == i && (op, j) != ("CPY", 1)) {
            return Err(self.bad(
                &format!("{at}src[{j}]"),
                format!("is the tensor itself ({i})"),
            ));
        }
        let view = match o.get("view_src") {
            None => None,
            Some(v) => {
                let id = self.as_u64(v, &format!("{at}view_src"))?;
                if id >= i as u64 {
                    return Err(self.bad(
                        &format!("{at}view_src"),
                        format!("tensor {id} is not an earlier tensor"),
                    ));
                }
                Some((id as usize, self.u64(o, "view_offs", &at)?))
            }
        };
        let data = match o.get("data_hex") {
            None => None,
            Some(v) => Some(self.hex(
                self.as_str(v, &format!("{at}data_hex"))?,
                &format!("{at}data_hex"),
            )?),
        };
        let copy_of = match o.get("copy_of") {
            None => None,
            Some(v) => Some(self.as_u64(v, &format!("{at}copy_of"))? as usize),
        };
        let flags = self.u64(o, "flags", &at)?;
        Ok(CapturedTensor {
            name: self.str(o, "name", &at)?.to_string(),
            op: self.str(o, "op", &at)?.to_string(),
            desc: self.str(o, "desc", &at)?.to_string(),
            dtype: self.str(o, "type", &at)?.to_string(),
            ne,
            nb: nb.map(|n| n as u64),
            op_params,
            flags: u32::try_from(flags)
                .map_err(|_| self.bad(&format!("{at}flags"), "is not a 32-bit word"))?,
            src,
            view,
            buffer: self.str(o, "buffer", &at)?.to_string(),
            node: self.bool(o, "node", &at)?,
            copy_of,
            reconstructed: match o.get("reconstructed") {
                None => false,
                Some(_) => self.bool(o, "reconstructed", &at)?,
            },
            data,
        })
    }

    fn hex(&self, s: &str, place: &str) -> Result<Vec<u8>, CaptureError> {
        if !s.len().is_multiple_of(2) {
            return Err(self.bad(place, "has an odd number of hex digits"));
        }
        (0..s.len() / 2)
            .map(|k| {
                u8::from_str_radix(s.get(2 * k..2 * k + 2).unwrap_or("?"), 16)
                    .map_err(|_| self.bad(place, format!("has a non-hex digit at byte {k}")))
            })
            .collect()
    }

    fn split(&self, i: usize, v: &Value, n: usize) -> Result<CapturedSplit, CaptureError> {
        let at = format!("splits[{i}].");
        let o = self.object(v, &at)?;
        self.known_keys(o, &["buffer", "first", "end", "inputs"], &at)?;
        Ok(CapturedSplit {
            buffer: self.str(o, "buffer", &at)?.to_string(),
            first: self.u64(o, "first", &at)? as usize,
            end: self.u64(o, "end", &at)? as usize,
            inputs: self.ids(o, "inputs", &at, n)?,
        })
    }

    fn copy(&self, i: usize, v: &Value, n: usize) -> Result<CapturedCopy, CaptureError> {
        let at = format!("copies[{i}].");
        let o = self.object(v, &at)?;
        self.known_keys(o, &["tensor", "backend", "original", "bytes"], &at)?;
        let tensor = self.u64(o, "tensor", &at)? as usize;
        if tensor >= n {
            return Err(self.bad(
                &format!("{at}tensor"),
                format!("tensor {tensor} does not exist"),
            ));
        }
        Ok(CapturedCopy {
            tensor,
            backend: self.str(o, "backend", &at)?.to_string(),
            original: self.str(o, "original", &at)?.to_string(),
            bytes: self.u64(o, "bytes", &at)?,
        })
    }

    /// Relations between fields: nodes are node tensors, once each; copies'
    /// originals exist; splits tile the nodes in order.
    fn consistent(&self, c: &Capture) -> Result<(), CaptureError> {
        let mut listed = vec![false; c.tensors.len()];
        for (k, &id) in c.nodes.iter().enumerate() {
            let t = &c.tensors[id];
            if !t.node || std::mem::replace(&mut listed[id], true) {
                return Err(self.bad(
                    &format!("nodes[{k}]"),
                    format!("tensor {id} '{}' is not a node listed once", t.name),
                ));
            }
        }
        for (id, t) in c.tensors.iter().enumerate() {
            if t.node && !listed[id] {
                return Err(self.bad(
                    &format!("tensors[{id}] '{}'", t.name),
                    "is a node missing from `nodes`",
                ));
            }
            // An original is never itself a copy (so following copies ends).
            let is_copy = |o: &CapturedTensor| o.copy_of.is_some() && !o.reconstructed;
            if let Some(of) = t.copy_of
                && (of >= c.tensors.len()
                    || of == id
                    || (!t.reconstructed && is_copy(&c.tensors[of])))
            {
                return Err(self.bad(
                    &format!("tensors[{id}] '{}' .copy_of", t.name),
                    format!("tensor {of} cannot be its original"),
                ));
            }
        }
        for (id, t) in c.tensors.iter().enumerate() {
            let element = match t.dtype.as_str() {
                "f32" | "i32" => 4,
                "f16" | "bf16" => 2,
                "i64" => 8,
                _ => continue,
            };
            let elements: i64 = t.ne.iter().product();
            if let Some(data) = &t.data
                && data.len() as i64 != element * elements
            {
                let reason = format!(
                    "holds {} bytes, but {} {:?} is {} bytes",
                    data.len(),
                    t.dtype,
                    t.ne,
                    element * elements
                );
                return Err(self.bad(&format!("tensors[{id}] '{}' .data_hex", t.name), reason));
            }
        }
        let mut next = 0;
        for (i, s) in c.splits.iter().enumerate() {
            if s.first != next || s.end <= s.first || s.end > c.nodes.len() {
                return Err(self.bad(
                    &format!("splits[{i}]"),
                    format!("nodes {}..{} do not continue at {next}", s.first, s.end),
                ));
            }
            next = s.end;
        }
        if next != c.nodes.len() {
            return Err(self.bad("splits", format!("cover {next} of {} nodes", c.nodes.len())));
        }
        Ok(())
    }
}
