//! [`GgufMeta`]: typed lookups in a GGUF file's metadata and tensor infos
//! for the config loaders (`LlamaConfig::from_gguf`, `BertConfig::from_gguf`),
//! and the check that every weight of a built graph is in the file.
//!
//! Invariant: every error names the file, and the key or tensor to blame
//! (missing, of the wrong type, out of range, or of another dtype or shape).

use crate::Error;
use ir::files::TensorSource;
use ir::files::gguf::{GgufFile, GgufTensorInfo};
use ir::layout::fmt_ne;
use ir::{Graph, Role};
use std::path::PathBuf;

/// Typed metadata lookups whose errors name the key and the file.
pub(crate) struct GgufMeta<'a> {
    file: &'a GgufFile,
    path: PathBuf,
}

impl<'a> GgufMeta<'a> {
    pub(crate) fn new(file: &'a GgufFile) -> GgufMeta<'a> {
        GgufMeta {
            file,
            path: file.path().to_path_buf(),
        }
    }

    /// The file's path, for errors built by the caller.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub(crate) fn missing(&self, key: &str) -> Error {
        Error::MissingKey {
            file: self.path.clone(),
            key: key.to_owned(),
        }
    }

    pub(crate) fn bad(&self, key: &str, reason: String) -> Error {
        Error::BadValue {
            file: self.path.clone(),
            key: key.to_owned(),
            reason,
        }
    }

    /// Refuses every `{arch}.*` key whose suffix is not in `understood`: a
    /// hyperparameter the builder does not model (a rope scaling factor, a
    /// sliding window, ...) would make the graph another model in silence.
    pub(crate) fn refuse_unknown_keys(&self, arch: &str, understood: &[&str]) -> Result<(), Error> {
        let prefix = format!("{arch}.");
        let unknown: Vec<String> = (self.file.metadata().keys())
            .filter(|k| {
                k.strip_prefix(&prefix)
                    .is_some_and(|s| !understood.contains(&s))
            })
            .map(|k| format!("'{k}'"))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(self.unsupported(format!(
            "metadata this builder does not model, so the file is refused rather than run \
             without it: {}",
            unknown.join(", ")
        )))
    }

    pub(crate) fn unsupported(&self, reason: String) -> Error {
        Error::Unsupported {
            file: self.path.clone(),
            reason,
        }
    }

    fn wrong_type(&self, key: &str, expected: &str) -> Error {
        let found = self.file.get(key).map_or("absent", |v| v.type_name());
        self.bad(key, format!("should be {expected} but is a {found}"))
    }

    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<&'a str>, Error> {
        match self.file.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, "a string")),
        }
    }

    pub(crate) fn str(&self, key: &str) -> Result<&'a str, Error> {
        self.opt_str(key)?.ok_or_else(|| self.missing(key))
    }

    /// An optional bool.
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, Error> {
        match self.file.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, "a bool")),
        }
    }

    /// A non-negative integer (any stored integer width).
    pub(crate) fn opt_u64(&self, key: &str) -> Result<Option<u64>, Error> {
        match self.file.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, "a non-negative integer")),
        }
    }

    /// An integer that is at least 1, as `i64`.
    pub(crate) fn opt_positive(&self, key: &str) -> Result<Option<i64>, Error> {
        let Some(v) = self.file.get(key) else {
            return Ok(None);
        };
        let n = v
            .as_i64()
            .ok_or_else(|| self.wrong_type(key, "an integer"))?;
        if !(1..=i64::from(u32::MAX)).contains(&n) {
            return Err(self.bad(key, format!("is {n}, outside 1..={}", u32::MAX)));
        }
        Ok(Some(n))
    }

    pub(crate) fn positive(&self, key: &str) -> Result<i64, Error> {
        self.opt_positive(key)?.ok_or_else(|| self.missing(key))
    }

    /// The `block_count` under `key`, refused when the file cannot hold that
    /// many blocks (each block has weights of its own), before any builder
    /// makes a node or a weight check per block (a fuzzed file claimed 12.5
    /// million blocks with 11 tensors).
    pub(crate) fn block_count(&self, key: &str) -> Result<i64, Error> {
        let n = self.positive(key)?;
        let tensors = self.file.tensor_infos().len();
        if n as u64 > tensors as u64 {
            return Err(self.bad(
                key,
                format!(
                    "is {n}, but the file holds {tensors} tensors (each block has its own weights)"
                ),
            ));
        }
        Ok(n)
    }

    /// A finite float.
    pub(crate) fn opt_f32(&self, key: &str) -> Result<Option<f32>, Error> {
        let Some(v) = self.file.get(key) else {
            return Ok(None);
        };
        let x = v.as_f64().ok_or_else(|| self.wrong_type(key, "a number"))? as f32;
        if !x.is_finite() {
            return Err(self.bad(key, format!("is {x}, not a finite f32")));
        }
        Ok(Some(x))
    }

    pub(crate) fn f32(&self, key: &str) -> Result<f32, Error> {
        self.opt_f32(key)?.ok_or_else(|| self.missing(key))
    }

    pub(crate) fn bad_tensor(&self, tensor: &str, reason: String) -> Error {
        Error::BadTensor {
            file: self.path.clone(),
            tensor: tensor.to_owned(),
            reason,
        }
    }

    /// The info of tensor `name`, which must be in the file.
    pub(crate) fn tensor(&self, name: &str) -> Result<&'a GgufTensorInfo, Error> {
        self.file
            .tensor_info(name)
            .ok_or_else(|| Error::MissingTensor {
                file: self.path.clone(),
                tensor: name.to_owned(),
            })
    }

    /// Every weight of `graph` is in the file with the dtype and shape the
    /// graph declares, and every tensor of the file is a weight of `graph`
    /// (else [`Error::UnusedTensors`] lists those it is not). `graph` is the
    /// result of building the model: a build
    /// error means the file's hyperparameters do not form a graph. When only
    /// the dtype differs, `dtype_rule` (which weights share which dtype) is
    /// added to the message.
    pub(crate) fn check_binds(
        &self,
        graph: Result<Graph, ir::Error>,
        dtype_rule: &str,
    ) -> Result<(), Error> {
        let graph =
            graph.map_err(|e| self.unsupported(format!("the model does not form a graph: {e}")))?;
        for id in graph.with_role(Role::Weight) {
            let want = graph.tensor(id);
            let have = self.tensor(&want.name)?;
            if (have.dtype, have.ne) != (want.dtype(), want.ne()) {
                let hint = if have.ne == want.ne() {
                    format!(" ({dtype_rule})")
                } else {
                    String::new()
                };
                return Err(self.bad_tensor(
                    &want.name,
                    format!(
                        "is {} {} but the model needs {} {}{hint}",
                        have.dtype,
                        fmt_ne(&have.ne),
                        want.dtype(),
                        fmt_ne(&want.ne())
                    ),
                ));
            }
        }
        // The converse: a tensor the graph leaves unbound is a feature the
        // builder does not model (llama.cpp would use it), never ignored.
        let used: std::collections::HashSet<&str> = (graph.with_role(Role::Weight))
            .map(|id| graph.tensor(id).name.as_str())
            .collect();
        let unused: Vec<String> = (self.file.tensor_infos().iter())
            .filter(|t| !used.contains(t.name.as_str()))
            .map(|t| t.name.clone())
            .collect();
        if !unused.is_empty() {
            return Err(Error::UnusedTensors {
                file: self.path.clone(),
                tensors: unused,
            });
        }
        Ok(())
    }
}
