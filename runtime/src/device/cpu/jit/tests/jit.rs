//! The JIT itself: the kernel cache, full-width vectors in the generated code,
//! streaming stores in the assembly, and the LLVM context's lifetime.

use super::*;
use crate::device::cpu::jit::{Jit, JitOptions, StreamingStores};
use ir::plan::{BinaryFn, Expr, UnaryFn};
use std::sync::Arc;

fn silu_mul() -> Vec<Expr> {
    vec![
        Expr::Input(0),
        Expr::Input(1),
        Expr::Unary(UnaryFn::Silu, 0),
        Expr::Binary(BinaryFn::Mul, 2, 1),
    ]
}

fn rms_norm_mul() -> Vec<Expr> {
    vec![
        Expr::RmsNorm {
            input: 0,
            eps: 1e-6,
        },
        Expr::Input(1),
        Expr::Binary(BinaryFn::Mul, 0, 1),
    ]
}

#[test]
fn thirty_identical_layers_compile_once() {
    let jit = Jit::new().unwrap();
    let mut kernels = Vec::new();
    let mut bufs = Vec::new();
    for layer in 0..30 {
        // Different addresses and extents per layer: the same code.
        let ne = [64 + layer, 3 + layer, 1, 1];
        let mut x = Buf::new(DType::F32, ne, Kind::Packed);
        let mut w = Buf::new(DType::F32, [ne[0], 1, 1, 1], Kind::Packed);
        let mut out = Buf::new(DType::F32, ne, Kind::Packed);
        x.set(&Dense::from_fn(ne, |i| (i[0] + i[1]) as f64 * 0.01));
        w.set(&Dense::from_fn([ne[0], 1, 1, 1], |_| 2.0));
        let k = jit
            .prepare_fused(&rms_norm_mul(), out.raw(), &[x.raw(), w.raw()])
            .unwrap();
        kernels.push(k);
        bufs.push((x, w, out));
    }
    let stats = jit.stats();
    assert_eq!(stats.kernels_compiled, 1, "{stats:?}");
    assert_eq!(stats.cache_hits, 29, "{stats:?}");
    assert!(stats.compile_time > std::time::Duration::ZERO);
    for (k, (x, _, out)) in kernels.iter().zip(&bufs) {
        run(&**k, 2);
        let x = x.get();
        let got = out.get();
        for (xr, gr) in x.rows().zip(got.rows()) {
            let rms = (xr.iter().map(|v| v * v).sum::<f64>() / xr.len() as f64 + 1e-6).sqrt();
            for (a, b) in xr.iter().zip(gr) {
                assert!((2.0 * a / rms - b).abs() < 1e-5, "{a} {b}");
            }
        }
    }
    // Another dtype or layout class is another kernel.
    let (x, w, out) = &mut bufs[0];
    let mut h = Buf::new(DType::F16, out.layout.ne, Kind::Packed);
    jit.prepare_fused(&rms_norm_mul(), h.raw(), &[x.raw(), w.raw()])
        .unwrap();
    assert_eq!(jit.stats().kernels_compiled, 2);
}

#[test]
fn generated_code_uses_full_width_vectors() {
    let jit = Jit::with_options(JitOptions {
        streaming: StreamingStores::Always,
    })
    .unwrap();
    let ne = [4096, 4, 1, 1];
    let mut a = Buf::new(DType::F32, ne, Kind::Packed);
    let mut b = Buf::new(DType::F16, ne, Kind::Packed);
    let mut out = Buf::new(DType::F32, ne, Kind::Packed);
    let (ir, asm) = jit
        .inspect_fused(&silu_mul(), out.raw(), &[a.raw(), b.raw()])
        .unwrap();
    if std::env::var_os("GGPLAN_DUMP_ASM").is_some() {
        eprintln!("{asm}");
    }
    let w = jit.vector_width();
    let vector = format!("<{w} x float>");
    assert!(ir.contains(&vector), "no {vector} in\n{ir}");
    // No libm calls: exp is our polynomial.
    assert!(!ir.contains("@exp") && !ir.contains("@llvm.exp"), "{ir}");
    let reg = match w {
        16 => "zmm",
        8 => "ymm",
        _ => "xmm",
    };
    assert!(asm.contains(reg), "no {reg} registers in\n{asm}");
    assert!(
        asm.contains("vmovntps") || asm.contains("movntps"),
        "no streaming stores in\n{asm}"
    );
    if w == 8 {
        assert!(
            asm.contains("vcvtph2ps"),
            "F16 loads should use F16C:\n{asm}"
        );
        assert!(asm.contains("vfmadd"), "FMA expected:\n{asm}");
    }

    let (ir, asm) = jit
        .inspect_fused(&rms_norm_mul(), out.raw(), &[a.raw(), b.raw()])
        .unwrap();
    assert!(ir.contains(&vector), "no {vector} in the row kernel\n{ir}");
    assert!(asm.contains(reg));
}

