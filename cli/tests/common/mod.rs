//! What every end-to-end test of the `ggplan` binary needs: running it,
//! reading what it printed, example paths, scratch folders.
#![allow(dead_code)] // each test binary uses its own subset

pub mod llama_cpp;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `ggplan` with `args`.
pub fn ggplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ggplan"))
        .args(args)
        // Logging is asserted quiet by default; a caller's RUST_LOG would turn it on.
        .env_remove("RUST_LOG")
        .output()
        .expect("ggplan runs")
}

/// Its stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `ggplan` with `args`, which must succeed; returns what it printed.
pub fn ggplan_ok(args: &[&str]) -> String {
    let out = ggplan(args);
    let printed = text(&out);
    assert!(out.status.success(), "{args:?}: {printed}");
    printed
}

/// Runs `ggplan` with `args`, which must fail as bad input does (exit code
/// 1, no panic); returns what it printed.
pub fn ggplan_error(args: &[&str]) -> String {
    let out = ggplan(args);
    let printed = text(&out);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {printed}");
    printed
}

/// The path of `examples/graphs/<name>`.
pub fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/graphs")
        .join(name)
        .display()
        .to_string()
}

/// A fresh, empty folder for one test, unique to this call.
pub fn scratch_dir(tag: &str) -> PathBuf {
    // Tests run in parallel and may share a tag: the counter keeps them apart.
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ggplan-cli-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
