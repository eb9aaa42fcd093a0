//! The plan's text form: canonical RON, versioned.
//!
//! Invariant: a file whose `format_version` is not [`PLAN_FORMAT_VERSION`] is
//! refused before anything else is read from it.

use super::Plan;
use crate::error::Error;
use crate::text::extensions;
use std::path::Path;

/// The plan format version this build reads and writes.
pub const PLAN_FORMAT_VERSION: u32 = 1;

/// One value as single-line RON (implicit `Some`, no header).
fn line<T: serde::Serialize>(value: &T) -> String {
    let options = ron::Options::default().with_default_extension(extensions());
    let config = ron::ser::PrettyConfig::new()
        .depth_limit(0)
        .struct_names(false);
    options
        .to_string_pretty(value, config)
        .expect("plan values always serialise")
}

/// `  name: [\n` + one element per line + `  ],\n`, at `indent`.
fn list<T: serde::Serialize>(out: &mut String, indent: &str, name: &str, items: &[T]) {
    if items.is_empty() {
        out.push_str(&format!("{indent}{name}: [],\n"));
        return;
    }
    out.push_str(&format!("{indent}{name}: [\n"));
    for item in items {
        out.push_str(&format!("{indent}  {},\n", line(item)));
    }
    out.push_str(&format!("{indent}],\n"));
}

/// Prints a plan canonically: one tensor, arena, kernel, copy or step per line,
/// so plans diff well and a person can find any decision with grep.
pub fn plan_to_ron(plan: &Plan) -> String {
    let mut s = String::from("(\n");
    let field = |s: &mut String, name: &str, v: String| s.push_str(&format!("  {name}: {v},\n"));
    field(&mut s, "format_version", line(&plan.format_version));
    field(&mut s, "compiler_version", line(&plan.compiler_version));
    field(&mut s, "graph_name", line(&plan.graph_name));
    field(&mut s, "graph_hash", line(&plan.graph_hash));
    field(&mut s, "target_name", line(&plan.target_name));
    field(&mut s, "options", line(&plan.options));
    list(&mut s, "  ", "devices", &plan.devices);
    field(&mut s, "n_graph_tensors", line(&plan.n_graph_tensors));
    list(&mut s, "  ", "tensors", &plan.tensors);
    list(&mut s, "  ", "arenas", &plan.arenas);
    list(&mut s, "  ", "kernels", &plan.kernels);
    s.push_str("  splits: [\n");
    for split in &plan.splits {
        s.push_str(&format!("    (\n      device: {},\n", line(&split.device)));
        list(&mut s, "      ", "copies", &split.copies);
        list(&mut s, "      ", "steps", &split.steps);
        s.push_str("    ),\n");
    }
    s.push_str("  ],\n  stats: (\n");
    let st = &plan.stats;
    list(&mut s, "    ", "devices", &st.devices);
    s.push_str(&format!("    n_splits: {},\n", line(&st.n_splits)));
    list(&mut s, "    ", "links", &st.links);
    s.push_str(&format!("    fused_nodes: {},\n", line(&st.fused_nodes)));
    s.push_str(&format!("    estimated_us: {},\n", line(&st.estimated_us)));
    s.push_str("  ),\n)\n");
    s
}

/// Parses plan text; `path` names the source in errors.
pub fn parse_plan(text: &str, path: &str) -> Result<Plan, Error> {
    crate::text::parse_versioned(text, path, PLAN_FORMAT_VERSION)
}

/// Reads and parses a plan file.
pub fn read_plan(path: &Path) -> Result<Plan, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_plan(&text, &path.display().to_string())
}

/// Writes a plan atomically in canonical form.
pub fn write_plan(path: &Path, plan: &Plan) -> Result<(), Error> {
    crate::text::write_atomically(path, plan_to_ron(plan).as_bytes())
}
