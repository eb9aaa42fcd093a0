//! The graph text format: RON, canonical, versioned.
//!
//! Invariants:
//! - `to_ron(parse(to_ron(g))) == to_ron(g)` byte for byte (canonical form);
//! - one tensor per line, in id order; sources are referenced by name;
//! - defaults are omitted: `role` when Intermediate, `nb` when packed, `src`
//!   when empty; a parser accepts them spelled out, the printer never writes them;
//! - a file whose `format_version` is not [`FORMAT_VERSION`] is refused before
//!   anything else is read from it.

use crate::dtype::DType;
use crate::error::{Error, Violation};
use crate::graph::Graph;
use crate::layout::{Layout, contiguous_strides};
use crate::op::Op;
use crate::tensor::{ConstInit, Role, Tensor, TensorId};
use crate::{rules, verify};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The graph format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphText {
    format_version: u32,
    name: String,
    tensors: Vec<TensorText>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TensorText {
    name: String,
    #[serde(default = "intermediate", skip_serializing_if = "is_intermediate")]
    role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    op: Option<Op>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    src: Vec<String>,
    dtype: DType,
    #[serde(with = "as_list")]
    ne: [i64; 4],
    #[serde(default, skip_serializing_if = "Option::is_none", with = "as_opt_list")]
    nb: Option<[u64; 4]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    init: Option<ConstInit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard: Option<crate::shard::WeightShard>,
}

fn intermediate() -> Role {
    Role::Intermediate
}

fn is_intermediate(r: &Role) -> bool {
    *r == Role::Intermediate
}

/// `implicit_some` drops `Some(..)` around optional fields and
/// `unwrap_variant_newtypes` writes `Rope(mode: ..)` instead of `Rope((mode: ..))`.
pub(crate) fn extensions() -> ron::extensions::Extensions {
    ron::extensions::Extensions::IMPLICIT_SOME
        | ron::extensions::Extensions::UNWRAP_VARIANT_NEWTYPES
}

/// Fixed-size arrays as RON lists (`[512, 128, 1, 1]`) rather than tuples.
mod as_list {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer, T: serde::Serialize>(
        v: &[T; 4],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<[T; 4], D::Error> {
        let v: Vec<T> = Vec::deserialize(d)?;
        let n = v.len();
        v.try_into().map_err(|_| {
            serde::de::Error::custom(format!("expected a list of 4 values, found {n}"))
        })
    }
}

/// [`as_list`] for optional arrays.
mod as_opt_list {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<[u64; 4]>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_seq(v.iter()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u64; 4]>, D::Error> {
        let Some(v) = Option::<Vec<u64>>::deserialize(d)? else {
            return Ok(None);
        };
        let n = v.len();
        v.try_into().map(Some).map_err(|_| {
            serde::de::Error::custom(format!("expected a list of 4 strides, found {n}"))
        })
    }
}

#[derive(Deserialize)]
struct VersionProbe {
    format_version: u32,
}

/// Prints `graph` in canonical form.
pub fn to_ron(graph: &Graph) -> String {
    let text = GraphText {
        format_version: FORMAT_VERSION,
        name: graph.name.clone(),
        tensors: graph
            .tensors()
            .iter()
            .map(|t| tensor_text(graph, t))
            .collect(),
    };
    // Depth 2 puts each tensor on one line: diffs of graph files stay readable.
    let config = ron::ser::PrettyConfig::new()
        .extensions(extensions())
        .depth_limit(2)
        .indentor("  ".to_string())
        .separate_tuple_members(false)
        .struct_names(false);
    let mut out = ron::ser::to_string_pretty(&text, config).expect("graph text always serialises");
    out.push('\n');
    out
}

fn tensor_text(graph: &Graph, t: &Tensor) -> TensorText {
    let packed = contiguous_strides(t.layout.dtype, t.layout.ne) == Some(t.layout.nb);
    TensorText {
        name: t.name.clone(),
        role: t.role,
        op: t.op,
        src: t
            .srcs
            .iter()
            .map(|&s| graph.tensor(s).name.clone())
            .collect(),
        dtype: t.layout.dtype,
        ne: t.layout.ne,
        nb: (!packed).then_some(t.layout.nb),
        init: t.init.clone(),
        shard: t.shard.clone(),
    }
}

/// Parses a versioned RON file into `T`: the `format_version` field is read
/// first and must equal `supported`, so a file of another version is refused
/// before anything else in it is interpreted. Syntax errors carry line and column.
pub(crate) fn parse_versioned<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &str,
    supported: u32,
) -> Result<T, Error> {
    let syntax = |e: ron::error::SpannedError| Error::Syntax {
        path: path.to_string(),
        line: e.span.start.line,
        col: e.span.start.col,
        message: e.code.to_string(),
    };
    let options = ron::Options::default().with_default_extension(extensions());
    let probe: VersionProbe = options.from_str(text).map_err(syntax)?;
    if probe.format_version != supported {
        return Err(Error::FormatVersion {
            path: path.to_string(),
            found: probe.format_version,
            supported,
        });
    }
    options.from_str(text).map_err(syntax)
}

/// Parses graph text; `path` names the source in errors. The result is verified:
/// every violation is reported at once, with the line of the offending tensor.
pub fn parse(text: &str, path: &str) -> Result<Graph, Error> {
    let file: GraphText = parse_versioned(text, path, FORMAT_VERSION)?;
    let lines = tensor_lines(text, &file.tensors);
    let (graph, mut violations) = resolve(file);
    violations.extend(verify::verify(&graph));
    if violations.is_empty() {
        return Ok(graph);
    }
    for v in &mut violations {
        v.line = v
            .tensor
            .and_then(|i| lines.get(i as usize).copied().flatten());
    }
    Err(Error::Invalid {
        path: path.to_string(),
        violations,
    })
}

/// Reads and parses a graph file.
pub fn read_graph(path: &Path) -> Result<Graph, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// Writes `graph` to `path` in canonical form, atomically (a temporary file
/// in the same folder, then a rename), so a failure leaves no partial file.
pub fn write_graph(path: &Path, graph: &Graph) -> Result<(), Error> {
    write_atomically(path, to_ron(graph).as_bytes())
}

/// Writes `bytes` to `path` through a temporary sibling file and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file_name}.tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// Turns names into ids and derives views, collecting problems that stop a
/// tensor from being resolved (unknown source names, shapes the rules reject).
fn resolve(file: GraphText) -> (Graph, Vec<Violation>) {
    let mut by_name: BTreeMap<String, TensorId> = BTreeMap::new();
    let mut tensors: Vec<Tensor> = Vec::with_capacity(file.tensors.len());
    let mut problems = Vec::new();
    for (i, tt) in file.tensors.into_iter().enumerate() {
        let mut srcs = Vec::with_capacity(tt.src.len());
        for s in &tt.src {
            match by_name.get(s) {
                Some(&id) => srcs.push(id),
                None => problems.push(Violation {
                    tensor: Some(i as u32),
                    name: tt.name.clone(),
                    op: tt.op.map_or("leaf", |o| o.name()).to_string(),
                    line: None,
                    message: format!("source '{s}' is not defined before this tensor"),
                }),
            }
        }
        let nb = tt
            .nb
            .or_else(|| contiguous_strides(tt.dtype, tt.ne))
            .unwrap_or([0; 4]);
        let layout = Layout {
            dtype: tt.dtype,
            ne: tt.ne,
            nb,
        };
        // A node's view is derived, not written; if the rules reject the node the
        // verifier reports why, so here a failure just leaves no view.
        let view = match (&tt.op, srcs.len() == tt.src.len()) {
            (Some(op), true) => {
                let operands: Vec<_> = srcs.iter().map(|&s| (s, &tensors[s.index()])).collect();
                rules::derive(op, &operands, Some(&layout))
                    .ok()
                    .and_then(|d| d.view)
            }
            _ => None,
        };
        by_name.entry(tt.name.clone()).or_insert(TensorId(i as u32));
        tensors.push(Tensor {
            name: tt.name,
            layout,
            role: tt.role,
            op: tt.op,
            srcs: if problems.iter().any(|p| p.tensor == Some(i as u32)) {
                vec![]
            } else {
                srcs
            },
            view,
            init: tt.init,
            shard: tt.shard,
        });
    }
    (Graph::from_tensors(file.name, tensors), problems)
}

/// The 1-based line where each tensor's entry starts, found by its name.
fn tensor_lines(text: &str, tensors: &[TensorText]) -> Vec<Option<usize>> {
    let mut from_line = 0;
    let lines: Vec<&str> = text.lines().collect();
    tensors
        .iter()
        .map(|t| {
            let needle = format!("\"{}\"", t.name);
            let hit = (from_line..lines.len()).find(|&l| lines[l].contains(&needle))?;
            from_line = hit + 1;
            Some(hit + 1)
        })
        .collect()
}
