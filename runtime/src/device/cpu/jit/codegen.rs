//! The IR builder shared by every kernel: the entry point, argument loads,
//! counted loops, and per-[`Access`] vector loads and stores.
//!
//! Invariants of generated code:
//! - every kernel is `void k(i64* args, i64 row0, i64 row1, i64 col0, i64 col1)`
//!   and handles output rows `row0..row1`, elements `col0..col1` of each
//!   (`col` ranges other than the whole row only for bodies without norms);
//! - values are computed in f32 as `<w x float>`: `w` = the host's full vector
//!   width in the main loop, 1 in the scalar tail (and the streaming prologue),
//!   so one emitter serves both and they compute the same thing;
//! - F16 tensors are converted on load (`fpext`) and on store (`fptrunc`).

use super::spec::{Access, SLOTS, TensorSpec, elem_bytes};
use crate::RuntimeError;
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::types::{BasicType, BasicTypeEnum, FloatType, IntType, VectorType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, BasicValueEnum, FloatValue, FunctionValue, IntValue,
    PointerValue, VectorValue,
};
use inkwell::{FloatPredicate, IntPredicate};
use ir::DType;

/// A JIT error: what failed, and LLVM's or our detail.
pub(super) fn jit_err(what: &str, detail: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Jit(format!("{what}: {detail}"))
}

/// The host CPU kernels are generated for (set on every function).
pub(super) struct HostCpu {
    /// Host CPU name (`znver4`), set as `target-cpu`.
    pub cpu: String,
    /// Host features (`+avx2,+fma,...`), set as `target-features`.
    pub features: String,
    /// f32 lanes of the widest vector the host runs natively (16, 8 or 4).
    pub width: u32,
}

/// Shorthand for results of IR building.
pub(super) type R<T> = Result<T, RuntimeError>;

/// Builds one kernel function `k` in a module.
pub(super) struct Gen<'m, 'ctx> {
    /// The context.
    pub cx: &'ctx Context,
    /// The module being built.
    pub module: &'m Module<'ctx>,
    /// The IR builder.
    pub b: Builder<'ctx>,
    /// The kernel function.
    pub func: FunctionValue<'ctx>,
    /// Full vector width in f32 lanes.
    pub width: u32,
    /// i64.
    pub i64t: IntType<'ctx>,
    /// i32.
    pub i32t: IntType<'ctx>,
    /// float.
    pub f32t: FloatType<'ctx>,
    /// half.
    pub f16t: FloatType<'ctx>,
}

/// A tensor's argument-block entries, loaded at function entry.
#[derive(Clone, Copy)]
pub(super) struct TensorArgs<'ctx> {
    /// First element.
    pub ptr: PointerValue<'ctx>,
    /// Extents.
    pub ne: [IntValue<'ctx>; 4],
    /// Byte strides.
    pub nb: [IntValue<'ctx>; 4],
}

/// One tensor's current row, ready for loads or stores at an element index.
#[derive(Clone, Copy)]
pub(super) struct Row<'ctx> {
    /// Dtype and access class.
    pub spec: TensorSpec,
    /// First element of the row.
    pub base: PointerValue<'ctx>,
    /// Element stride in bytes.
    pub nb0: IntValue<'ctx>,
    /// Row length (for `Repeat`).
    pub ne0: IntValue<'ctx>,
    /// The row's single value (for `Bcast`), loaded once per row.
    pub scalar: Option<FloatValue<'ctx>>,
}

impl<'m, 'ctx> Gen<'m, 'ctx> {
    /// Declares `k` with the host's target-cpu and target-features.
    pub fn new(cx: &'ctx Context, module: &'m Module<'ctx>, llvm: &HostCpu) -> R<Gen<'m, 'ctx>> {
        let i64t = cx.i64_type();
        let ptrt = cx.ptr_type(Default::default());
        let fn_type = cx.void_type().fn_type(
            &[
                ptrt.into(),
                i64t.into(),
                i64t.into(),
                i64t.into(),
                i64t.into(),
            ],
            false,
        );
        let func = module.add_function("k", fn_type, None);
        let mut attrs = vec![
            ("target-cpu", llvm.cpu.clone()),
            ("target-features", llvm.features.clone()),
        ];
        if llvm.width >= 16 {
            // Without these, tuning for some CPUs splits 512-bit vectors in two.
            attrs.push(("prefer-vector-width", "512".into()));
            attrs.push(("min-legal-vector-width", "512".into()));
        }
        for (key, value) in attrs {
            func.add_attribute(
                AttributeLoc::Function,
                cx.create_string_attribute(key, &value),
            );
        }
        let nounwind = inkwell::attributes::Attribute::get_named_enum_kind_id("nounwind");
        func.add_attribute(
            AttributeLoc::Function,
            cx.create_enum_attribute(nounwind, 0),
        );
        let b = cx.create_builder();
        b.position_at_end(cx.append_basic_block(func, "entry"));
        Ok(Gen {
            cx,
            module,
            b,
            func,
            width: llvm.width,
            i64t,
            i32t: cx.i32_type(),
            f32t: cx.f32_type(),
            f16t: cx.f16_type(),
        })
    }