#[test]
fn streaming_follows_the_documented_rule() {
    let jit = Jit::new().unwrap();
    let small = [1024, 4, 1, 1];
    let mut a = Buf::new(DType::F32, small, Kind::Packed);
    let mut out = Buf::new(DType::F32, small, Kind::Packed);
    let body = [Expr::Input(0), Expr::Unary(UnaryFn::Relu, 0)];
    let (_, asm) = jit.inspect_fused(&body, out.raw(), &[a.raw()]).unwrap();
    assert!(!asm.contains("movnt"), "a small output must not stream");
    // A tensor larger than the last-level cache streams (its bytes are never
    // touched: inspect only reads the layout).
    let n = (crate::device::cpu::jit::streaming_threshold_bytes() / 4 + 1) as i64;
    let big = RawTensor {
        data: std::ptr::null_mut::<u8>().wrapping_add(64),
        dtype: DType::F32,
        ne: [n, 1, 1, 1],
        nb: [4, 4 * n as u64, 4 * n as u64, 4 * n as u64],
    };
    let (_, asm) = jit.inspect_fused(&body, big, &[big]).unwrap();
    assert!(asm.contains("movnt"), "a large output streams");
}

#[test]
fn dropping_the_jit_and_its_kernels_frees_the_context() {
    let ne = [33, 3, 1, 1];
    let mut a = Buf::new(DType::F32, ne, Kind::Packed);
    let mut out = Buf::new(DType::F32, ne, Kind::Packed);
    a.set(&Dense::from_fn(ne, |i| i[0] as f64 - 5.0));
    let body = [Expr::Input(0), Expr::Unary(UnaryFn::Relu, 0)];
    let jit = Jit::new().unwrap();
    let context = Arc::downgrade(&jit.llvm);
    let kernel = jit.prepare_fused(&body, out.raw(), &[a.raw()]).unwrap();
    drop(jit);
    // The kernel keeps the context (and its code) alive and still runs.
    assert!(context.upgrade().is_some());
    run(&*kernel, 1);
    assert_eq!(out.get().get([7, 1, 0, 0]), 2.0);
    drop(kernel);
    assert!(context.upgrade().is_none(), "the LLVM context leaked");

    // Many JITs in a row: each frees its context.
    for _ in 0..5 {
        let jit = Jit::new().unwrap();
        let weak = Arc::downgrade(&jit.llvm);
        drop(jit.prepare_fused(&body, out.raw(), &[a.raw()]).unwrap());
        drop(jit);
        assert!(weak.upgrade().is_none());
    }
}

#[test]
fn a_jit_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Jit>();
    // Kernels prepared on several threads at once share one cache.
    let jit = Jit::new().unwrap();
    let body = [Expr::Input(0), Expr::Unary(UnaryFn::Tanh, 0)];
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let mut a = Buf::new(DType::F32, [8, 2, 1, 1], Kind::Packed);
                let mut o = Buf::new(DType::F32, [8, 2, 1, 1], Kind::Packed);
                jit.prepare_fused(&body, o.raw(), &[a.raw()]).unwrap();
            });
        }
    });
    let stats = jit.stats();
    assert_eq!((stats.kernels_compiled, stats.cache_hits), (1, 2));
}

/// The sigmoid's table lookup is one permute per vector on AVX-512 too
/// (`llvm.x86.avx512.permvar.sf.512`, the 8-entry table twice over). This
/// host may lack AVX-512, so the code is generated and inspected, not run.
#[test]
fn sigmoid_table_is_one_permute_on_avx512() {
    let features = "+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx2,+fma,+f16c,+avx,+sse4.2";
    let jit = Jit::for_target("skylake-avx512", features, 16).unwrap();
    let ne = [4096, 4, 1, 1];
    let mut a = Buf::new(DType::F32, ne, Kind::Packed);
    let mut b = Buf::new(DType::F32, ne, Kind::Packed);
    let mut out = Buf::new(DType::F32, ne, Kind::Packed);
    let (ir, asm) = jit
        .inspect_fused(&silu_mul(), out.raw(), &[a.raw(), b.raw()])
        .unwrap();
    assert!(ir.contains("<16 x float>"), "{ir}");
    let permutes = asm
        .lines()
        .filter(|l| l.contains("vperm") && l.contains("zmm"))
        .count();
    assert!(permutes >= 1, "no 512-bit permute in\n{asm}");
    assert!(asm.contains("vdivps") && asm.contains("zmm"), "{asm}");
}
