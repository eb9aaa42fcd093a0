//! One of our ops as a ggml op: its number and parameters ([`node_op`]), and
//! the dtype and layout checks that refuse what ggml's CPU kernels compute
//! differently from our reference (the module doc of `ggml` lists them).

use super::Unsupported;
use super::numbers::*;
use crate::device::rpc::tensor::MAX_OP_PARAMS;
use ir::plan::PlanTensor;
use ir::{DType, GluKind, Op, RopeMode};

/// The ggml op number and `op_params` of `op` over `srcs` (the plan tensors
/// of its sources, in our order), or why the CPU backend cannot compute it
/// as our reference kernels do.
///
/// Parameters as ggml's constructors store them (floats by their bits):
/// - `rope` (src2, when present, the frequency factors): `[0 (n_past), n_dims, mode, 0 (n_ctx), n_ctx_orig, freq_base,
///   freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, 0, 0, 0, 0
///   (sections), 0 (n_offs)]`;
/// - `soft_max`: `[scale, max_bias]`; `scale`: `[scale, bias]`;
/// - `rms_norm`, `norm`: `[eps]`; `concat`: `[dim]`; `diag_mask_inf`: `[n_past]`;
/// - unary ops (`silu`, `gelu`, `gelu_erf`, `relu`, `tanh`): `GGML_OP_UNARY`
///   with `[unary op]`; `glu`: `GGML_OP_GLU` with `[glu op, swapped]`
///   (swapped is 0 in the two-source form, which ignores it);
/// - every other op: all zero. Views give `GGML_OP_NONE`.
pub fn node_op(op: &Op, srcs: &[&PlanTensor]) -> Result<(u32, [i32; MAX_OP_PARAMS]), Unsupported> {
    if op.collective().is_some() {
        return Err(Unsupported::new(
            op,
            "collectives are not ggml ops (a remote device joins no collective)",
        ));
    }
    let arity = ir::rules::arity(op);
    if !arity.contains(&srcs.len()) {
        return Err(Unsupported::new(
            op,
            format!(
                "it takes {} to {} sources, the step has {}",
                arity.start(),
                arity.end(),
                srcs.len()
            ),
        ));
    }
    let c = Checks { op, srcs };
    let mut p = [0i32; MAX_OP_PARAMS];
    let number = match *op {
        Op::View { .. } | Op::Reshape | Op::Permute { .. } | Op::Transpose => GGML_OP_NONE,
        Op::AllReduceSum { .. } | Op::AllGather { .. } | Op::ReduceScatterSum { .. } => {
            return Err(Unsupported::new(op, "collectives are not ggml ops"));
        }
        Op::GetRowsPart { .. } => {
            return Err(Unsupported::new(op, "a table's part is not a ggml op"));
        }
        Op::MulMatIdPart { .. } => {
            return Err(Unsupported::new(
                op,
                "a part of the experts is not a ggml op",
            ));
        }
        Op::GetRows => {
            c.rows_packed(0, "table (src0)")?;
            c.dtype(1, "indices (src1)", &[DType::I32])?;
            GGML_OP_GET_ROWS
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let (a, b) = (c.src(0)?, c.src(1)?);
            c.dtype(0, "src0", &FLOATS)?;
            c.dtype(1, "src1", &FLOATS)?;
            if a.dtype != b.dtype && b.dtype != DType::F32 {
                return Err(c.no(format!(
                    "src0 '{}' is {} and src1 '{}' is {}; ggml's CPU binary ops take equal \
                     dtypes or an f32 src1",
                    a.name, a.dtype, b.name, b.dtype
                )));
            }
            c.rows_packed(0, "src0")?;
            match op {
                Op::Add => GGML_OP_ADD,
                Op::Sub => GGML_OP_SUB,
                Op::Mul => GGML_OP_MUL,
                _ => GGML_OP_DIV,
            }
        }
        Op::Scale { scale, bias } => {
            c.dtype(0, "src0", &[DType::F32, DType::BF16])?;
            c.contiguous(0, "src0", 0)?;
            p[0] = f32_param(scale);
            p[1] = f32_param(bias);
            GGML_OP_SCALE
        }
        Op::Sqr | Op::Sqrt | Op::Silu | Op::Gelu | Op::GeluErf | Op::Relu | Op::Tanh => {
            c.dtype(0, "src0", &FLOATS)?;
            c.rows_packed(0, "src0")?;
            let unary = match op {
                Op::Sqr => return Ok((GGML_OP_SQR, p)),
                Op::Sqrt => return Ok((GGML_OP_SQRT, p)),
                Op::Silu => GGML_UNARY_OP_SILU,
                Op::Gelu => GGML_UNARY_OP_GELU,
                Op::GeluErf => GGML_UNARY_OP_GELU_ERF,
                Op::Relu => GGML_UNARY_OP_RELU,
                _ => GGML_UNARY_OP_TANH,
            };
            p[0] = unary;
            GGML_OP_UNARY
        }
        Op::Glu { kind, swapped } => {
            c.dtype(0, "gate (src0)", &FLOATS)?;
            c.contiguous(0, "gate (src0)", 1)?;
            if let Some(up) = srcs.get(1) {
                let gate = c.src(0)?;
                if up.dtype != gate.dtype {
                    return Err(c.no(format!(
                        "gate '{}' is {} and up '{}' is {}; ggml's CPU glu takes one dtype",
                        gate.name, gate.dtype, up.name, up.dtype
                    )));
                }
                c.contiguous(1, "up (src1)", 1)?;
            }
            p[0] = match kind {
                GluKind::SwiGlu => GGML_GLU_OP_SWIGLU,
                GluKind::GeGlu => GGML_GLU_OP_GEGLU,
                GluKind::GeGluErf => GGML_GLU_OP_GEGLU_ERF,
            };
            p[1] = i32::from(swapped && srcs.len() == 1);
            GGML_OP_GLU
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            c.dtype(0, "src0", &[DType::F32])?;
            if eps.is_nan() || eps < 0.0 {
                return Err(c.no(format!("eps {eps} is not >= 0 (ggml asserts it)")));
            }
            p[0] = f32_param(eps);
            if matches!(op, Op::RmsNorm { .. }) {
                c.rows_packed(0, "src0")?;
                GGML_OP_RMS_NORM
            } else {
                GGML_OP_NORM
            }
        }
        Op::MulMat => {
            let (a, b) = (c.src(0)?, c.src(1)?);
            c.rows_packed(0, "src0")?;
            c.dtype(1, "src1", &FLOATS)?;
            c.rows_packed(1, "src1")?;
            if a.nb[0] > a.nb[1] {
                return Err(c.no(format!(
                    "src0 '{}' is transposed (nb0 {} > nb1 {})",
                    a.name, a.nb[0], a.nb[1]
                )));
            }
            let src1_ok: &[DType] = match a.dtype {
                DType::F32 => &FLOATS,
                DType::F16 => &[DType::F16, DType::F32],
                DType::BF16 => &[DType::BF16, DType::F32],
                DType::I32 => &[],
                _ => &[DType::F32],
            };
            if !src1_ok.contains(&b.dtype) {
                return Err(c.no(format!(
                    "src0 '{}' is {} and src1 '{}' is {}; ggml's CPU mul_mat converts src1 \
                     only from f32 (or widens f16/bf16 for an f32 src0)",
                    a.name, a.dtype, b.name, b.dtype
                )));
            }
            GGML_OP_MUL_MAT
        }
        Op::SoftMax { scale, max_bias } => {
            c.dtype(0, "src0", &[DType::F32])?;
            c.rows_packed(0, "src0")?;
            if srcs.len() == 2 {
                c.dtype(1, "mask (src1)", &[DType::F32, DType::F16])?;
                c.rows_packed(1, "mask (src1)")?;
            }
            p[0] = f32_param(scale);
            p[1] = f32_param(max_bias);
            GGML_OP_SOFT_MAX
        }
        Op::Rope(r) => {
            c.dtype(0, "src0", &[DType::F32, DType::F16])?;
            c.rows_packed(0, "src0")?;
            c.dtype(1, "positions (src1)", &[DType::I32])?;
            c.rows_packed(1, "positions (src1)")?;
            if srcs.len() > 2 {
                // ggml reads the frequency factors as src[2], F32, one per pair.
                c.dtype(2, "frequency factors (src2)", &[DType::F32])?;
                c.rows_packed(2, "frequency factors (src2)")?;
            }
            let int = |v: u32, what: &str| {
                i32::try_from(v).map_err(|_| c.no(format!("{what} {v} exceeds ggml's i32")))
            };
            p[1] = int(r.n_dims, "n_dims")?;
            p[2] = match r.mode {
                RopeMode::Normal => GGML_ROPE_TYPE_NORMAL,
                RopeMode::Neox => GGML_ROPE_TYPE_NEOX,
            };
            p[4] = int(r.n_ctx_orig, "n_ctx_orig")?;
            p[5] = f32_param(r.freq_base);
            p[6] = f32_param(r.freq_scale);
            p[7] = f32_param(r.ext_factor);
            p[8] = f32_param(r.attn_factor);
            p[9] = f32_param(r.beta_fast);
            p[10] = f32_param(r.beta_slow);
            GGML_OP_ROPE
        }
        Op::Cpy => {
            let (a, dst) = (c.src(0)?, c.src(1)?);
            c.dtype(0, "src0", &FLOATS)?;
            if dst.dtype == DType::I32 {
                return Err(c.no(format!(
                    "destination '{}' is i32 (our cpy converts only into float or quantized)",
                    dst.name
                )));
            }
            if dst.dtype.is_quantized() {
                c.contiguous(1, "quantized destination (src1)", 0)?;
                c.rows_packed(0, "src0")?;
                let blck = dst.dtype.block_elems() as i64;
                if a.ne[0] % blck != 0 || a.ne[0] > dst.ne[0] {
                    return Err(c.no(format!(
                        "src0 '{}' rows of {} do not quantize into {} blocks of {} within \
                         destination rows of {} (ggml quantizes src0 row by row)",
                        a.name, a.ne[0], dst.dtype, blck, dst.ne[0]
                    )));
                }
            }
            GGML_OP_CPY
        }
        Op::Cont => {
            let a = c.src(0)?;
            if a.dtype.is_quantized() && !contiguous_from(a, 0) && !rows_packed(a) {
                return Err(c.no(format!(
                    "quantized src0 '{}' is neither contiguous nor made of packed rows",
                    a.name
                )));
            }
            GGML_OP_CONT
        }
        Op::SetRows => {
            let dst = c.src(0)?;
            if dst.dtype == DType::I32 {
                return Err(c.no(format!("destination '{}' is i32", dst.name)));
            }
            c.rows_packed(0, "destination (src0)")?;
            c.dtype(1, "rows (src1)", &[DType::F32, DType::F16])?;
            c.rows_packed(1, "rows (src1)")?;
            c.dtype(2, "indices (src2)", &[DType::I32])?;
            GGML_OP_SET_ROWS
        }
        Op::Concat { dim } => {
            let (a, b) = (c.src(0)?, c.src(1)?);
            if dim > 3 {
                return Err(c.no(format!("dim {dim} is not 0..=3")));
            }
            if a.dtype != b.dtype {
                return Err(c.no(format!(
                    "src0 '{}' is {} and src1 '{}' is {}",
                    a.name, a.dtype, b.name, b.dtype
                )));
            }
            if a.dtype.is_quantized() {
                c.rows_packed(0, "quantized src0")?;
                c.rows_packed(1, "quantized src1")?;
            }
            p[0] = i32::from(dim);
            GGML_OP_CONCAT
        }
        Op::SumRows | Op::Mean => {
            c.dtype(0, "src0", &[DType::F32])?;
            c.rows_packed(0, "src0")?;
            if matches!(op, Op::SumRows) {
                GGML_OP_SUM_ROWS
            } else {
                GGML_OP_MEAN
            }
        }
        Op::Argmax => {
            let a = c.src(0)?;
            c.dtype(0, "src0", &[DType::F32])?;
            c.rows_packed(0, "src0")?;
            if a.ne[2] != 1 || a.ne[3] != 1 {
                return Err(c.no(format!(
                    "src0 '{}' is not a matrix (ggml's argmax reads only its first one)",
                    a.name
                )));
            }
            GGML_OP_ARGMAX
        }
        Op::Clamp { min, max } => {
            c.dtype(0, "src0", &[DType::F32, DType::F16])?;
            c.contiguous(0, "src0", 0)?;
            p[0] = f32_param(min);
            p[1] = f32_param(max);
            GGML_OP_CLAMP
        }
        Op::Argsort { descending } => {
            c.dtype(0, "src0", &[DType::F32])?;
            c.rows_packed(0, "src0")?;
            p[0] = i32::from(descending); // GGML_SORT_ORDER_DESC = 1
            GGML_OP_ARGSORT
        }
        Op::MulMatId => {
            let a = c.src(0)?;
            c.rows_packed(0, "experts (src0)")?;
            c.dtype(1, "activations (src1)", &[DType::F32])?;
            c.rows_packed(1, "activations (src1)")?;
            c.dtype(2, "expert ids (src2)", &[DType::I32])?;
            if a.nb[0] > a.nb[1] {
                return Err(c.no(format!("experts '{}' are transposed", a.name)));
            }
            GGML_OP_MUL_MAT_ID
        }
        Op::DiagMaskInf { n_past } => {
            c.dtype(0, "src0", &[DType::F32])?;
            c.contiguous(0, "src0", 0)?;
            p[0] = i32::try_from(n_past)
                .ok()
                .filter(|&n| n >= 0)
                .ok_or_else(|| c.no(format!("n_past {n_past} is not in 0..=2^31-1")))?;
            GGML_OP_DIAG_MASK_INF
        }
    };
    Ok((number, p))
}

