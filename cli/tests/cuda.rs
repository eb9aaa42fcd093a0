//! `ggplan` and CUDA without a GPU: `compile --emit-cuda` writes the kernels
//! a plan's GPU steps launch (their PTX where NVRTC loads, which CI sees
//! through scripts/cuda-env.sh), a plan with no GPU step is refused with
//! nothing written, and running a GPU plan on a machine without a GPU exits 1
//! naming the device and the driver's reason.

mod common;

use common::{example, ggplan, scratch_dir, text};

#[test]
fn compile_emits_the_cuda_kernels_of_a_gpu_plan() {
    let dir = scratch_dir("cuda_emit");
    let plan = dir.join("plan.ron");
    let kernels = dir.join("kernels");
    let out = ggplan(&[
        "compile",
        &example("llama2l.ron"),
        "--target",
        "cuda0",
        "-o",
        plan.to_str().unwrap(),
        "--emit-cuda",
        kernels.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let files: Vec<String> = std::fs::read_dir(&kernels)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(files.iter().any(|f| f == "op_library.cu"), "{files:?}");
    assert!(files.iter().any(|f| f.starts_with("fused_")), "{files:?}");
    let with_ptx = text(&out).contains("with PTX");
    let ptx = files
        .iter()
        .filter(|f| f.ends_with("-compute_90.ptx"))
        .count();
    let modules = files.iter().filter(|f| f.ends_with(".cu")).count();
    assert_eq!(ptx, if with_ptx { modules } else { 0 }, "{files:?}");
    if std::env::var("GGPLAN_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
        assert!(with_ptx, "NVRTC required: {}", text(&out));
    }

    // A plan with nothing on a GPU: refused, and no plan written.
    let cpu_plan = dir.join("cpu.ron");
    let out = ggplan(&[
        "compile",
        &example("mlp.ron"),
        "--target",
        "cpu",
        "-o",
        cpu_plan.to_str().unwrap(),
        "--emit-cuda",
        kernels.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("nothing on a CUDA device"),
        "{}",
        text(&out)
    );
    assert!(!cpu_plan.exists());
}

#[test]
fn a_gpu_plan_without_a_gpu_exits_1_naming_the_device() {
    if std::path::Path::new("/dev/nvidia0").exists() {
        println!("skipped: this machine has a GPU");
        return;
    }
    let dir = scratch_dir("cuda_run");
    let plan = dir.join("plan.ron");
    let out = ggplan(&[
        "compile",
        &example("mlp.ron"),
        "--target",
        "cuda0",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = ggplan(&["run", plan.to_str().unwrap(), "--random-weights", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("cuda0"), "{}", text(&out));
}
