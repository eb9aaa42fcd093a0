//! The LLVM JIT for fused elementwise kernels and row kernels (rms_norm, norm,
//! soft_max): each plan step is compiled once at load, for the host CPU, into
//! explicit full-width vector code (`<8 x float>` with AVX2, `<16 x float>`
//! with AVX-512) with a scalar tail.
//!
//! Semantics are `kernels::reference`'s (`eval_fused` for bodies): inputs
//! broadcast by index modulo their extents; a norm reduces over its input's
//! row before the elementwise body. Values are computed in f32 (F16 tensors
//! convert on load and store); exp, tanh and erf are our own polynomials, see
//! [`math`](self) for their documented error bounds.
//!
//! Invariants:
//! - **Cache**: a kernel's code depends only on a `spec::Spec` (body, dtypes,
//!   access classes, constants, streaming); addresses and extents are passed
//!   at run time in an argument block. A plan with 30 identical layers
//!   compiles each distinct kernel once.
//! - **Layout classes** (per tensor, along rows): packed rows of the output's
//!   length get vector loads; one-element rows a splat; strided or shorter
//!   (repeated) rows a general path with per-lane loads. A body without norms
//!   whose tensors are all contiguous (or single values) runs as one flat row
//!   split among threads by element ranges; otherwise each thread takes whole
//!   rows (`ctx.share(n_rows)`).
//! - **Streaming stores** (the rule): the output of a fused or elementwise
//!   kernel is written with non-temporal stores when it is larger than the
//!   last-level cache ([`streaming_threshold_bytes`]: from sysfs, 32 MiB when
//!   unknown), packed along rows and element-aligned: such an output would be
//!   evicted before the next step reads it anyway, and streaming saves the
//!   read-for-ownership of every line. [`JitOptions`] can force it on or off.
//!   A scalar prologue aligns each row's stores; an `sfence` ends each run.
//!   soft_max never streams (it re-reads its output row).
//! - **Lifetime**: each `Jit` owns one LLVM context; compiled kernels hold an
//!   `Arc` to it, so it is freed when the `Jit` and all its kernels are dropped.

mod codegen;
mod exp_table;
mod fused;
mod kernel;
mod llvm;
mod math;
mod ops;
mod sections;
mod softmax;
mod spec;

#[cfg(test)]
mod tests;

use super::{CpuKernel, RawTensor};
use crate::RuntimeError;
use ir::DType;
use ir::plan::Expr;
use kernel::{JitKernel, Split};
use llvm::{Compiled, Llvm};
use spec::{Access, Node, Spec, TensorSpec, arg_block, elem_bytes};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

pub use super::jit_choices::{JitOptions, JitStats, StreamingStores};

/// Output size above which [`StreamingStores::Auto`] streams: the last-level
/// cache's size (sysfs), or 32 MiB when it cannot be read.
pub fn streaming_threshold_bytes() -> u64 {
    static LLC: OnceLock<u64> = OnceLock::new();
    *LLC.get_or_init(|| last_level_cache_bytes().unwrap_or(32 << 20))
}

/// The largest cache of CPU 0, from sysfs.
fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let size = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        let size = size.trim();
        let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
        let n: u64 = digits.parse().ok()?;
        Some(match unit {
            "K" => n << 10,
            "M" => n << 20,
            _ => n,
        })
    })
    .max()
}

struct State {
    cache: HashMap<String, Arc<Compiled>>,
    stats: JitStats,
}

/// The JIT: an LLVM context for the host CPU and a cache of compiled kernels.
pub struct Jit {
    llvm: Arc<Llvm>,
    options: JitOptions,
    state: Mutex<State>,
}

/// A fused kernel's code-determining facts and run-time data.
struct FusedPlan {
    spec: Spec,
    tensors: Vec<RawTensor>,
    split: Split,
    stream: bool,
}

fn unsupported(op: &str, detail: impl Into<String>) -> RuntimeError {
    RuntimeError::Unsupported {
        op: op.into(),
        detail: detail.into(),
    }
}

fn check_dtype(op: &str, what: &str, t: &RawTensor) -> Result<(), RuntimeError> {
    match t.dtype {
        DType::F32 | DType::F16 => Ok(()),
        d => Err(unsupported(
            op,
            format!("{what} is {d}; the JIT takes F32 and F16"),
        )),
    }
}

/// `t` seen as one row of all its elements (it is contiguous).
fn flat(t: &RawTensor) -> RawTensor {
    let n = t.n_elements() as i64;
    let es = elem_bytes(t.dtype) as u64;
    let row = n as u64 * es;
    RawTensor {
        ne: [n, 1, 1, 1],
        nb: [es, row, row, row],
        ..*t
    }
}

