//! The CUDA sources of a plan, made without a GPU: the op library and the
//! kernels generated for the steps its CUDA devices run. What
//! `ggplan compile --emit-cuda` stores beside a plan, and what CI compiles
//! with NVRTC and assembles with ptxas on machines without a GPU.

use super::launch::{self, Kernel};
use crate::RuntimeError;
use crate::device::cpu::RawTensor;
use ir::plan::{DeviceKind, Plan, Step};
use std::collections::BTreeMap;

/// The op library's source (`kernels/common.cuh` + `kernels/blocks.cuh` +
/// `kernels/ops.cu` + `kernels/attention.cu` + `kernels/product_glu.cu` +
/// `kernels/product_many.cu` + `kernels/rope_store.cu`).
pub fn library_source() -> String {
    format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n{}",
        include_str!("kernels/common.cuh"),
        include_str!("kernels/blocks.cuh"),
        include_str!("kernels/ops.cu"),
        include_str!("kernels/attention.cu"),
        include_str!("kernels/product_glu.cu"),
        include_str!("kernels/product_many.cu"),
        include_str!("kernels/rope_store.cu")
    )
}

/// The entry points of the op library.
pub const LIBRARY_KERNELS: &[&str] = &[
    "mul_mat_vec",
    "mul_mat_tiled",
    "get_rows",
    "soft_max",
    "rope",
    "copy_elements",
    "set_rows",
    "concat",
    "row_sum",
    "argmax",
    "diag_mask_inf",
    "glu_halves",
    "mul_mat_id_vec",
    "argsort",
    "attention",
    "mul_mat_glu_vec",
    "mul_mat_glu_tiled",
    "mul_mat_many_vec",
    "mul_mat_many_tiled",
    "rope_store",
];

/// The module of one generated kernel: common.cuh, then its source. Each
/// generated kernel is its own module, compiled and cached once per
/// distinct body whatever plan it appears in.
pub fn kernel_module(source: &str) -> String {
    format!("{}\n{source}", include_str!("kernels/common.cuh"))
}

/// What a plan launches on its CUDA devices.
#[derive(Clone, Debug, Default)]
pub struct PlanKernels {
    /// Steps on CUDA devices.
    pub steps: usize,
    /// Library entry points they use, by name, with how many steps use each.
    pub library: BTreeMap<String, usize>,
    /// Generated kernels, source by name.
    pub generated: BTreeMap<String, String>,
}

impl PlanKernels {
    /// Every module loading compiles: the op library, then one per
    /// generated kernel.
    pub fn modules(&self) -> Vec<(String, String)> {
        let mut out = vec![("op library".to_string(), library_source())];
        out.extend(
            (self.generated.iter()).map(|(name, source)| (name.clone(), kernel_module(source))),
        );
        out
    }
}

/// The kernels of every step `plan` runs on a CUDA device, or the first
/// step that has none (the error names it, as loading would).
pub fn plan_kernels(plan: &Plan) -> Result<PlanKernels, RuntimeError> {
    // Stand-in addresses (an arena's index in the high bits): launches
    // depend on layouts, not on where the bytes are.
    let bases: Vec<*mut u8> = (0..plan.arenas.len())
        .map(|i| ((i as u64 + 1) << 40) as usize as *mut u8)
        .collect();
    let overrides = vec![None; plan.tensors.len()];
    let addr = crate::addresses::resolve(plan, &bases, &overrides);
    let raw = |t: u32| {
        let pt = &plan.tensors[t as usize];
        RawTensor {
            data: addr[t as usize],
            dtype: pt.dtype,
            ne: pt.ne,
            nb: pt.nb,
        }
    };
    let mut out = PlanKernels::default();
    for split in &plan.splits {
        let device = &plan.devices[split.device.index()];
        if !matches!(device.kind, DeviceKind::Cuda { .. }) {
            continue;
        }
        for step in &split.steps {
            let (launch, dst) = match step {
                Step::Op { op, dst, srcs } => {
                    let s: Vec<RawTensor> = srcs.iter().map(|&t| raw(t)).collect();
                    (launch::op(op, raw(*dst), &s), *dst)
                }
                Step::MulMatAdd { dst, srcs, .. } => {
                    (launch::mul_mat_add(raw(*dst), srcs.map(raw)), *dst)
                }
                Step::Attention {
                    dst,
                    srcs,
                    scale,
                    max_bias,
                    ..
                } => {
                    let s: Vec<RawTensor> = srcs.iter().map(|&t| raw(t)).collect();
                    (launch::attention(raw(*dst), &s, (*scale, *max_bias)), *dst)
                }
                Step::MulMatGlu {
                    kind, dst, srcs, ..
                } => (launch::mul_mat_glu(*kind, raw(*dst), srcs.map(raw)), *dst),
                Step::MulMatMany { dsts, srcs } => {
                    let d: Vec<RawTensor> = dsts.iter().map(|&t| raw(t)).collect();
                    let w: Vec<RawTensor> = srcs[..dsts.len()].iter().map(|&t| raw(t)).collect();
                    let x = raw(srcs[dsts.len()]);
                    (launch::mul_mat_many(&d, &w, x), dsts[0])
                }
                Step::RopeStore { dsts, .. } => (
                    launch::rope_store(&launch::row_ops(plan, step, raw)),
                    dsts[0],
                ),
                Step::Fused { kernel } => {
                    let k = &plan.kernels[*kernel as usize];
                    let inputs: Vec<RawTensor> = k.inputs.iter().map(|&t| raw(t)).collect();
                    (launch::fused(&k.body, raw(k.output), &inputs), k.output)
                }
            };
            let launch = launch.map_err(|e| RuntimeError::Cuda {
                device: device.name.clone(),
                what: format!("'{}': {e}", plan.tensors[dst as usize].name),
            })?;
            out.steps += 1;
            match launch.kernel {
                Kernel::Library(name) => *out.library.entry(name.to_string()).or_default() += 1,
                Kernel::Generated(g) => {
                    out.generated.insert(g.name, g.source);
                }
            }
        }
    }
    Ok(out)
}
