//! The fuzz targets' inputs on the stable toolchain: every seed under
//! `fuzz/seeds/` and every input that once made a target fail (kept under
//! `tests/fuzz_regressions/<target>/`) runs through the target's body
//! (`ggplan_tests::fuzz`), so a fixed bug stays fixed. The seeds are made by
//! code (`ggplan_tests::fuzz::seeds`); `GGPLAN_BLESS=1` rewrites the folder.

use ggplan_tests::fuzz::{TARGETS, seeds};
use ggplan_tests::workspace_root;
use std::path::{Path, PathBuf};

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.retain(|p| p.is_file());
    files.sort();
    files
}

#[test]
fn the_committed_seeds_are_the_ones_the_code_makes() {
    let dir = workspace_root().join("fuzz/seeds");
    let bless = std::env::var_os("GGPLAN_BLESS").is_some_and(|v| v == "1");
    let seeds = seeds::all();
    let mut stale = Vec::new();
    for (target, name, bytes) in &seeds {
        let path = dir.join(target).join(name);
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
        } else if std::fs::read(&path).ok().as_ref() != Some(bytes) {
            stale.push(path.display().to_string());
        }
    }
    // No seed file that the code no longer makes.
    for (target, _) in TARGETS {
        for path in files_in(&dir.join(target)) {
            let name = path.file_name().unwrap().to_string_lossy();
            if !seeds.iter().any(|(t, n, _)| t == target && *n == name) {
                if bless {
                    std::fs::remove_file(&path).unwrap();
                } else {
                    stale.push(format!("{} (not made by the code)", path.display()));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "stale seeds (GGPLAN_BLESS=1 rewrites them): {stale:#?}"
    );
}

#[test]
fn every_seed_and_past_failure_runs_clean_through_its_target() {
    let root = workspace_root();
    let mut ran = 0;
    for (target, body) in TARGETS {
        let seeds = files_in(&root.join("fuzz/seeds").join(target));
        assert!(!seeds.is_empty(), "fuzz/seeds/{target} has no seeds");
        for path in seeds
            .iter()
            .chain(&files_in(&root.join("tests/fuzz_regressions").join(target)))
        {
            let data = std::fs::read(path).unwrap();
            // A failing input names itself before the body's own message.
            let result = std::panic::catch_unwind(|| body(&data));
            assert!(
                result.is_ok(),
                "{target}: {} fails (see the panic above)",
                path.display()
            );
            ran += 1;
        }
    }
    assert!(ran >= TARGETS.len());
}

/// The structure-aware plan target is more than a checker test: some edits
/// pass the checker and reach the runtime, and some are refused.
#[test]
fn plan_edits_reach_the_runtime_and_the_checker_refuses_others() {
    use ggplan_tests::fuzz::{PlanOutcome, plan_edit_outcome};
    let mut rng = ggplan_tests::TestRng::new(42);
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..300 {
        let data: Vec<u8> = (0..48).map(|_| rng.below(256) as u8).collect();
        *counts.entry(plan_edit_outcome(&data)).or_insert(0) += 1;
    }
    let ran = counts.get(&PlanOutcome::Ran).copied().unwrap_or(0);
    let refused = counts.get(&PlanOutcome::Refused).copied().unwrap_or(0);
    assert!(ran >= 10 && refused >= 10, "{counts:?}");
}
