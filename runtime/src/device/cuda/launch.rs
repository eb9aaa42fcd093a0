//! What to launch for each step on a CUDA device: the kernel, its grid and
//! block, and its argument block. Pure: preparing a plan for CUDA needs no
//! GPU, so every op's launch is unit-tested on any machine.
//!
//! Invariant: a launch's grid covers exactly the elements (or rows) its
//! kernel's comment in `kernels/ops.cu` names, and its tensors are the
//! step's own (addresses the plan checker placed inside their arenas), so a
//! kernel indexes only `0..ne` of each tensor it was given.

use super::args::{KArgs, KTensor, MAX_TENSORS};
use super::codegen::{Generated, fused_kernel, op_body};
use crate::RuntimeError;
use crate::device::cpu::RawTensor;
use ir::plan::Expr;
use ir::{DType, Op, RopeMode};

mod attention;
mod rope_store;
pub use attention::{MAX_HEAD_DIM as ATTENTION_MAX_HEAD_DIM, attention};
pub use rope_store::{RowOp, rope_store, row_ops};

/// Which kernel a launch runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// An entry point of the op library (`kernels/ops.cu`).
    Library(&'static str),
    /// A generated kernel (a fused body or an elementwise op).
    Generated(Generated),
}

impl Kernel {
    /// The entry point's name.
    pub fn name(&self) -> &str {
        match self {
            Kernel::Library(name) => name,
            Kernel::Generated(g) => &g.name,
        }
    }
}

/// One kernel launch, ready but for the function handle.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The kernel.
    pub kernel: Kernel,
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block (x only).
    pub block: u32,
    /// The argument block.
    pub args: KArgs,
}

fn unsupported(op: &str, detail: impl Into<String>) -> RuntimeError {
    RuntimeError::Unsupported {
        op: op.to_string(),
        detail: format!("on a CUDA device: {}", detail.into()),
    }
}

fn rows(t: &RawTensor) -> i64 {
    t.ne[1] * t.ne[2] * t.ne[3]
}

fn n_elements(t: &RawTensor) -> i64 {
    t.ne.iter().product()
}

/// A grid dimension, refused beyond CUDA's limit for it.
fn dim(op: &str, n: i64, limit: i64) -> Result<u32, RuntimeError> {
    if n < 1 {
        return Ok(1);
    }
    if n > limit {
        return Err(unsupported(
            op,
            format!("{n} blocks exceed the grid limit {limit}"),
        ));
    }
    Ok(n as u32)
}

const GRID_X: i64 = (1 << 31) - 1;
/// Columns up to which a product runs as matrix-vector products
/// (`MM_COLS` in ops.cu).
const MM_COLS: i64 = 8;
const GRID_YZ: i64 = 65_535;

