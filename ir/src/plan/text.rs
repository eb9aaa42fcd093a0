//! The plan's text form: canonical RON, versioned.
//!
//! Invariant: a file whose `format_version` is not [`PLAN_FORMAT_VERSION`] is
//! refused before anything else is read from it.

use super::Plan;
use crate::error::Error;
use serde::Deserialize;
use std::path::Path;

/// The plan format version this build reads and writes.
pub const PLAN_FORMAT_VERSION: u32 = 1;

#[derive(Deserialize)]
struct VersionProbe {
    format_version: u32,
}

fn extensions() -> ron::extensions::Extensions {
    ron::extensions::Extensions::IMPLICIT_SOME
        | ron::extensions::Extensions::UNWRAP_VARIANT_NEWTYPES
}

/// Prints a plan canonically (one tensor, copy or step per line).
pub fn plan_to_ron(plan: &Plan) -> String {
    let config = ron::ser::PrettyConfig::new()
        .extensions(extensions())
        .depth_limit(3)
        .indentor("  ".to_string())
        .struct_names(false);
    let mut out = ron::ser::to_string_pretty(plan, config).expect("plans always serialise");
    out.push('\n');
    out
}

/// Parses plan text; `path` names the source in errors.
pub fn parse_plan(text: &str, path: &str) -> Result<Plan, Error> {
    let syntax = |e: ron::error::SpannedError| Error::Syntax {
        path: path.to_string(),
        line: e.span.start.line,
        col: e.span.start.col,
        message: e.code.to_string(),
    };
    let options = ron::Options::default().with_default_extension(extensions());
    let probe: VersionProbe = options.from_str(text).map_err(syntax)?;
    if probe.format_version != PLAN_FORMAT_VERSION {
        return Err(Error::FormatVersion {
            path: path.to_string(),
            found: probe.format_version,
            supported: PLAN_FORMAT_VERSION,
        });
    }
    options.from_str(text).map_err(syntax)
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
