//! Shape, stride and dtype rules of every op: what a node's layout must be given
//! its operands. The builder uses them to infer layouts and the verifier to
//! re-check a parsed graph; both report the reason this module returns.
//!
//! Invariants of a derived result:
//! - non-view ops produce contiguous tensors (ggml allocates them packed);
//! - view ops and write-into ops (`cpy`, `set_rows`) produce a [`ViewOf`] naming
//!   the root of their source and the byte offset into it, and stay in bounds
//!   of the root's span.

use crate::dtype::DType;
use crate::layout::{Layout, fmt_ne};
use crate::op::{GluKind, Op};
use crate::tensor::{Tensor, TensorId, ViewOf};

/// An operand as the rules see it: its id (needed to name a view's root) and tensor.
pub type Operand<'a> = (TensorId, &'a Tensor);

/// What the rules decide for a node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Derived {
    /// The result's layout.
    pub layout: Layout,
    /// Set for views and write-into ops: whose bytes the result aliases.
    pub view: Option<ViewOf>,
}

/// Derives the result of `op` over `srcs`. `declared` is the layout the node
/// claims; view and reshape take their shape from it, other ops ignore it here
/// (the verifier compares it with the result). The error is one sentence
/// saying which rule fails; callers add the node's name and operands.
pub fn derive(op: &Op, srcs: &[Operand<'_>], declared: Option<&Layout>) -> Result<Derived, String> {
    check_arity(op, srcs.len())?;
    // A parsed graph reaches here before the verifier has seen its leaves:
    // the rules below divide by extents, so empty ones stop here.
    for (i, (_, t)) in srcs.iter().enumerate() {
        if t.layout.ne.iter().any(|&n| n < 1) {
            return Err(format!(
                "src{i} has extents {} (each must be >= 1)",
                fmt_ne(&t.layout.ne)
            ));
        }
    }
    if let Some(d) = declared.filter(|d| d.ne.iter().any(|&n| n < 1)) {
        return Err(format!(
            "the result's extents {} are not all >= 1",
            fmt_ne(&d.ne)
        ));
    }
    let s = |i: usize| &srcs[i].1.layout;
    let packed = |dtype: DType, ne: [i64; 4]| -> Result<Derived, String> {
        Layout::contiguous(dtype, ne)
            .map(|layout| Derived { layout, view: None })
            .ok_or_else(|| format!("result {dtype} {} is not representable", fmt_ne(&ne)))
    };
    match op {
        Op::GetRowsPart { start } if *start < 0 => {
            Err(format!("start {start} must not be negative"))
        }
        Op::GetRowsPart { .. } if s(0).dtype == DType::I32 => {
            Err("the table's rows are added up as f32: an I32 table has no parts".to_string())
        }
        Op::GetRows | Op::GetRowsPart { .. } => {
            let (a, b) = (s(0), s(1));
            need_dtype(b, "indices (src1)", &[DType::I32])?;
            if b.ne[3] != 1 || a.ne[2] != b.ne[1] || a.ne[3] != b.ne[2] {
                return Err(format!(
                    "indices {} must be [n, ne2, ne3, 1] with ne2, ne3 = the table's {}, {}",
                    fmt_ne(&b.ne),
                    a.ne[2],
                    a.ne[3]
                ));
            }
            let dtype = if a.dtype == DType::I32 {
                DType::I32
            } else {
                DType::F32
            };
            packed(dtype, [a.ne[0], b.ne[0], b.ne[1], b.ne[2]])
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let (a, b) = (s(0), s(1));
            need_float(a, "src0")?;
            need_float(b, "src1")?;
            if (0..4).any(|i| a.ne[i] % b.ne[i] != 0) {
                return Err(format!(
                    "src1 {} does not repeat evenly over src0 {}",
                    fmt_ne(&b.ne),
                    fmt_ne(&a.ne)
                ));
            }
            packed(a.dtype, a.ne)
        }
        crate::unary_op!() | Op::DiagMaskInf { .. } => {
            need_float(s(0), "src0")?;
            packed(s(0).dtype, s(0).ne)
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            need_float(s(0), "src0")?;
            if eps.is_nan() || *eps < 0.0 {
                return Err(format!("eps {eps} must be >= 0"));
            }
            packed(s(0).dtype, s(0).ne)
        }
        Op::Glu { kind, .. } => derive_glu(*kind, srcs).and_then(|(d, ne)| packed(d, ne)),
        Op::MulMat => derive_mul_mat(s(0), s(1)).and_then(|ne| packed(DType::F32, ne)),
        Op::MulMatId => derive_mul_mat_id(s(0), s(1), s(2)).and_then(|ne| packed(DType::F32, ne)),
        Op::MulMatIdPart { first, experts } => {
            if *first < 0 || first.saturating_add(s(0).ne[2]) > *experts {
                return Err(format!(
                    "experts [{first}, {}) must lie inside the {experts} experts of the full set",
                    first.saturating_add(s(0).ne[2])
                ));
            }
            derive_mul_mat_id(s(0), s(1), s(2)).and_then(|ne| packed(DType::F32, ne))
        }
        Op::Argsort { .. } => {
            need_dtype(s(0), "src0", &[DType::F32])?;
            packed(DType::I32, s(0).ne)
        }
        Op::SoftMax { .. } => {
            let a = s(0);
            need_float(a, "src0")?;
            if let Some((_, mask)) = srcs.get(1) {
                let m = &mask.layout;
                need_dtype(m, "mask (src1)", &[DType::F32, DType::F16])?;
                if m.ne[0] != a.ne[0]
                    || m.ne[1] < a.ne[1]
                    || a.ne[2] % m.ne[2] != 0
                    || a.ne[3] % m.ne[3] != 0
                {
                    return Err(format!(
                        "mask {} must have ne0 = {}, ne1 >= {} and dims 2, 3 that repeat over {}",
                        fmt_ne(&m.ne),
                        a.ne[0],
                        a.ne[1],
                        fmt_ne(&a.ne)
                    ));
                }
            }
            packed(a.dtype, a.ne)
        }
        Op::Rope(p) => {
            let (a, pos) = (s(0), s(1));
            need_float(a, "src0")?;
            need_dtype(pos, "positions (src1)", &[DType::I32])?;
            if pos.ne[0] != a.ne[2] || pos.n_elements() != pos.ne[0] as u64 {
                return Err(format!(
                    "positions {} must be [{}] (one per token, src0 dim 2)",
                    fmt_ne(&pos.ne),
                    a.ne[2]
                ));
            }
            if p.n_dims == 0 || p.n_dims % 2 != 0 || i64::from(p.n_dims) > a.ne[0] {
                return Err(format!(
                    "n_dims {} must be even, positive and at most the row length {}",
                    p.n_dims, a.ne[0]
                ));
            }
            if let Some((_, factors)) = srcs.get(2) {
                let f = &factors.layout;
                need_dtype(f, "frequency factors (src2)", &[DType::F32])?;
                if f.ne[0] < i64::from(p.n_dims / 2) || !f.is_contiguous() {
                    return Err(format!(
                        "frequency factors {} must be contiguous with at least {} elements (n_dims / 2)",
                        fmt_ne(&f.ne),
                        p.n_dims / 2
                    ));
                }
            }
            packed(a.dtype, a.ne)
        }
        Op::Cpy => {
            let (a, b) = (s(0), s(1));
            need_float(a, "src0")?;
            if a.n_elements() != b.n_elements() {
                return Err(format!(
                    "src0 {} and destination {} differ in element count",
                    fmt_ne(&a.ne),
                    fmt_ne(&b.ne)
                ));
            }
            need_writable(b, "destination (src1)")?;
            Ok(Derived {
                layout: *b,
                view: Some(view_base(srcs[1])),
            })
        }
        Op::Cont => {
            // Like ggml_cont_1d..4d: packing may also reshape (same element count).
            let a = s(0);
            match declared {
                Some(d) if d.ne != a.ne => {
                    let want = Layout::contiguous(a.dtype, d.ne)
                        .filter(|w| w.n_elements() == a.n_elements());
                    want.map(|layout| Derived { layout, view: None })
                        .ok_or_else(|| {
                            format!(
                                "cannot pack {} into {}: element counts differ",
                                fmt_ne(&a.ne),
                                fmt_ne(&d.ne)
                            )
                        })
                }
                _ => packed(a.dtype, a.ne),
            }
        }
        Op::SetRows => {
            let (dst, rows, idx) = (s(0), s(1), s(2));
            need_float(rows, "rows (src1)")?;
            need_dtype(idx, "indices (src2)", &[DType::I32])?;
            need_writable(dst, "destination (src0)")?;
            let ok = rows.ne[0] == dst.ne[0]
                && idx.ne[0] == rows.ne[1]
                && rows.ne[2] % idx.ne[1] == 0
                && rows.ne[3] % idx.ne[2] == 0
                && idx.ne[3] == 1
                && rows.ne[2] == dst.ne[2]
                && rows.ne[3] == dst.ne[3];
            if !ok {
                return Err(format!(
                    "destination {}, rows {} and indices {} do not fit: rows need the \
                     destination's ne0, ne2 and ne3, and one index per row",
                    fmt_ne(&dst.ne),
                    fmt_ne(&rows.ne),
                    fmt_ne(&idx.ne)
                ));
            }
            Ok(Derived {
                layout: *dst,
                view: Some(view_base(srcs[0])),
            })
        }
        Op::View { offset } => {
            let d = declared.ok_or("view needs the result's ne and nb")?;
            if d.dtype != s(0).dtype {
                return Err(format!(
                    "a view keeps its source's dtype {}, not {}",
                    s(0).dtype,
                    d.dtype
                ));
            }
            if d.dtype.row_bytes(d.ne[0].max(0) as u64).is_none() || d.ne.iter().any(|&n| n < 1) {
                return Err(format!(
                    "extents {} are not valid for {}",
                    fmt_ne(&d.ne),
                    d.dtype
                ));
            }
            if d.nb[0] != d.dtype.block_bytes() {
                return Err(format!(
                    "nb0 must be {} (the {} element size), not {}",
                    d.dtype.block_bytes(),
                    d.dtype,
                    d.nb[0]
                ));
            }
            let base = view_base(srcs[0]);
            Ok(Derived {
                layout: *d,
                view: Some(ViewOf {
                    root: base.root,
                    offset: base.offset + offset,
                }),
            })
        }
        Op::Reshape => {
            let a = s(0);
            let d = declared.ok_or("reshape needs the result's ne")?;
            if !a.is_contiguous() {
                return Err("reshape needs a contiguous source (add cont first)".into());
            }
            let want = Layout::contiguous(a.dtype, d.ne).ok_or_else(|| {
                format!("extents {} are not valid for {}", fmt_ne(&d.ne), a.dtype)
            })?;
            if want.n_elements() != a.n_elements() {
                return Err(format!(
                    "{} has {} elements, {} has {}",
                    fmt_ne(&a.ne),
                    a.n_elements(),
                    fmt_ne(&d.ne),
                    want.n_elements()
                ));
            }
            Ok(Derived {
                layout: want,
                view: Some(view_base(srcs[0])),
            })
        }
        Op::Permute { axes } => {
            let layout = s(0)
                .permuted(*axes)
                .ok_or_else(|| format!("axes {axes:?} are not a permutation of 0..4"))?;
            Ok(Derived {
                layout,
                view: Some(view_base(srcs[0])),
            })
        }
        Op::Transpose => {
            let layout = s(0)
                .permuted([1, 0, 2, 3])
                .ok_or("unreachable: fixed permutation")?;
            Ok(Derived {
                layout,
                view: Some(view_base(srcs[0])),
            })
        }
        Op::Concat { dim } => {
            let (a, b, d) = (s(0), s(1), *dim as usize);
            if d > 3 {
                return Err(format!("dim {dim} must be 0..=3"));
            }
            if a.dtype != b.dtype || (0..4).any(|i| i != d && a.ne[i] != b.ne[i]) {
                return Err(format!(
                    "{} {} and {} {} must agree in dtype and in every dim but {d}",
                    a.dtype,
                    fmt_ne(&a.ne),
                    b.dtype,
                    fmt_ne(&b.ne)
                ));
            }
            let mut ne = a.ne;
            ne[d] += b.ne[d];
            packed(a.dtype, ne)
        }
        Op::SumRows | Op::Mean => {
            need_float(s(0), "src0")?;
            let a = s(0);
            packed(a.dtype, [1, a.ne[1], a.ne[2], a.ne[3]])
        }
        Op::Argmax => {
            let a = s(0);
            need_float(a, "src0")?;
            if a.ne[2] != 1 || a.ne[3] != 1 {
                return Err(format!("argmax takes a matrix, got {}", fmt_ne(&a.ne)));
            }
            packed(DType::I32, [a.ne[1], 1, 1, 1])
        }
        Op::AllReduceSum { .. } | Op::AllGather { .. } | Op::ReduceScatterSum { .. } => {
            let ne = derive_collective(op, srcs)?;
            packed(DType::F32, ne)
        }
    }
}

/// The result extents of a collective's participant: its parts are packed
/// f32 (they are read in place from other devices); an all-reduce's parts
/// share one shape, an all-gather's agree in every axis but `dim`; a
/// reduce-scatter's share one shape, of which the participant keeps
/// `[start, start + len)` along `dim`.
fn derive_collective(op: &Op, srcs: &[Operand<'_>]) -> Result<[i64; 4], String> {
    let c = op.collective().expect("a collective");
    if c.ranks == 0 || c.rank >= c.ranks {
        return Err(format!("rank {} is not below ranks {}", c.rank, c.ranks));
    }
    for (i, (_, t)) in srcs.iter().enumerate() {
        if t.layout.dtype != DType::F32 || !t.layout.is_contiguous() {
            return Err(format!(
                "part {i} is {} {}; collectives take packed f32 parts",
                t.layout.dtype,
                if t.layout.is_contiguous() {
                    "packed"
                } else {
                    "strided"
                }
            ));
        }
    }
    let first = srcs[0].1.layout.ne;
    let dim = match *op {
        Op::AllGather { dim, .. } if dim > 3 => return Err(format!("dim {dim} must be 0..=3")),
        Op::AllGather { dim, .. } => Some(dim as usize),
        _ => None,
    };
    if let Op::ReduceScatterSum {
        dim, start, len, ..
    } = *op
    {
        if dim > 3 {
            return Err(format!("dim {dim} must be 0..=3"));
        }
        let extent = first[dim as usize];
        if len < 1 || start < 0 || start > extent - len {
            return Err(format!(
                "slice [{start}, {start} + {len}) is not inside dim {dim} of the parts {}",
                fmt_ne(&first)
            ));
        }
    }
    let mut ne = first;
    for (i, (_, t)) in srcs.iter().enumerate().skip(1) {
        let other = t.layout.ne;
        if (0..4).any(|a| Some(a) != dim && other[a] != first[a]) {
            return Err(format!(
                "part {i} {} does not match part 0 {}{}",
                fmt_ne(&other),
                fmt_ne(&first),
                dim.map_or(String::new(), |d| format!(" outside dim {d}"))
            ));
        }
        if let Some(d) = dim {
            ne[d] += other[d];
        }
    }
    if let Op::ReduceScatterSum { dim, len, .. } = *op {
        ne[dim as usize] = len;
    }
    Ok(ne)
}

/// How many sources each op takes.
pub fn arity(op: &Op) -> std::ops::RangeInclusive<usize> {
    match op {
        crate::unary_op!()
        | Op::RmsNorm { .. }
        | Op::Norm { .. }
        | Op::Cont
        | Op::View { .. }
        | Op::Reshape
        | Op::Permute { .. }
        | Op::Transpose
        | Op::SumRows
        | Op::Mean
        | Op::Argmax
        | Op::Argsort { .. }
        | Op::DiagMaskInf { .. } => 1..=1,
        Op::Glu { .. } | Op::SoftMax { .. } => 1..=2,
        Op::GetRows
        | Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | Op::MulMat
        | Op::Cpy
        | Op::Concat { .. }
        | Op::GetRowsPart { .. } => 2..=2,
        // Rope's optional third source: the frequency factors (Llama 3's `rope_freqs`).
        Op::Rope(_) => 2..=3,
        Op::SetRows | Op::MulMatId | Op::MulMatIdPart { .. } => 3..=3,
        Op::AllReduceSum { .. } | Op::AllGather { .. } | Op::ReduceScatterSum { .. } => {
            1..=MAX_PARTS
        }
    }
}

/// The most parts a collective joins (ggml's meta backend allows 16 devices).
pub const MAX_PARTS: usize = 16;

/// `Err("takes 2 sources, got 3")` unless `op` takes `n` sources.
pub fn check_arity(op: &Op, n: usize) -> Result<(), String> {
    let want = arity(op);
    if want.contains(&n) {
        return Ok(());
    }
    let expected = if want.start() == want.end() {
        want.start().to_string()
    } else if want.end() - want.start() == 1 {
        format!("{} or {}", want.start(), want.end())
    } else {
        format!("{} to {}", want.start(), want.end())
    };
    Err(format!("takes {expected} sources, got {n}"))
}

fn derive_glu(_kind: GluKind, srcs: &[Operand<'_>]) -> Result<(DType, [i64; 4]), String> {
    let a = &srcs[0].1.layout;
    need_float(a, "src0")?;
    match srcs.get(1) {
        None => {
            if a.ne[0] % 2 != 0 {
                return Err(format!(
                    "one-source glu splits rows in halves; ne0 {} is odd",
                    a.ne[0]
                ));
            }
            Ok((a.dtype, [a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]]))
        }
        Some((_, b)) => {
            need_float(&b.layout, "src1")?;
            if a.ne != b.layout.ne {
                return Err(format!(
                    "gate {} and up {} differ in shape",
                    fmt_ne(&a.ne),
                    fmt_ne(&b.layout.ne)
                ));
            }
            Ok((a.dtype, a.ne))
        }
    }
}

fn derive_mul_mat(a: &Layout, b: &Layout) -> Result<[i64; 4], String> {
    if a.dtype == DType::I32 {
        return Err("src0 must not be i32".into());
    }
    need_float(b, "src1")?;
    if a.ne[0] != b.ne[0] {
        return Err(format!(
            "inner dimensions differ: src0 ne0 {} vs src1 ne0 {}",
            a.ne[0], b.ne[0]
        ));
    }
    if b.ne[2] % a.ne[2] != 0 || b.ne[3] % a.ne[3] != 0 {
        return Err(format!(
            "src0 {} does not broadcast over src1 {} in dims 2 and 3",
            fmt_ne(&a.ne),
            fmt_ne(&b.ne)
        ));
    }
    if a.is_transposed() {
        return Err("src0 must not be transposed (ggml reads its rows packed)".into());
    }
    if a.dtype.is_quantized() && !a.rows_packed() {
        return Err(format!(
            "quantized src0 ({}) must have packed rows",
            a.dtype
        ));
    }
    Ok([a.ne[1], b.ne[1], b.ne[2], b.ne[3]])
}

/// `mul_mat_id`'s result extents: experts `[k, n, n_expert]` (one matrix per
/// expert, rows packed), activations `[k, b1, t]` with b1 = 1 or n_used,
/// ids I32 `[n_used, t]`; result `[n, n_used, t]`.
fn derive_mul_mat_id(a: &Layout, b: &Layout, ids: &Layout) -> Result<[i64; 4], String> {
    // Each expert's matrix as mul_mat's src0 against one token's rows.
    let one_expert = |l: &Layout| Layout {
        ne: [l.ne[0], l.ne[1], 1, 1],
        ..*l
    };
    derive_mul_mat(&one_expert(a), &one_expert(b))?;
    need_dtype(ids, "expert ids (src2)", &[DType::I32])?;
    if a.ne[3] != 1 || b.ne[3] != 1 || ids.ne[2] != 1 || ids.ne[3] != 1 {
        return Err(format!(
            "experts {}, activations {} and ids {} must be at most 3-D, 3-D and 2-D",
            fmt_ne(&a.ne),
            fmt_ne(&b.ne),
            fmt_ne(&ids.ne)
        ));
    }
    if ids.ne[1] != b.ne[2] || (b.ne[1] != 1 && b.ne[1] != ids.ne[0]) {
        return Err(format!(
            "ids {} must be [n_used, {}] with activations {} of 1 or n_used rows per token",
            fmt_ne(&ids.ne),
            b.ne[2],
            fmt_ne(&b.ne)
        ));
    }
    Ok([a.ne[1], ids.ne[0], ids.ne[1], 1])
}

/// Where an operand's bytes start: its own root and offset, or itself at 0.
fn view_base((id, t): Operand<'_>) -> ViewOf {
    t.view.unwrap_or(ViewOf {
        root: id,
        offset: 0,
    })
}

fn need_float(l: &Layout, what: &str) -> Result<(), String> {
    if l.dtype.is_float() {
        Ok(())
    } else {
        Err(format!("{what} must be f32, f16 or bf16, not {}", l.dtype))
    }
}

fn need_dtype(l: &Layout, what: &str, allowed: &[DType]) -> Result<(), String> {
    if allowed.contains(&l.dtype) {
        return Ok(());
    }
    let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
    Err(format!(
        "{what} must be {}, not {}",
        names.join(" or "),
        l.dtype
    ))
}

fn need_writable(l: &Layout, what: &str) -> Result<(), String> {
    if l.dtype == DType::I32 {
        return Err(format!(
            "{what} must be a float or quantized tensor, not i32"
        ));
    }
    if l.dtype.is_quantized() && !l.rows_packed() {
        return Err(format!("{what} is quantized and must have packed rows"));
    }
    Ok(())
}
