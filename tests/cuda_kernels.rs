//! The CUDA kernels compiled without a GPU: the op library and the kernels
//! generated for every CUDA step of the example plans and of
//! tests/data/cuda_ops.ron (on `cuda0` and `cpu+cuda0`) and of SmolLM2's and
//! MiniLM's plans, compiled by NVRTC to PTX
//! for sm_80 and sm_90 and assembled by ptxas (registers, spills). A kernel
//! that does not compile, or a hot kernel that spills, fails.
//!
//! NVRTC and ptxas come from the PyPI wheels nvidia-cuda-nvrtc-cu12 and
//! nvidia-cuda-nvcc-cu12, which `scripts/setup.sh` installs into
//! `.models/venv` (`scripts/test.sh` puts them on the paths). Where they are
//! missing the test prints why and returns, unless `GGPLAN_REQUIRE_NVRTC=1`
//! (CI sets it), where it fails. The PTX lands in the kernel cache
//! (`GGPLAN_CUDA_CACHE`), so a GPU host without NVRTC can load it.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ggplan_tests::example_graph_files;
use runtime::device::cuda::nvrtc;
use runtime::device::cuda::sources::{LIBRARY_KERNELS, PlanKernels, plan_kernels};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn required() -> bool {
    std::env::var("GGPLAN_REQUIRE_NVRTC").is_ok_and(|v| v == "1")
}

/// ptxas: `GGPLAN_PTXAS`, else on PATH.
fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GGPLAN_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let ok = Command::new("ptxas")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| PathBuf::from("ptxas"))
}

fn plans() -> Vec<(String, ir::plan::Plan)> {
    let mut files = example_graph_files();
    files.push(ggplan_tests::workspace_root().join("tests/data/cuda_ops.ron"));
    let mut graphs: Vec<(String, ir::Graph)> = files
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            (name, ir::text::read_graph(&p).unwrap())
        })
        .collect();
    if let Some(path) = ggplan_tests::models::smollm2_gguf() {
        let file = ir::files::gguf::GgufFile::open(&path).unwrap();
        let cfg = models::llama::LlamaConfig::from_gguf(&file, 16).unwrap();
        graphs.push((
            "smollm2".into(),
            models::llama::build_prefill(&cfg).unwrap(),
        ));
        let cfg = models::llama::LlamaConfig::from_gguf(&file, 1).unwrap();
        for kv_dtype in [ir::DType::F32, ir::DType::F16] {
            let cache = models::llama::CacheConfig {
                n_ctx: 64,
                kv_dtype,
            };
            let g = models::llama::build_cached(&cfg, &cache).unwrap();
            graphs.push((format!("smollm2-decode-{kv_dtype}"), g));
        }
    } else {
        println!("SmolLM2 not installed (scripts/setup.sh): its plans are not compiled here");
    }
    graphs.push(("qwen3moe-decode".into(), moe_decode_graph()));
    if let Some(dir) = ggplan_tests::models::minilm_dir() {
        let cfg = models::bert::BertConfig::from_hf_dir(&dir, 16).unwrap();
        graphs.push(("minilm".into(), models::bert::build_encoder(&cfg).unwrap()));
    } else {
        println!("MiniLM not installed (scripts/setup.sh): its plan is not compiled here");
    }
    let mut out = Vec::new();
    for (name, graph) in graphs {
        for target in ["cuda0", "cpu+cuda0"] {
            let plan = compile(
                &graph,
                &Target::preset(target).unwrap(),
                &CompileOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{name} for {target}: {e}"))
            .plan;
            out.push((format!("{name} on {target}"), plan));
        }
    }
    out
}