/// The plain (non-block) float dtypes.
const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// An f32 parameter as ggml stores it: its bits in an i32 slot.
fn f32_param(x: f32) -> i32 {
    i32::from_le_bytes(x.to_le_bytes())
}

/// For each ggml source slot, the index of our source that fills it: ours
/// in order, except `set_rows`, whose ggml sources are (rows, indices,
/// destination) where ours are (destination, rows, indices).
pub(super) fn ggml_sources(op: &Op, n: usize) -> Vec<usize> {
    match op {
        Op::SetRows if n == 3 => vec![1, 2, 0],
        _ => (0..n).collect(),
    }
}

/// `nb0` is the dtype's block size: a row's elements are packed.
fn rows_packed(t: &PlanTensor) -> bool {
    t.nb[0] == t.dtype.block_bytes()
}

/// ggml's `ggml_is_contiguous_m_n(t, m, 4)`: dims above `m` follow each
/// other packed (unit dims excepted), dims `1..=m` may be strided, and a row
/// is packed unless it is a single block.
fn contiguous_from(t: &PlanTensor, m: usize) -> bool {
    let blck = t.dtype.block_elems();
    let Ok(ne0) = u64::try_from(t.ne[0]) else {
        return false;
    };
    if ne0 != blck && t.nb[0] != t.dtype.block_bytes() {
        return false;
    }
    // The stride dim i must have to follow the dims below it packed.
    let Some(mut next) = t.dtype.block_bytes().checked_mul(ne0 / blck) else {
        return false;
    };
    for i in 1..4 {
        let Ok(ne) = u64::try_from(t.ne[i]) else {
            return false;
        };
        let after = if i > m {
            if ne != 1 && t.nb[i] != next {
                return false;
            }
            next.checked_mul(ne)
        } else {
            ne.checked_mul(t.nb[i])
        };
        let Some(after) = after else {
            return false;
        };
        next = after;
    }
    true
}

