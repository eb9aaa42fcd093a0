//! `ggplan` on a host without AVX-512 or VNNI, emulated: `qemu-x86_64 -cpu
//! max` (QEMU 7.2's TCG, Debian 12's `qemu-user`) reports SSE4.2, AVX, AVX2,
//! FMA and F16C and nothing wider, so every kernel family must choose its
//! AVX2 form at load. An AVX-512 or VNNI instruction reached without its
//! check would stop the emulated process (SIGILL), a dispatch that took a
//! wrong form would fail `--check=all`, and the integer kernels must give
//! this host's bits. Speed under emulation means nothing; only behaviour is
//! asserted.
//!
//! Without `qemu-x86_64` each test prints why and returns, unless
//! `GGPLAN_REQUIRE_QEMU=1` (CI: scripts/setup.sh installs it), where it fails.
//! scripts/avx2-emulated.sh runs the kernel tests and SmolLM2 the same way.
#![cfg(target_arch = "x86_64")]

mod common;

use common::{scratch_dir, text};
use std::path::Path;
use std::process::{Command, Output};

/// The emulator, or `None` (with the reason printed) where it is missing.
fn qemu() -> Option<&'static str> {
    const QEMU: &str = "qemu-x86_64";
    let found = Command::new(QEMU).arg("-version").output().is_ok();
    if !found {
        let required = std::env::var("GGPLAN_REQUIRE_QEMU").is_ok_and(|v| v == "1");
        assert!(!required, "GGPLAN_REQUIRE_QEMU=1 but {QEMU} is not on PATH");
        eprintln!("skipped: {QEMU} not found (apt-get install qemu-user)");
        return None;
    }
    Some(QEMU)
}

/// Runs `ggplan args` on the emulated AVX2 host.
fn ggplan_on_avx2(qemu: &str, args: &[&str]) -> Output {
    Command::new(qemu)
        .args(["-cpu", "max", env!("CARGO_BIN_EXE_ggplan")])
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("qemu-x86_64 runs")
}

/// tests/data/cuda_ops.ron (every op at odd sizes; every block format in
/// products of one, three and 13 columns) compiled for the CPU into `dir`.
fn every_op_plan(dir: &Path) -> String {
    let graph = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/cuda_ops.ron");
    let plan = dir.join("ops.plan.ron");
    let out = common::ggplan(&[
        "compile",
        graph.to_str().unwrap(),
        "--target",
        "cpu",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    plan.display().to_string()
}

#[test]
fn the_emulated_host_has_avx2_and_nothing_wider() {
    let Some(qemu) = qemu() else { return };
    let out = ggplan_on_avx2(qemu, &["devices"]);
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    let simd = printed
        .lines()
        .find(|l| l.trim_start().starts_with("simd:"))
        .unwrap_or_else(|| panic!("no simd line: {printed}"));
    assert!(simd.contains("avx2") && simd.contains("fma"), "{simd}");
    assert!(!simd.contains("avx512") && !simd.contains("vnni"), "{simd}");
}

#[test]
fn every_op_passes_its_check_with_avx2_kernels() {
    let Some(qemu) = qemu() else { return };
    let dir = scratch_dir("avx2_ops");
    let plan = every_op_plan(&dir);
    let out = ggplan_on_avx2(
        qemu,
        &["run", &plan, "--random-weights", "7", "--check=all"],
    );
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains(" 0 over threshold"), "{printed}");
}

#[test]
fn quantized_products_equal_this_hosts_bit_for_bit() {
    // The integer kernels of every ISA sum the same 8-bit products exactly
    // and scale them in the same order, so the AVX2 forms the emulated host
    // takes give this host's bits (its own forms: AVX-512 / VNNI here).
    let Some(qemu) = qemu() else { return };
    let dir = scratch_dir("avx2_bits");
    let plan = every_op_plan(&dir);
    let (native, emulated) = (dir.join("native"), dir.join("avx2"));
    let run = ["run", &plan, "--random-weights", "7", "--save"];
    let out = common::ggplan(&[&run[..], &[native.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let out = ggplan_on_avx2(qemu, &[&run[..], &[emulated.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let mut compared = Vec::new();
    for entry in std::fs::read_dir(&native).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if !(name.starts_with("mm_q") || name.starts_with("rows_q")) {
            continue;
        }
        let a = std::fs::read(native.join(&name)).unwrap();
        let b = std::fs::read(emulated.join(&name)).unwrap();
        assert!(a == b, "{name}: the emulated AVX2 host's bytes differ");
        compared.push(name);
    }
    // Ten products (every block format; Q4_K and Q6_K on one and 13
    // columns) and four row gathers.
    assert_eq!(compared.len(), 14, "{compared:?}");
}

#[test]
fn bench_names_the_avx2_kernel_of_every_product() {
    let Some(qemu) = qemu() else { return };
    let dir = scratch_dir("avx2_bench");
    let plan = every_op_plan(&dir);
    let out = ggplan_on_avx2(
        qemu,
        &["bench", &plan, "--random-weights", "7", "--runs", "1"],
    );
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("JIT 8-lane f32 vectors"), "{printed}");
    let products: Vec<&str> = printed
        .lines()
        .filter(|l| l.contains(" x mul_mat "))
        .collect();
    // Every weight format of the graph: f16, f32, and eight block formats.
    assert_eq!(products.len(), 10, "{printed}");
    for line in products {
        assert!(!line.contains("512") && !line.contains("vnni"), "{line}");
        // The f32 x f32 products (activation by activation) go to `gemm`,
        // which picks its own instructions; every other names AVX2.
        assert!(
            line.contains("avx2") || line.contains("(gemm f32)"),
            "{line}"
        );
    }
}