    /// Parameter `n` of `k` as an integer (1..=4: row0, row1, col0, col1).
    pub fn param(&self, n: u32) -> IntValue<'ctx> {
        self.func
            .get_nth_param(n)
            .expect("k has five parameters")
            .into_int_value()
    }

    /// An i64 constant.
    pub fn ci(&self, v: u64) -> IntValue<'ctx> {
        self.i64t.const_int(v, false)
    }

    /// `<w x float>`.
    pub fn vt(&self, w: u32) -> VectorType<'ctx> {
        self.f32t.vec_type(w)
    }

    /// A constant `<w x float>` splat.
    pub fn cf(&self, v: f32, w: u32) -> VectorValue<'ctx> {
        let lane = self.f32t.const_float(f64::from(v));
        VectorType::const_vector(&vec![lane; w as usize])
    }

    /// A constant `<w x i32>` splat.
    pub fn ci32(&self, v: i32, w: u32) -> VectorValue<'ctx> {
        let lane = self.i32t.const_int(v as u64, true);
        VectorType::const_vector(&vec![lane; w as usize])
    }

    /// `x` in every lane of a `<w x float>`.
    pub fn splat(&self, x: FloatValue<'ctx>, w: u32) -> R<VectorValue<'ctx>> {
        let v = self.vt(w).get_poison();
        let v = self
            .b
            .build_insert_element(v, x, self.i32t.const_zero(), "")?;
        let mask = self.i32t.vec_type(w).const_zero();
        Ok(self
            .b
            .build_shuffle_vector(v, self.vt(w).get_poison(), mask, "")?)
    }

    /// Lane 0 of a vector as a scalar float.
    pub fn lane0(&self, v: VectorValue<'ctx>) -> R<FloatValue<'ctx>> {
        Ok(self
            .b
            .build_extract_element(v, self.i32t.const_zero(), "")?
            .into_float_value())
    }

    /// Calls intrinsic `name` overloaded on `types`.
    pub fn intrinsic(
        &self,
        name: &str,
        types: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> R<BasicValueEnum<'ctx>> {
        let decl = Intrinsic::find(name)
            .and_then(|i| i.get_declaration(self.module, types))
            .ok_or_else(|| jit_err("intrinsic", format!("{name} is unknown")))?;
        match self.b.build_call(decl, args, "")?.try_as_basic_value() {
            inkwell::values::ValueKind::Basic(v) => Ok(v),
            inkwell::values::ValueKind::Instruction(_) => {
                Err(jit_err("intrinsic", format!("{name} returns nothing")))
            }
        }
    }

    /// A vector intrinsic of one type (`llvm.fma`, `llvm.sqrt`, ...).
    pub fn vcall(&self, name: &str, args: &[VectorValue<'ctx>]) -> R<VectorValue<'ctx>> {
        let ty = args[0].get_type().as_basic_type_enum();
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        Ok(self.intrinsic(name, &[ty], &args)?.into_vector_value())
    }

    /// a + b.
    pub fn add(&self, a: VectorValue<'ctx>, b: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_float_add(a, b, "")?)
    }
    /// a - b.
    pub fn sub(&self, a: VectorValue<'ctx>, b: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_float_sub(a, b, "")?)
    }
    /// a * b.
    pub fn mul(&self, a: VectorValue<'ctx>, b: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_float_mul(a, b, "")?)
    }
    /// a / b.
    pub fn div(&self, a: VectorValue<'ctx>, b: VectorValue<'ctx>) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_float_div(a, b, "")?)
    }
    /// a * b + c, rounded once.
    pub fn fma(
        &self,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
        c: VectorValue<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        self.vcall("llvm.fma", &[a, b, c])
    }
    /// Lanewise `a pred b`.
    pub fn cmp(
        &self,
        pred: FloatPredicate,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_float_compare(pred, a, b, "")?)
    }
    /// Lanewise `cond ? a : b`.
    pub fn select(
        &self,
        cond: VectorValue<'ctx>,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
    ) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_select(cond, a, b, "")?.into_vector_value())
    }
    /// Reinterprets a vector's bits as another vector type.
    pub fn bitcast(&self, v: VectorValue<'ctx>, to: VectorType<'ctx>) -> R<VectorValue<'ctx>> {
        Ok(self.b.build_bit_cast(v, to, "")?.into_vector_value())
    }

    /// Byte address `base + off`.
    pub fn gep(&self, base: PointerValue<'ctx>, off: IntValue<'ctx>) -> R<PointerValue<'ctx>> {
        // SAFETY: builds IR only; the generated code stays inside tensors by
        // the argument block's extents and strides.
        Ok(unsafe {
            self.b
                .build_in_bounds_gep(self.cx.i8_type(), base, &[off], "")?
        })
    }

    /// Argument-block slot `i` (an i64).
    pub fn arg(&self, i: usize) -> R<IntValue<'ctx>> {
        let args = self
            .func
            .get_nth_param(0)
            .expect("k has five parameters")
            .into_pointer_value();
        let at = self.gep(args, self.ci(8 * i as u64))?;
        Ok(self.b.build_load(self.i64t, at, "")?.into_int_value())
    }

    /// Argument-block slot `i` as a pointer.
    pub fn arg_ptr(&self, i: usize) -> R<PointerValue<'ctx>> {
        let v = self.arg(i)?;
        Ok(self
            .b
            .build_int_to_ptr(v, self.cx.ptr_type(Default::default()), "")?)
    }

    /// Tensor `t`'s pointer, extents and strides.
    pub fn tensor(&self, t: usize) -> R<TensorArgs<'ctx>> {
        let at = |k: usize| self.arg(t * SLOTS + k);
        Ok(TensorArgs {
            ptr: self.arg_ptr(t * SLOTS)?,
            ne: [at(1)?, at(2)?, at(3)?, at(4)?],
            nb: [at(5)?, at(6)?, at(7)?, at(8)?],
        })
    }

    /// The coordinates (i1, i2, i3) of flat row `r` of a tensor of extents `ne`.
    pub fn row_coords(
        &self,
        r: IntValue<'ctx>,
        ne: &[IntValue<'ctx>; 4],
    ) -> R<[IntValue<'ctx>; 3]> {
        let b = &self.b;
        let i1 = b.build_int_unsigned_rem(r, ne[1], "i1")?;
        let q = b.build_int_unsigned_div(r, ne[1], "")?;
        let i2 = b.build_int_unsigned_rem(q, ne[2], "i2")?;
        let i3 = b.build_int_unsigned_div(q, ne[2], "i3")?;
        Ok([i1, i2, i3])
    }

    /// Row (i1 % ne1, i2 % ne2, i3 % ne3) of `t` (ggml's repeat broadcast).
    pub fn row(
        &self,
        spec: TensorSpec,
        t: &TensorArgs<'ctx>,
        at: [IntValue<'ctx>; 3],
    ) -> R<Row<'ctx>> {
        let mut off = self.ci(0);
        for (d, &i) in at.iter().enumerate() {
            let i = self.b.build_int_unsigned_rem(i, t.ne[d + 1], "")?;
            let o = self.b.build_int_mul(i, t.nb[d + 1], "")?;
            off = self.b.build_int_add(off, o, "")?;
        }
        let mut row = Row {
            spec,
            base: self.gep(t.ptr, off)?,
            nb0: t.nb[0],
            ne0: t.ne[0],
            scalar: None,
        };
        if spec.access == Access::Bcast {
            let v = self.load_lane(&row, self.ci(0))?;
            row.scalar = Some(v);
        }
        Ok(row)
    }

    fn elem_type(&self, dtype: DType) -> FloatType<'ctx> {
        match dtype {
            DType::F16 => self.f16t,
            _ => self.f32t,
        }
    }

    /// Element `idx` of a row (any access class but `Repeat` semantics aside:
    /// `idx` is the element's own index), as f32.
    fn load_lane(&self, row: &Row<'ctx>, idx: IntValue<'ctx>) -> R<FloatValue<'ctx>> {
        let off = self.b.build_int_mul(idx, row.nb0, "")?;
        let ptr = self.gep(row.base, off)?;
        let ty = self.elem_type(row.spec.dtype);
        let v = self.b.build_load(ty, ptr, "")?;
        v.as_instruction_value()
            .map(|i| i.set_alignment(elem_bytes(row.spec.dtype) as u32))
            .transpose()
            .map_err(|e| jit_err("alignment", e))?;
        let v = v.into_float_value();
        Ok(if ty == self.f32t {
            v
        } else {
            self.b.build_float_ext(v, self.f32t, "")?
        })
    }

    /// A read prefetch of `row`'s element `i` plus `ahead` bytes into all
    /// cache levels (past the row's end it is harmless: prefetches never fault).
    pub fn prefetch(&self, row: &Row<'ctx>, i: IntValue<'ctx>, ahead: u64) -> R<()> {
        let es = elem_bytes(row.spec.dtype) as u64;
        let off = self.b.build_int_mul(i, self.ci(es), "")?;
        let off = self.b.build_int_add(off, self.ci(ahead), "")?;
        // Not `inbounds`: the address may lie past the tensor.
        // SAFETY: builds IR only; a prefetch never dereferences.
        let ptr = unsafe { self.b.build_gep(self.cx.i8_type(), row.base, &[off], "")? };
        let decl = Intrinsic::find("llvm.prefetch")
            .and_then(|f| f.get_declaration(self.module, &[ptr.get_type().into()]))
            .ok_or_else(|| jit_err("intrinsic", "llvm.prefetch is unknown"))?;
        let i32c = |v: u64| self.i32t.const_int(v, false).into();
        self.b
            .build_call(decl, &[ptr.into(), i32c(0), i32c(3), i32c(1)], "")?;
        Ok(())
    }

    /// Output-row elements `i .. i + w` of `row` as `<w x float>`.
    pub fn load(&self, row: &Row<'ctx>, i: IntValue<'ctx>, w: u32) -> R<VectorValue<'ctx>> {
        let es = elem_bytes(row.spec.dtype) as u64;
        match row.spec.access {
            Access::Bcast => self.splat(row.scalar.expect("loaded per row"), w),
            Access::Contig => {
                let ptr = self.gep(row.base, self.b.build_int_mul(i, self.ci(es), "")?)?;
                let ty = self.elem_type(row.spec.dtype).vec_type(w);
                let v = self.b.build_load(ty, ptr, "")?;
                if let Some(inst) = v.as_instruction_value() {
                    inst.set_alignment(es as u32)
                        .map_err(|e| jit_err("alignment", e))?;
                }
                let v = v.into_vector_value();
                Ok(if row.spec.dtype == DType::F32 {
                    v
                } else {
                    self.b.build_float_ext(v, self.vt(w), "")?
                })
            }
            Access::Strided | Access::Repeat => {
                let mut v = self.vt(w).get_poison();
                for j in 0..w {
                    let mut idx = self.b.build_int_add(i, self.ci(u64::from(j)), "")?;
                    if row.spec.access == Access::Repeat {
                        idx = self.b.build_int_unsigned_rem(idx, row.ne0, "")?;
                    }
                    let x = self.load_lane(row, idx)?;
                    let lane = self.i32t.const_int(u64::from(j), false);
                    v = self.b.build_insert_element(v, x, lane, "")?;
                }
                Ok(v)
            }
        }
    }

    /// Stores `v` (`<w x float>`) at output-row elements `i .. i + w`; with
    /// `stream`, as an aligned non-temporal store (the caller aligned `i`).
    pub fn store(
        &self,
        row: &Row<'ctx>,
        i: IntValue<'ctx>,
        v: VectorValue<'ctx>,
        stream: bool,
    ) -> R<()> {
        let es = elem_bytes(row.spec.dtype) as u64;
        let w = v.get_type().get_size();
        let ty = self.elem_type(row.spec.dtype);
        let v = if ty == self.f32t {
            v
        } else {
            self.b.build_float_trunc(v, ty.vec_type(w), "")?
        };
        match row.spec.access {
            Access::Contig => {
                let ptr = self.gep(row.base, self.b.build_int_mul(i, self.ci(es), "")?)?;
                let inst = self.b.build_store(ptr, v)?;
                if stream && w > 1 {
                    inst.set_alignment((es * u64::from(w)) as u32)
                        .map_err(|e| jit_err("alignment", e))?;
                    let kind = self.cx.get_kind_id("nontemporal");
                    let one = self.i32t.const_int(1, false);
                    let node = self.cx.metadata_node(&[one.into()]);
                    inst.set_metadata(node, kind)
                        .map_err(|e| jit_err("metadata", e))?;
                } else {
                    inst.set_alignment(es as u32)
                        .map_err(|e| jit_err("alignment", e))?;
                }
            }
            Access::Strided | Access::Repeat | Access::Bcast => {
                for j in 0..w {
                    let lane = self.i32t.const_int(u64::from(j), false);
                    let x = self.b.build_extract_element(v, lane, "")?;
                    let idx = self.b.build_int_add(i, self.ci(u64::from(j)), "")?;
                    let off = self.b.build_int_mul(idx, row.nb0, "")?;
                    let inst = self.b.build_store(self.gep(row.base, off)?, x)?;
                    inst.set_alignment(es as u32)
                        .map_err(|e| jit_err("alignment", e))?;
                }
            }
        }
        Ok(())
    }

    /// Emits `for (i = start; i + step <= end; i += step) carried = body(i, carried)`
    /// and returns the final `i` and carried values (valid after the loop).
    pub fn emit_loop(
        &self,
        start: IntValue<'ctx>,
        end: IntValue<'ctx>,
        step: u64,
        init: &[BasicValueEnum<'ctx>],
        mut body: impl FnMut(IntValue<'ctx>, &[BasicValueEnum<'ctx>]) -> R<Vec<BasicValueEnum<'ctx>>>,
    ) -> R<(IntValue<'ctx>, Vec<BasicValueEnum<'ctx>>)> {
        let pre = self.b.get_insert_block().expect("positioned");
        let head = self.cx.append_basic_block(self.func, "loop");
        let body_bb = self.cx.append_basic_block(self.func, "body");
        let exit = self.cx.append_basic_block(self.func, "done");
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(head);
        let i = self.b.build_phi(self.i64t, "i")?;
        i.add_incoming(&[(&start, pre)]);
        let mut carried = Vec::with_capacity(init.len());
        for v in init {
            let phi = self.b.build_phi(v.get_type(), "")?;
            phi.add_incoming(&[(v, pre)]);
            carried.push(phi);
        }
        let iv = i.as_basic_value().into_int_value();
        let next = self.b.build_int_add(iv, self.ci(step), "")?;
        let go = self.b.build_int_compare(IntPredicate::SLE, next, end, "")?;
        self.b.build_conditional_branch(go, body_bb, exit)?;
        self.b.position_at_end(body_bb);
        let values: Vec<BasicValueEnum> = carried.iter().map(|p| p.as_basic_value()).collect();
        let new = body(iv, &values)?;
        let latch = self.b.get_insert_block().expect("positioned");
        self.b.build_unconditional_branch(head)?;
        i.add_incoming(&[(&next, latch)]);
        for (phi, v) in carried.iter().zip(&new) {
            phi.add_incoming(&[(v, latch)]);
        }
        self.b.position_at_end(exit);
        Ok((iv, values))
    }

    /// The sum of `map(x)` over elements `0..n0` of `row`: full vectors,
    /// then a scalar tail.
    pub fn row_sum(
        &self,
        row: &Row<'ctx>,
        n0: IntValue<'ctx>,
        map: impl Fn(VectorValue<'ctx>) -> R<VectorValue<'ctx>>,
    ) -> R<FloatValue<'ctx>> {
        let w = self.width;
        let init = self.cf(0.0, w).as_basic_value_enum();
        let (i, acc) = self.emit_loop(self.ci(0), n0, u64::from(w), &[init], |i, acc| {
            let x = map(self.load(row, i, w)?)?;
            Ok(vec![self.add(acc[0].into_vector_value(), x)?.into()])
        })?;
        let total = self.intrinsic(
            "llvm.vector.reduce.fadd",
            &[self.vt(w).into()],
            &[self.f32t.const_float(-0.0).into(), acc[0].into()],
        )?;
        let total = self.splat(total.into_float_value(), 1)?;
        let (_, acc) = self.emit_loop(i, n0, 1, &[total.into()], |i, acc| {
            let x = map(self.load(row, i, 1)?)?;
            Ok(vec![self.add(acc[0].into_vector_value(), x)?.into()])
        })?;
        self.lane0(acc[0].into_vector_value())
    }

    /// The row length as a float.
    pub fn len_f32(&self, n: IntValue<'ctx>) -> R<FloatValue<'ctx>> {
        Ok(self.b.build_signed_int_to_float(n, self.f32t, "")?)
    }
}