/// Elements divided by the block size (the blocks a packed copy holds).
pub(super) fn count_blocks(t: &PlanTensor) -> Option<u64> {
    let mut n: u64 = 1;
    for &e in &t.ne {
        n = n.checked_mul(u64::try_from(e).ok()?)?;
    }
    Some(n / t.dtype.block_elems())
}

/// The dtype and layout checks [`node_op`] makes of its sources.
struct Checks<'a> {
    op: &'a Op,
    srcs: &'a [&'a PlanTensor],
}

impl<'a> Checks<'a> {
    fn no(&self, reason: String) -> Unsupported {
        Unsupported::new(self.op, reason)
    }

    fn src(&self, i: usize) -> Result<&'a PlanTensor, Unsupported> {
        self.srcs
            .get(i)
            .copied()
            .ok_or_else(|| self.no(format!("source {i} is missing")))
    }

    fn dtype(&self, i: usize, what: &str, allowed: &[DType]) -> Result<(), Unsupported> {
        let t = self.src(i)?;
        if allowed.contains(&t.dtype) {
            return Ok(());
        }
        let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
        Err(self.no(format!(
            "{what} '{}' is {}; ggml's CPU {} takes {}",
            t.name,
            t.dtype,
            self.op.name(),
            names.join(" or ")
        )))
    }

    fn rows_packed(&self, i: usize, what: &str) -> Result<(), Unsupported> {
        let t = self.src(i)?;
        if rows_packed(t) {
            return Ok(());
        }
        Err(self.no(format!(
            "{what} '{}' has nb0 {} where a {} element takes {} (ggml's CPU {} reads rows packed)",
            t.name,
            t.nb[0],
            t.dtype,
            t.dtype.block_bytes(),
            self.op.name()
        )))
    }

    fn contiguous(&self, i: usize, what: &str, m: usize) -> Result<(), Unsupported> {
        let t = self.src(i)?;
        if contiguous_from(t, m) {
            return Ok(());
        }
        let need = if m == 0 {
            "contiguous"
        } else {
            "rows evenly strided by nb1"
        };
        Err(self.no(format!(
            "{what} '{}' (strides {:?}) is not {need}, as ggml's CPU {} requires",
            t.name,
            t.nb,
            self.op.name()
        )))
    }
}