impl Jit {
    /// A JIT for the host CPU with default options.
    pub fn new() -> Result<Jit, RuntimeError> {
        Jit::with_options(JitOptions::default())
    }

    /// A JIT for the host CPU.
    pub fn with_options(options: JitOptions) -> Result<Jit, RuntimeError> {
        Ok(Jit {
            llvm: Llvm::new()?,
            options,
            state: Mutex::new(State {
                cache: HashMap::new(),
                stats: JitStats::default(),
            }),
        })
    }

    /// A JIT that generates code for another x86-64 CPU (`skylake-avx512`,
    /// with its LLVM feature string and f32 vector width): for inspecting
    /// the code of an ISA this machine lacks; its kernels must not run here.
    #[cfg(test)]
    pub(crate) fn for_target(cpu: &str, features: &str, width: u32) -> Result<Jit, RuntimeError> {
        Ok(Jit {
            llvm: Llvm::for_target(cpu.into(), features.into(), width)?,
            options: JitOptions::default(),
            state: Mutex::new(State {
                cache: HashMap::new(),
                stats: JitStats::default(),
            }),
        })
    }

    /// f32 lanes of the vectors the generated code uses (16, 8 or 4).
    pub fn vector_width(&self) -> u32 {
        self.llvm.host.width
    }

    /// Counters so far.
    pub fn stats(&self) -> JitStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The compiled code of `spec`, from the cache or compiled now.
    fn code(&self, spec: &Spec) -> Result<Arc<Compiled>, RuntimeError> {
        let key = spec.key();
        let mut state = self.lock();
        if let Some(code) = state.cache.get(&key) {
            let code = Arc::clone(code);
            state.stats.cache_hits += 1;
            return Ok(code);
        }
        let start = Instant::now();
        let code = self.llvm.compile(&|g| generate(g, spec))?;
        state.stats.compile_time += start.elapsed();
        state.stats.kernels_compiled += 1;
        state.cache.insert(key, Arc::clone(&code));
        Ok(code)
    }

    /// A plan's fused kernel: `body` (output last) over `inputs`, writing `output`.
    pub fn prepare_fused(
        &self,
        body: &[Expr],
        output: RawTensor,
        inputs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        let nodes: Vec<Node> = body.iter().map(Node::of).collect();
        let input_ne: Vec<[i64; 4]> = inputs.iter().map(|t| t.ne).collect();
        kernels::reference::fused::check_fused(body, &input_ne, output.ne)
            .map_err(|e| unsupported("fused", e))?;
        self.prepare_nodes(&nodes, output, inputs)
    }