/// Blocks for a grid-stride loop over `n` elements, 256 threads each.
fn stride_grid(n: i64) -> [u32; 3] {
    [((n + 255) / 256).clamp(1, 1 << 20) as u32, 1, 1]
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// The argument block over `tensors` (dst first).
fn args(op: &str, tensors: &[RawTensor]) -> Result<KArgs, RuntimeError> {
    let mut a = KArgs::default();
    if tensors.len() > MAX_TENSORS {
        return Err(unsupported(
            op,
            format!(
                "{} tensors, more than the {MAX_TENSORS} a kernel takes",
                tensors.len()
            ),
        ));
    }
    for (slot, t) in a.t.iter_mut().zip(tensors) {
        *slot = KTensor::of(t);
    }
    Ok(a)
}

fn require(op: &str, ok: bool, what: impl FnOnce() -> String) -> Result<(), RuntimeError> {
    if ok {
        Ok(())
    } else {
        Err(unsupported(op, what()))
    }
}

/// The launch of a fused kernel: `body` over `inputs`, written to `out`.
pub fn fused(body: &[Expr], out: RawTensor, inputs: &[RawTensor]) -> Result<Launch, RuntimeError> {
    let mut tensors = vec![out];
    tensors.extend_from_slice(inputs);
    for t in &tensors {
        require("fused", is_float(t.dtype), || {
            format!("a fused kernel reads and writes floats, not {}", t.dtype)
        })?;
    }
    let input_ne: Vec<[i64; 4]> = inputs.iter().map(|t| t.ne).collect();
    kernels::reference::fused::check_fused(body, &input_ne, out.ne)
        .map_err(|e| unsupported("fused", e))?;
    Ok(Launch {
        kernel: Kernel::Generated(fused_kernel(body)),
        grid: [dim("fused", rows(&out), GRID_X)?, 1, 1],
        block: 256,
        args: args("fused", &tensors)?,
    })
}

/// The launch of a `mul_mat` + `add` step: `mul_mat`'s launch with the
/// addend as `t3` and the epilogue on (`i[0]`, ops.cu), so one kernel
/// computes `dst = w · x + addend`.
pub fn mul_mat_add(dst: RawTensor, [w, x, addend]: [RawTensor; 3]) -> Result<Launch, RuntimeError> {
    let name = "mul_mat + add";
    require(
        name,
        addend.dtype == DType::F32 && addend.ne == dst.ne,
        || {
            format!(
                "the addend must be F32 with the result's extents {:?}, not {} {:?}",
                dst.ne, addend.dtype, addend.ne
            )
        },
    )?;
    let mut launch = op(&Op::MulMat, dst, &[w, x])?;
    launch.args.t[3] = KTensor::of(&addend);
    launch.args.i[0] = 1;
    Ok(launch)
}

/// Weights in a block format must have rows of whole 32-value blocks (the
/// product kernels decode chunk by chunk).
fn whole_blocks(name: &str, w: &RawTensor) -> Result<(), RuntimeError> {
    require(name, is_float(w.dtype) || w.ne[0] % 32 == 0, || {
        format!(
            "a {} row of {} values is not whole blocks",
            w.dtype, w.ne[0]
        )
    })
}

/// The launch of a `mul_mat` + GLU step: the gate product's `mul_mat`
/// launch, run by `mul_mat_glu_vec` / `mul_mat_glu_tiled` (product_glu.cu)
/// with the up weight as `t3` and the activation in `i[1]`, so one kernel
/// computes `dst = act(w_gate · x) * (w_up · x)`.
pub fn mul_mat_glu(
    kind: ir::GluKind,
    dst: RawTensor,
    [gate, up, x]: [RawTensor; 3],
) -> Result<Launch, RuntimeError> {
    let name = "mul_mat + glu";
    require(name, up.dtype == gate.dtype && up.ne == gate.ne, || {
        format!(
            "the up weight must be the gate weight's dtype and shape, {} {:?}, not {} {:?}",
            gate.dtype, gate.ne, up.dtype, up.ne
        )
    })?;
    let mut launch = op(&Op::MulMat, dst, &[gate, x])?;
    launch.kernel = match launch.kernel {
        Kernel::Library("mul_mat_vec") => Kernel::Library("mul_mat_glu_vec"),
        _ => Kernel::Library("mul_mat_glu_tiled"),
    };
    launch.args.t[3] = KTensor::of(&up);
    launch.args.i[1] = match kind {
        ir::GluKind::SwiGlu => 0,
        ir::GluKind::GeGlu => 1,
        ir::GluKind::GeGluErf => 2,
    };
    Ok(launch)
}

/// The launch of a `mul_mat` x N step (product_many.cu): `dsts[i] =
/// weights[i] · x` for 2 to 5 products of one weight dtype, each checked as
/// its own `mul_mat` launch would be; blocks in x run the products one after
/// the other (each as many as its own launch's x), y and z as theirs.
pub fn mul_mat_many(
    dsts: &[RawTensor],
    weights: &[RawTensor],
    x: RawTensor,
) -> Result<Launch, RuntimeError> {
    let name = "mul_mat x N";
    require(
        name,
        (2..=5).contains(&dsts.len()) && weights.len() == dsts.len(),
        || format!("{} results from {} weights", dsts.len(), weights.len()),
    )?;
    let dtype = weights[0].dtype;
    require(name, weights.iter().all(|w| w.dtype == dtype), || {
        "weights of more than one dtype".to_string()
    })?;
    let mut blocks = 0i64;
    let mut first: Option<Launch> = None;
    for (&d, &w) in dsts.iter().zip(weights) {
        let one = op(&Op::MulMat, d, &[w, x])?;
        blocks += i64::from(one.grid[0]);
        first.get_or_insert(one);
    }
    let mut launch = first.expect("two or more products");
    launch.kernel = match launch.kernel {
        Kernel::Library("mul_mat_vec") => Kernel::Library("mul_mat_many_vec"),
        _ => Kernel::Library("mul_mat_many_tiled"),
    };
    launch.grid[0] = dim(name, blocks, GRID_X)?;
    // t0 = dst 0, t1 = weight 0, t2 = x (as mul_mat's), then the pairs.
    for (p, (d, w)) in dsts.iter().zip(weights).enumerate().skip(1) {
        launch.args.t[1 + 2 * p] = KTensor::of(d);
        launch.args.t[2 + 2 * p] = KTensor::of(w);
    }
    launch.args.i[1] = dsts.len() as i32;
    Ok(launch)
}

/// The launch of an op step writing `dst` from `srcs`.
pub fn op(op: &Op, dst: RawTensor, srcs: &[RawTensor]) -> Result<Launch, RuntimeError> {
    let name = op.name();
    let one_source_glu = matches!(op, Op::Glu { .. }) && srcs.len() == 1;
    if let (Some(body), false) = (op_body(op), one_source_glu) {
        return fused(&body, dst, srcs);
    }
    let mut tensors = vec![dst];
    tensors.extend_from_slice(srcs);
    // The kernel's tensors: cpy writes src0 into dst (src1's bytes, the
    // result's view); set_rows writes src1's rows into dst (src0's bytes).
    let kernel_tensors = match op {
        Op::Cpy => vec![dst, srcs[0]],
        Op::SetRows => vec![dst, srcs[1], srcs[2]],
        _ => tensors.clone(),
    };
    let mut a = args(name, &kernel_tensors)?;
    let row_grid = |t: &RawTensor| -> Result<[u32; 3], RuntimeError> {
        Ok([dim(name, rows(t), GRID_X)?, 1, 1])
    };
    let (kernel, grid, block) = match *op {
        Op::MulMat => {
            let (w, x) = (&srcs[0], &srcs[1]);
            require(name, dst.dtype == DType::F32, || {
                format!("the product is written as F32, not {}", dst.dtype)
            })?;
            require(name, is_float(x.dtype), || {
                format!("src1 must be a float tensor, not {}", x.dtype)
            })?;
            whole_blocks(name, w)?;
            let batches = dim(name, x.ne[2] * x.ne[3], GRID_YZ)?;
            if x.ne[1] <= MM_COLS {
                // Few columns (decode): a warp per row, each weight read once.
                let warps = 4;
                let grid = [
                    dim(name, (w.ne[1] + warps - 1) / warps, GRID_X)?,
                    dim(name, (x.ne[1] + MM_COLS - 1) / MM_COLS, GRID_YZ)?,
                    batches,
                ];
                (Kernel::Library("mul_mat_vec"), grid, 32 * warps as u32)
            } else {
                // Many (prefill): 64 x 64 tiles through shared memory.
                let grid = [
                    dim(name, (w.ne[1] + 63) / 64, GRID_X)?,
                    dim(name, (x.ne[1] + 63) / 64, GRID_YZ)?,
                    batches,
                ];
                (Kernel::Library("mul_mat_tiled"), grid, 256)
            }
        }
        Op::MulMatId => {
            let (w, x, ids) = (&srcs[0], &srcs[1], &srcs[2]);
            require(name, dst.dtype == DType::F32, || {
                format!("the products are written as F32, not {}", dst.dtype)
            })?;
            require(name, is_float(x.dtype) && ids.dtype == DType::I32, || {
                format!(
                    "src1 must be floats and the ids I32, not {} and {}",
                    x.dtype, ids.dtype
                )
            })?;
            whole_blocks(name, w)?;
            // One warp per (row, slot, token): ggml's shapes, dst [M, n_ids, n_tok].
            let warps = 4;
            let grid = [
                dim(name, (w.ne[1] + warps - 1) / warps, GRID_X)?,
                dim(name, ids.ne[0], GRID_YZ)?,
                dim(name, ids.ne[1], GRID_YZ)?,
            ];
            (Kernel::Library("mul_mat_id_vec"), grid, 32 * warps as u32)
        }
        Op::Argsort { descending } => {
            require(
                name,
                srcs[0].dtype == DType::F32 && dst.dtype == DType::I32,
                || {
                    format!(
                        "sorts F32 into I32 indices, not {} into {}",
                        srcs[0].dtype, dst.dtype
                    )
                },
            )?;
            a.i[0] = i32::from(descending);
            (Kernel::Library("argsort"), row_grid(&srcs[0])?, 128)
        }
        Op::GetRows => {
            require(name, srcs[1].dtype == DType::I32, || {
                format!("indices must be I32, not {}", srcs[1].dtype)
            })?;
            require(name, is_float(dst.dtype), || {
                format!("rows are written as floats, not {}", dst.dtype)
            })?;
            (Kernel::Library("get_rows"), row_grid(&dst)?, 256)
        }
        Op::SoftMax { scale, max_bias } => {
            require(name, dst.dtype == DType::F32, || {
                format!("soft_max writes F32, not {}", dst.dtype)
            })?;
            a.f[0] = scale;
            a.f[1] = max_bias;
            a.i[0] = i32::from(srcs.len() > 1);
            (Kernel::Library("soft_max"), row_grid(&srcs[0])?, 256)
        }
        Op::Rope(p) => {
            require(name, srcs[1].dtype == DType::I32, || {
                format!("positions must be I32, not {}", srcs[1].dtype)
            })?;
            require(
                name,
                p.n_dims as i64 <= srcs[0].ne[0] && p.n_dims % 2 == 0,
                || format!("n_dims {} does not fit rows of {}", p.n_dims, srcs[0].ne[0]),
            )?;
            let [low, high] = kernels::reference::rope_yarn_corr_dims(
                p.n_dims,
                p.n_ctx_orig,
                p.freq_base,
                p.beta_fast,
                p.beta_slow,
            );
            a.i[0] = match p.mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => 1,
            };
            a.i[1] = p.n_dims as i32;
            if let Some(f) = srcs.get(2) {
                require(
                    name,
                    f.dtype == DType::F32 && f.ne[0] >= i64::from(p.n_dims / 2),
                    || {
                        format!(
                            "frequency factors {} [{}] must be F32 with n_dims / 2 elements",
                            f.dtype, f.ne[0]
                        )
                    },
                )?;
            }
            a.i[2] = i32::from(srcs.len() > 2);
            a.f[..6].copy_from_slice(&[
                p.freq_base,
                p.freq_scale,
                p.ext_factor,
                p.attn_factor,
                low as f32,
                high as f32,
            ]);
            (Kernel::Library("rope"), row_grid(&srcs[0])?, 64)
        }
        Op::Cpy | Op::Cont => {
            let src = srcs[0];
            let same_ints = src.dtype == DType::I32 && dst.dtype == DType::I32;
            require(
                name,
                same_ints || (is_float(src.dtype) && is_float(dst.dtype)),
                || format!("copies {} to {}", src.dtype, dst.dtype),
            )?;
            require(name, n_elements(&src) == n_elements(&dst), || {
                "element counts differ".to_string()
            })?;
            a.l[0] = n_elements(&dst);
            (Kernel::Library("copy_elements"), stride_grid(a.l[0]), 256)
        }
        Op::SetRows => {
            require(name, srcs[2].dtype == DType::I32, || {
                format!("indices must be I32, not {}", srcs[2].dtype)
            })?;
            require(name, is_float(dst.dtype), || {
                format!("rows are written as floats, not {}", dst.dtype)
            })?;
            require(
                name,
                srcs[1].ne[2] == dst.ne[2] && srcs[1].ne[3] == dst.ne[3],
                || "rows and destination differ in dims 2 and 3".to_string(),
            )?;
            let block = if srcs[1].ne[0] <= 32 { 32 } else { 256 };
            (Kernel::Library("set_rows"), row_grid(&srcs[1])?, block)
        }
        Op::Concat { dim: d } => {
            a.i[0] = i32::from(d);
            a.l[0] = n_elements(&dst);
            (Kernel::Library("concat"), stride_grid(a.l[0]), 256)
        }
        Op::SumRows | Op::Mean => {
            a.i[0] = i32::from(matches!(op, Op::Mean));
            (Kernel::Library("row_sum"), row_grid(&srcs[0])?, 256)
        }
        Op::Argmax => {
            require(name, dst.dtype == DType::I32, || {
                "argmax writes I32".to_string()
            })?;
            (
                Kernel::Library("argmax"),
                [dim(name, srcs[0].ne[1], GRID_X)?, 1, 1],
                256,
            )
        }
        Op::DiagMaskInf { n_past } => {
            a.l[0] = n_elements(&dst);
            a.l[1] = n_past;
            (Kernel::Library("diag_mask_inf"), stride_grid(a.l[0]), 256)
        }
        Op::Glu { kind, swapped } => {
            a.i[0] = match kind {
                ir::GluKind::SwiGlu => 0,
                ir::GluKind::GeGlu => 1,
                ir::GluKind::GeGluErf => 2,
            };
            a.i[1] = i32::from(swapped);
            a.l[0] = n_elements(&dst);
            (Kernel::Library("glu_halves"), stride_grid(a.l[0]), 256)
        }
        _ => {
            return Err(unsupported(
                name,
                "no CUDA kernel (collectives run between CPU devices only)",
            ));
        }
    };
    // Block-quantized tensors only as mul_mat's, mul_mat_id's and get_rows'
    // src0 (the tensor at position 1); I32 only as indices and positions.
    for (position, t) in tensors.iter().enumerate() {
        let weight = position == 1 && matches!(op, Op::MulMat | Op::MulMatId | Op::GetRows);
        let index = t.dtype == DType::I32
            && matches!(
                op,
                Op::GetRows
                    | Op::SetRows
                    | Op::Rope(_)
                    | Op::Argmax
                    | Op::Argsort { .. }
                    | Op::MulMatId
                    | Op::Cpy
                    | Op::Cont
            );
        require(name, weight || index || is_float(t.dtype), || {
            format!(
                "reads or writes {}, which only mul_mat and get_rows take as src0",
                t.dtype
            )
        })?;
    }
    Ok(Launch {
        kernel,
        grid,
        block,
        args: a,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dtype: DType, ne: [i64; 4]) -> RawTensor {
        let es = match dtype {
            DType::F16 | DType::BF16 => 2,
            _ => 4,
        };
        let nb0 = if dtype == DType::Q4_1 { 20 } else { es };
        let row = if dtype == DType::Q4_1 {
            ne[0] / 32 * 20
        } else {
            ne[0] * es
        };
        RawTensor {
            data: 0x1000 as *mut u8,
            dtype,
            ne,
            nb: [
                nb0 as u64,
                row as u64,
                (row * ne[1]) as u64,
                (row * ne[1] * ne[2]) as u64,
            ],
        }
    }

    #[test]
    fn mul_mat_covers_rows_columns_and_batches() {
        let w = t(DType::Q4_1, [576, 1537, 1, 1]);
        let x = t(DType::F32, [576, 13, 3, 1]);
        let d = t(DType::F32, [1537, 13, 3, 1]);
        let l = op(&Op::MulMat, d, &[w, x]).expect("launch");
        assert_eq!(l.kernel, Kernel::Library("mul_mat_tiled"));
        assert_eq!((l.grid, l.block), ([25, 1, 3], 256));
        let x1 = t(DType::F32, [576, 1, 1, 1]);
        let d1 = t(DType::F32, [1537, 1, 1, 1]);
        let v = op(&Op::MulMat, d1, &[w, x1]).expect("launch");
        assert_eq!(v.kernel, Kernel::Library("mul_mat_vec"));
        assert_eq!((v.grid, v.block), ([385, 1, 1], 128));
        assert_eq!(l.args.t[1].dtype, 6);
        // Every block format decodes in the kernels (blocks.cuh); outside
        // mul_mat's and get_rows' src0 one is refused by name.
        for (dtype, code) in [(DType::Q5_0, 7), (DType::Q4_K, 9), (DType::Q6_K, 11)] {
            let k = t(dtype, [256, 4, 1, 1]);
            let d = t(DType::F32, [4, 13, 3, 1]);
            let l = op(&Op::MulMat, d, &[k, x]).expect("launch");
            assert_eq!(l.args.t[1].dtype, code);
            // As another op's source: refused by the block-format check.
            let rows = t(DType::I32, [4, 1, 1, 1]);
            let err = op(&Op::Argmax, rows, &[k]).unwrap_err().to_string();
            assert!(
                err.contains(&format!("reads or writes {dtype}, which only mul_mat")),
                "{err}"
            );
        }
    }

    #[test]
    fn mul_mat_add_is_mul_mat_with_the_addend_as_t3() {
        let w = t(DType::Q4_1, [576, 1537, 1, 1]);
        for cols in [1, 13] {
            let x = t(DType::F32, [576, cols, 1, 1]);
            let d = t(DType::F32, [1537, cols, 1, 1]);
            let r = RawTensor {
                data: 0x2000 as *mut u8,
                ..d
            };
            let plain = op(&Op::MulMat, d, &[w, x]).expect("mul_mat");
            let fused = mul_mat_add(d, [w, x, r]).expect("mul_mat + add");
            assert_eq!(
                (fused.kernel.clone(), fused.grid),
                (plain.kernel, plain.grid)
            );
            assert_eq!((fused.args.i[0], fused.args.t[3]), (1, KTensor::of(&r)));
            assert_eq!(plain.args.i[0], 0, "plain products add nothing");
        }
        let x = t(DType::F32, [576, 1, 1, 1]);
        let d = t(DType::F32, [1537, 1, 1, 1]);
        let short = t(DType::F32, [1536, 1, 1, 1]);
        let err = mul_mat_add(d, [w, x, short]).unwrap_err().to_string();
        assert!(err.contains("the addend must be F32"), "{err}");
    }

    #[test]
    fn mixture_of_experts_ops_launch_per_slot_and_row() {
        // Qwen 3 MoE's shapes: 8 experts of 32 rows over 64, 2 slots, 13 tokens.
        let w = t(DType::Q4_1, [64, 32, 8, 1]);
        let x = t(DType::F32, [64, 1, 13, 1]);
        let ids = t(DType::I32, [2, 13, 1, 1]);
        let d = t(DType::F32, [32, 2, 13, 1]);
        let l = op(&Op::MulMatId, d, &[w, x, ids]).expect("mul_mat_id");
        assert_eq!(l.kernel, Kernel::Library("mul_mat_id_vec"));
        assert_eq!((l.grid, l.block), ([8, 2, 13], 128));
        assert_eq!((l.args.t[1].dtype, l.args.t[3].ne[0]), (6, 2));
        let bad = t(DType::F32, [64, 1, 13, 1]);
        let err = (op(&Op::MulMatId, d, &[w, x, bad]).unwrap_err()).to_string();
        assert!(err.contains("the ids I32, not f32 and f32"), "{err}");

        let probs = t(DType::F32, [8, 13, 1, 1]);
        let order = t(DType::I32, [8, 13, 1, 1]);
        let l = op(&Op::Argsort { descending: true }, order, &[probs]).expect("argsort");
        assert_eq!(
            (l.kernel, l.grid, l.args.i[0]),
            (Kernel::Library("argsort"), [13, 1, 1], 1)
        );
        let err =
            (op(&Op::Argsort { descending: false }, probs, &[probs]).unwrap_err()).to_string();
        assert!(err.contains("into I32 indices"), "{err}");
    }

    #[test]
    fn mul_mat_glu_is_the_gate_products_launch_with_the_up_weight_as_t3() {
        let g = t(DType::Q4_1, [576, 1536, 1, 1]);
        let u = RawTensor {
            data: 0x3000 as *mut u8,
            ..g
        };
        for (cols, plain_name, glu_name) in [
            (1, "mul_mat_vec", "mul_mat_glu_vec"),
            (13, "mul_mat_tiled", "mul_mat_glu_tiled"),
        ] {
            let x = t(DType::F32, [576, cols, 1, 1]);
            let d = t(DType::F32, [1536, cols, 1, 1]);
            let plain = op(&Op::MulMat, d, &[g, x]).expect("mul_mat");
            let fused = mul_mat_glu(ir::GluKind::GeGlu, d, [g, u, x]).expect("mul_mat + glu");
            assert_eq!(plain.kernel, Kernel::Library(plain_name));
            assert_eq!(fused.kernel, Kernel::Library(glu_name));
            assert_eq!((fused.grid, fused.block), (plain.grid, plain.block));
            assert_eq!(fused.args.t[..3], plain.args.t[..3]);
            assert_eq!((fused.args.t[3], fused.args.i[1]), (KTensor::of(&u), 1));
            assert_eq!(fused.args.i[0], 0, "no addend");
        }
        let x = t(DType::F32, [576, 1, 1, 1]);
        let d = t(DType::F32, [1536, 1, 1, 1]);
        let q8 = t(DType::Q8_0, [576, 1536, 1, 1]);
        let err = mul_mat_glu(ir::GluKind::SwiGlu, d, [g, q8, x]).unwrap_err();
        assert!(err.to_string().contains("the gate weight's dtype"), "{err}");
    }

    #[test]
    fn mul_mat_many_runs_each_products_blocks_one_after_the_other() {
        let q = t(DType::Q4_1, [576, 576, 1, 1]);
        let k = t(DType::Q4_1, [576, 192, 1, 1]);
        for (cols, plain_name, many_name) in [
            (1, "mul_mat_vec", "mul_mat_many_vec"),
            (13, "mul_mat_tiled", "mul_mat_many_tiled"),
        ] {
            let x = t(DType::F32, [576, cols, 1, 1]);
            let dq = t(DType::F32, [576, cols, 1, 1]);
            let dk = RawTensor {
                data: 0x5000 as *mut u8,
                ..t(DType::F32, [192, cols, 1, 1])
            };
            let dv = RawTensor {
                data: 0x6000 as *mut u8,
                ..dk
            };
            let v = RawTensor {
                data: 0x7000 as *mut u8,
                ..k
            };
            let each =
                [(dq, q), (dk, k), (dv, v)].map(|(d, w)| op(&Op::MulMat, d, &[w, x]).unwrap());
            let many = mul_mat_many(&[dq, dk, dv], &[q, k, v], x).unwrap();
            assert_eq!(each[0].kernel, Kernel::Library(plain_name));
            assert_eq!(many.kernel, Kernel::Library(many_name));
            let blocks: u32 = each.iter().map(|l| l.grid[0]).sum();
            assert_eq!(many.grid, [blocks, each[0].grid[1], each[0].grid[2]]);
            assert_eq!(many.block, each[0].block);
            assert_eq!(many.args.t[..3], each[0].args.t[..3]);
            assert_eq!(
                many.args.t[3..7],
                [
                    each[1].args.t[0],
                    each[1].args.t[1],
                    each[2].args.t[0],
                    each[2].args.t[1]
                ]
            );
            assert_eq!((many.args.i[0], many.args.i[1]), (0, 3));
        }
        let x = t(DType::F32, [576, 1, 1, 1]);
        let d = t(DType::F32, [576, 1, 1, 1]);
        let q8 = t(DType::Q8_0, [576, 576, 1, 1]);
        let err = mul_mat_many(&[d, d], &[q, q8], x).unwrap_err();
        assert!(err.to_string().contains("more than one dtype"), "{err}");
        assert!(
            mul_mat_many(&[d], &[q], x).is_err(),
            "one product is a mul_mat"
        );
    }

    #[test]
    fn elementwise_ops_become_generated_kernels() {
        let a = t(DType::F32, [7, 5, 1, 1]);
        let b = t(DType::F32, [7, 1, 1, 1]);
        let l = op(&Op::Add, a, &[a, b]).expect("launch");
        assert!(matches!(l.kernel, Kernel::Generated(_)));
        assert_eq!(l.grid, [5, 1, 1]);
        let g = op(
            &Op::Glu {
                kind: ir::GluKind::SwiGlu,
                swapped: false,
            },
            b,
            &[a],
        )
        .expect("glu");
        assert_eq!(g.kernel, Kernel::Library("glu_halves"));
    }

    #[test]
    fn rope_carries_its_parameters() {
        let x = t(DType::F32, [64, 9, 5, 1]);
        let pos = t(DType::I32, [5, 1, 1, 1]);
        let p = ir::RopeParams::plain(RopeMode::Neox, 64, 10000.0);
        let l = op(&Op::Rope(p), x, &[x, pos]).expect("rope");
        assert_eq!((l.grid[0], l.args.i[0], l.args.i[1]), (45, 1, 64));
        assert_eq!(l.args.f[0], 10000.0);
        assert_eq!(l.args.i[2], 0, "no frequency factors");
        let factors = t(DType::F32, [32, 1, 1, 1]);
        let l = op(&Op::Rope(p), x, &[x, pos, factors]).expect("rope with factors");
        assert_eq!((l.args.i[2], l.args.t[3].ne[0]), (1, 32));
    }
}