/// Checks the result tensor against what ggml computes for `op` over `srcs`:
/// its dtype and extents, packed strides (a write-into result: exactly its
/// destination's layout), and for a quantized `cont` one of the two copies
/// ggml's CPU backend does correctly for block types.
pub(super) fn check_result(
    op: &Op,
    srcs: &[&PlanTensor],
    dst: &PlanTensor,
) -> Result<(), Unsupported> {
    let no = |reason: String| Unsupported::new(op, reason);
    let src = |i: usize| {
        srcs.get(i)
            .copied()
            .ok_or_else(|| no(format!("source {i} is missing")))
    };
    if let Some(k) = op.writes_into_source() {
        let dest = src(k)?;
        if (dest.dtype, dest.ne, dest.nb) != (dst.dtype, dst.ne, dst.nb) {
            return Err(no(format!(
                "result '{}' does not have its destination '{}''s layout",
                dst.name, dest.name
            )));
        }
        return Ok(());
    }
    let a = src(0)?;
    let expect: (DType, Option<[i64; 4]>) = match *op {
        Op::GetRows => {
            let idx = src(1)?;
            let dtype = if a.dtype == DType::I32 {
                DType::I32
            } else {
                DType::F32
            };
            (dtype, Some([a.ne[0], idx.ne[0], idx.ne[1], idx.ne[2]]))
        }
        Op::MulMat => {
            let b = src(1)?;
            (DType::F32, Some([a.ne[1], b.ne[1], b.ne[2], b.ne[3]]))
        }
        Op::Glu { .. } if srcs.len() == 1 => {
            (a.dtype, Some([a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]]))
        }
        Op::Concat { dim } => {
            let b = src(1)?;
            let mut ne = a.ne;
            let d = usize::from(dim.min(3));
            ne[d] = ne[d]
                .checked_add(b.ne[d])
                .ok_or_else(|| no("the joined extent overflows".to_string()))?;
            (a.dtype, Some(ne))
        }
        Op::SumRows | Op::Mean => (a.dtype, Some([1, a.ne[1], a.ne[2], a.ne[3]])),
        Op::Argmax => (DType::I32, Some([a.ne[1], 1, 1, 1])),
        Op::Argsort { .. } => (DType::I32, Some(a.ne)),
        Op::MulMatId => {
            let ids = src(2)?;
            (DType::F32, Some([a.ne[1], ids.ne[0], ids.ne[1], 1]))
        }
        Op::Cont => (a.dtype, None),
        _ => (a.dtype, Some(a.ne)),
    };
    if dst.dtype != expect.0 || expect.1.is_some_and(|ne| ne != dst.ne) {
        return Err(no(format!(
            "result '{}' is {} {:?}, but ggml computes {} {:?}",
            dst.name,
            dst.dtype,
            dst.ne,
            expect.0,
            expect.1.unwrap_or(dst.ne)
        )));
    }
    if !contiguous_from(dst, 0) {
        return Err(no(format!(
            "result '{}' (strides {:?}) is not packed",
            dst.name, dst.nb
        )));
    }
    if let Op::Cont = op {
        if count_blocks(a) != count_blocks(dst) {
            return Err(no(format!(
                "src0 '{}' and result '{}' differ in element count",
                a.name, dst.name
            )));
        }
        // ggml copies a block type correctly only as one memcpy of a
        // contiguous source or row by row between equal shapes.
        if a.dtype.is_quantized() && !contiguous_from(a, 0) && !(a.ne == dst.ne && rows_packed(a)) {
            return Err(no(format!(
                "quantized src0 '{}' is strided and the result '{}' has another shape \
                 (ggml's CPU copy mis-sizes block rows there)",
                a.name, dst.name
            )));
        }
    }
    Ok(())
}