    /// [`Jit::prepare_fused`] over internal nodes (which may use test-only functions).
    fn prepare_nodes(
        &self,
        nodes: &[Node],
        output: RawTensor,
        inputs: &[RawTensor],
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        let plan = self.plan_fused(nodes, output, inputs)?;
        let code = self.code(&plan.spec)?;
        let desc = format!(
            "jit fused {} nodes, {} <- {}",
            nodes.len(),
            output.dtype,
            inputs
                .iter()
                .map(|t| t.dtype.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(Box::new(JitKernel {
            code,
            args: arg_block(&plan.tensors, &[]),
            _slopes: None,
            split: plan.split,
            stream: plan.stream,
            desc,
        }))
    }

    /// Classifies the tensors of a fused kernel (see the module doc).
    fn plan_fused(
        &self,
        nodes: &[Node],
        output: RawTensor,
        inputs: &[RawTensor],
    ) -> Result<FusedPlan, RuntimeError> {
        check_dtype("fused", "the output", &output)?;
        for (i, t) in inputs.iter().enumerate() {
            check_dtype("fused", &format!("input {i}"), t)?;
        }
        let flatten = !nodes.iter().any(Node::is_norm)
            && output.is_contiguous()
            && inputs
                .iter()
                .all(|t| (t.ne == output.ne && t.is_contiguous()) || t.n_elements() == 1);
        let mut tensors = vec![output];
        tensors.extend_from_slice(inputs);
        if flatten {
            for t in &mut tensors {
                *t = if t.n_elements() == 1 {
                    RawTensor { ne: [1; 4], ..*t }
                } else {
                    flat(t)
                };
            }
        }
        let out = tensors[0];
        let ne0 = out.ne[0];
        let spec_of = |t: &RawTensor| TensorSpec {
            dtype: t.dtype,
            access: Access::of(t, ne0),
        };
        let out_spec = spec_of(&out);
        let es = elem_bytes(out.dtype) as u64;
        let aligned = (out.data as u64).is_multiple_of(es)
            && out.nb[1..].iter().all(|b| b.is_multiple_of(es));
        let eligible = out_spec.access == Access::Contig && aligned;
        let out_bytes = out.n_elements() as u64 * es;
        let stream = eligible
            && match self.options.streaming {
                StreamingStores::Auto => out_bytes > streaming_threshold_bytes(),
                StreamingStores::Always => true,
                StreamingStores::Never => false,
            };
        let spec = Spec::Fused {
            nodes: nodes.to_vec(),
            out: out_spec,
            inputs: tensors[1..].iter().map(spec_of).collect(),
            stream,
        };
        let split = if flatten {
            Split::Flat {
                n: out.n_elements(),
            }
        } else {
            Split::Rows {
                n_rows: out.n_rows(),
                ne0,
            }
        };
        Ok(FusedPlan {
            spec,
            tensors,
            split,
            stream,
        })
    }

    /// The optimised LLVM IR and host assembly of the kernel
    /// [`Jit::prepare_fused`] would compile (for tests and tools; not cached).
    pub fn inspect_fused(
        &self,
        body: &[Expr],
        output: RawTensor,
        inputs: &[RawTensor],
    ) -> Result<(String, String), RuntimeError> {
        let nodes: Vec<Node> = body.iter().map(Node::of).collect();
        let plan = self.plan_fused(&nodes, output, inputs)?;
        self.llvm.inspect(&|g| generate(g, &plan.spec))
    }

    /// soft_max(src * scale + mask) over rows, the optional mask (F32 or F16)
    /// read at row (i1 % ne1, i2 % ne2, i3 % ne3) and scaled by head i2's
    /// ALiBi slope when `max_bias > 0` (as `kernels::reference`).
    pub fn prepare_soft_max(
        &self,
        scale: f32,
        max_bias: f32,
        dst: RawTensor,
        src: RawTensor,
        mask: Option<RawTensor>,
    ) -> Result<Box<dyn CpuKernel>, RuntimeError> {
        check_dtype("soft_max", "the output", &dst)?;
        check_dtype("soft_max", "the logits", &src)?;
        if dst.ne != src.ne {
            return Err(unsupported(
                "soft_max",
                format!(
                    "output extents {:?} differ from the logits' {:?}",
                    dst.ne, src.ne
                ),
            ));
        }
        if let Some(m) = &mask {
            check_dtype("soft_max", "the mask", m)?;
            if m.ne[0] != src.ne[0] {
                return Err(unsupported(
                    "soft_max",
                    format!("mask rows of {} for logits rows of {}", m.ne[0], src.ne[0]),
                ));
            }
        }
        let ne0 = src.ne[0];
        let spec_of = |t: &RawTensor| TensorSpec {
            dtype: t.dtype,
            access: Access::of(t, ne0),
        };
        let alibi = max_bias > 0.0;
        let spec = Spec::SoftMax {
            out: spec_of(&dst),
            src: spec_of(&src),
            mask: mask.as_ref().map(spec_of),
            scale,
            alibi,
        };
        let code = self.code(&spec)?;
        let slopes: Option<Box<[f32]>> = alibi.then(|| {
            (0..src.ne[2])
                .map(|h| kernels::reference::alibi_slope(max_bias, src.ne[2], h) as f32)
                .collect()
        });
        let mut tensors = vec![dst, src];
        tensors.extend(mask);
        let extra: Vec<i64> = slopes.iter().map(|s| s.as_ptr() as i64).collect();
        Ok(Box::new(JitKernel {
            code,
            args: arg_block(&tensors, &extra),
            _slopes: slopes,
            split: Split::Rows {
                n_rows: dst.n_rows(),
                ne0,
            },
            stream: false,
            desc: format!("jit soft_max {} <- {}", dst.dtype, src.dtype),
        }))
    }
}

/// Emits the code of `spec` into `g`.
fn generate(g: &mut codegen::Gen<'_, '_>, spec: &Spec) -> Result<(), RuntimeError> {
    match spec {
        Spec::Fused {
            nodes,
            out,
            inputs,
            stream,
        } => fused::emit(g, nodes, *out, inputs, *stream),
        Spec::SoftMax {
            out,
            src,
            mask,
            scale,
            alibi,
        } => softmax::emit(g, *out, *src, *mask, *scale, *alibi),
    }
}
