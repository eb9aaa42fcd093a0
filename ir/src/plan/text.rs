//! The plan's text form: canonical RON, versioned.
//!
//! Invariant: a file whose `format_version` is not [`PLAN_FORMAT_VERSION`] is
//! refused before anything else is read from it.

use super::Plan;
use crate::error::Error;
use crate::text::extensions;
use std::path::Path;

/// The plan format version this build reads and writes.
/// Version 3 added `Step::MulMatAdd`: a version-2 runtime would not know it;
/// version 4 `Step::Attention`, `Step::MulMatGlu` and `Step::MulMatMany`;
/// version 5 `Step::RopeStore`.
pub const PLAN_FORMAT_VERSION: u32 = 5;

/// One value as single-line RON (implicit `Some`, no header): how messages
/// quote a plan value, in the file's own notation.
pub(crate) fn line<T: serde::Serialize>(value: &T) -> String {
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
    list(&mut s, "  ", "streams", &plan.streams);
    field(&mut s, "n_events", line(&plan.n_events));
    s.push_str("  splits: [\n");
    for split in &plan.splits {
        s.push_str(&format!(
            "    (\n      device: {},\n      stream: {},\n",
            line(&split.device),
            line(&split.stream)
        ));
        list(&mut s, "      ", "copies", &split.copies);
        if !split.waits.is_empty() {
            field_at(&mut s, "      ", "waits", line(&split.waits));
        }
        if !split.records.is_empty() {
            field_at(&mut s, "      ", "records", line(&split.records));
        }
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
    s.push_str(&format!("    split_us: {},\n", line(&st.split_us)));
    s.push_str("  ),\n)\n");
    s
}

/// `name: value,` on one line at `indent`.
fn field_at(out: &mut String, indent: &str, name: &str, value: String) {
    out.push_str(&format!("{indent}{name}: {value},\n"));
}

/// Parses plan text; `path` names the source in errors. An older plan is
/// refused with the command that remakes it: a version-1 plan (made before
/// streams and events were explicit) because its order between devices was
/// implied, and re-deriving it is the compiler's job, which the runtime never
/// runs; a version-2 plan (made before products fused with their residual
/// add), a version-3 one (before attention, and gate and up products with
/// their GLU, ran as one step) or a version-4 one (before rotary embeddings
/// ran with their cache stores) because it would run more kernels than a
/// recompiled one.
pub fn parse_plan(text: &str, path: &str) -> Result<Plan, Error> {
    const RECOMPILE: &str = "recompile its graph with \
                             `ggplan compile GRAPH --target TARGET -o PLAN.ron` (the plan's \
                             target_name and options say which)";
    crate::text::parse_versioned(text, path, PLAN_FORMAT_VERSION).map_err(|e| match e {
        Error::FormatVersion {
            found: found @ (1..=4),
            ..
        } => Error::Outdated {
            path: path.to_string(),
            found,
            supported: PLAN_FORMAT_VERSION,
            remedy: match found {
                1 => format!("it predates explicit streams and events; {RECOMPILE}"),
                2 => format!("it predates mul_mat steps fused with their add; {RECOMPILE}"),
                4 => format!(
                    "it predates rotary embeddings fused with their cache stores; {RECOMPILE}"
                ),
                _ => format!(
                    "it predates attention steps and mul_mat steps fused with their GLU; \
                     {RECOMPILE}"
                ),
            },
        },
        other => other,
    })
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