#[test]
fn every_cuda_step_of_the_example_and_model_plans_has_a_kernel() {
    let mut generated = BTreeMap::new();
    for (name, plan) in plans() {
        let k: PlanKernels = plan_kernels(&plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        let on_gpu = plan
            .splits
            .iter()
            .filter(|s| plan.devices[s.device.index()].name == "cuda0")
            .map(|s| s.steps.len())
            .sum::<usize>();
        assert_eq!(k.steps, on_gpu, "{name}: every GPU step launches");
        assert!(k.steps > 0, "{name} runs something on cuda0");
        // A GPU loads only the listed entry points of the op library.
        for kernel in k.library.keys() {
            assert!(
                LIBRARY_KERNELS.contains(&kernel.as_str()),
                "{name}: {kernel} is launched but not in LIBRARY_KERNELS"
            );
        }
        generated.extend(k.generated);
    }
    assert!(
        generated.len() >= 3,
        "fused bodies and elementwise ops: {generated:?}"
    );
}

/// A Qwen 3 MoE decode step of the random model's shape (2 blocks, 64 wide,
/// 8 experts of 32, 2 per token, Q4_K matrices): router, argsort, top-k
/// view, weights gathered, clamped and divided, `mul_mat_id` experts, all
/// on the GPU.
fn moe_decode_graph() -> ir::Graph {
    use ir::{DType, RopeMode, RopeParams};
    use models::llama::{CacheConfig, LlamaConfig, LlamaNames, Moe, QkNorm};
    let cfg = LlamaConfig {
        n_layer: 2,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 128,
        n_vocab: 100,
        n_tokens: 1,
        rms_eps: 1e-6,
        rope: RopeParams::plain(RopeMode::Neox, 64, 1e6),
        weight_dtype: DType::Q4_K,
        matrix_dtypes: Default::default(),
        embd_dtype: DType::F32,
        output_dtype: DType::F32,
        tied_output: false,
        qkv_bias: false,
        rope_factors: false,
        qk_norm: QkNorm::PerHead,
        gemma3: None,
        moe: Some(Moe {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 256,
            renormalise: true,
        }),
        last_logits_only: false,
        names: LlamaNames::Gguf,
    };
    let cache = CacheConfig {
        n_ctx: 32,
        kv_dtype: DType::F16,
    };
    models::llama::build_cached(&cfg, &cache).unwrap()
}

/// Every op of a mixture of experts runs on `cuda0` (none falls back to the
/// CPU): `mul_mat_id` with quantized experts and `argsort` have kernels.
#[test]
fn a_mixture_of_experts_runs_wholly_on_cuda0() {
    let plan = (plans().into_iter())
        .find(|(name, _)| name == "qwen3moe-decode on cuda0")
        .map(|(_, plan)| plan)
        .expect("the MoE plan");
    assert_eq!(plan.splits.len(), 1, "one split, on cuda0");
    let k = plan_kernels(&plan).unwrap();
    for kernel in ["mul_mat_id_vec", "argsort"] {
        assert!(
            k.library.contains_key(kernel),
            "{kernel} in {:?}",
            k.library
        );
    }
}

/// SmolLM2's decode step on `cuda0`: the kernel launches per token that
/// `ggplan show` prints, pinned. 603 is what the H100 ran (each a few
/// microseconds of work, so decode is launch-bound); 543 since each of the
/// 30 layers' output projections (`attn_out`, `ffn_out`) runs with its
/// residual add as one `mul_mat + add` step (2 × 30 launches fewer); then
/// each layer's attention (`mul_mat(k, q)`, `soft_max`, `mul_mat(v,
/// probs)`, the head-merging `cont`) as one `attention` step (3 × 30
/// fewer), its `ffn_gate` and `ffn_up` with their SwiGLU (`ffn_silu` +
/// `ffn_gate_par`) as one `mul_mat + glu` step (2 × 30 fewer) and its `q`,
/// `k` and `v` projections (one normed input) as one `mul_mat x N` step
/// (2 × 30 fewer): 333; then each layer's V store, K rope, K store and Q
/// rope as one `rope + set_rows` step (3 × 30 fewer): 243, 8 per layer, under
/// the GPU issue's goal of 250. Lower the pin when fusion lands; a rise is a
/// regression.
#[test]
fn smollm2_decode_launches_per_token_on_cuda0_are_pinned() {
    const PINNED: usize = 243;
    let found: Vec<(String, usize)> = (plans().into_iter())
        .filter(|(name, _)| name.starts_with("smollm2-decode") && name.ends_with("on cuda0"))
        .map(|(name, plan)| (name, ggplan::plan::cuda_launches_per_run(&plan)[0].1))
        .collect();
    if ggplan_tests::models::smollm2_gguf().is_none() {
        return; // plans() said so
    }
    assert_eq!(found.len(), 2, "F32 and F16 cache plans: {found:?}");
    for (name, launches) in found {
        assert_eq!(launches, PINNED, "{name}: launches per token");
    }
}

/// (kernel, registers, spill store bytes) per entry point, from `ptxas -v`.
fn ptxas_report(ptxas: &PathBuf, ptx: &str, sm: &str) -> Vec<(String, u32, u32)> {
    let dir = std::env::temp_dir().join(format!("ggplan-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join(format!("{sm}.ptx"));
    std::fs::write(&input, ptx).unwrap();
    let out = Command::new(ptxas)
        .args(["-v", &format!("-arch={sm}"), "-o"])
        .arg(dir.join(format!("{sm}.cubin")))
        .arg(&input)
        .output()
        .expect("ptxas runs");
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "ptxas -arch={sm} failed:\n{log}");
    let mut report = Vec::new();
    let mut current = String::new();
    let mut spills = 0;
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().unwrap_or("").to_string();
        } else if line.contains("spill stores") {
            spills = line
                .split("bytes spill stores")
                .next()
                .and_then(|s| s.rsplit(',').next())
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
        } else if let Some(rest) = line.split("Used ").nth(1) {
            let regs = rest
                .split(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            report.push((current.clone(), regs, spills));
        }
    }
    report
}

#[test]
fn the_cuda_kernels_compile_with_nvrtc_and_assemble_with_ptxas() {
    if !nvrtc::nvrtc_present() {
        let why = "NVRTC (libnvrtc.so) cannot be loaded: scripts/setup.sh installs the \
                   nvidia-cuda-nvrtc-cu12 wheel; scripts/test.sh puts it on LD_LIBRARY_PATH";
        assert!(!required(), "GGPLAN_REQUIRE_NVRTC=1 but {why}");
        println!("skipped: {why}");
        return;
    }
    let ptxas = ptxas();
    if ptxas.is_none() {
        assert!(
            !required(),
            "GGPLAN_REQUIRE_NVRTC=1 but ptxas is not on PATH or GGPLAN_PTXAS"
        );
        println!("ptxas not found: PTX is compiled but not assembled");
    }
    // Every module loading compiles (and caches), once each.
    let mut all = PlanKernels::default();
    for (name, plan) in plans() {
        let k = plan_kernels(&plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        all.generated.extend(k.generated);
    }
    let modules = all.modules();
    let generated = &all.generated;
    let mut kernels = 0;
    for (arch, sm) in [("compute_80", "sm_80"), ("compute_90", "sm_90")] {
        for (name, source) in &modules {
            let ptx = nvrtc::ptx(source, arch, "cuda0")
                .unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
            let Some(ptxas) = &ptxas else { continue };
            for (kernel, regs, spills) in ptxas_report(ptxas, &ptx, sm) {
                kernels += 1;
                println!("{sm} {kernel}: {regs} registers, {spills} bytes spilled");
                assert_eq!(spills, 0, "{kernel} spills on {sm} ({name})");
            }
        }
    }
    println!(
        "{} generated kernels; {kernels} entry points assembled",
        generated.len()
    );
}

#[test]
fn a_kernel_that_does_not_compile_is_an_error_with_nvrtcs_log() {
    if !nvrtc::nvrtc_present() {
        assert!(
            !required(),
            "GGPLAN_REQUIRE_NVRTC=1 but NVRTC cannot be loaded"
        );
        println!("skipped: NVRTC (libnvrtc.so) cannot be loaded");
        return;
    }
    let source = "extern \"C\" __global__ void broken(float *x) { x[0] = undeclared_name; }";
    let err = nvrtc::compile(source, "compute_90", "cuda0")
        .expect_err("does not compile")
        .to_string();
    assert!(
        err.contains("cuda0") && err.contains("NVRTC") && err.contains("undeclared_name"),
        "{err}"
    );
}
