//! Tests: every route against `kernels::reference` (f64) on seeded inputs at
//! odd sizes, dst poisoned with NaN, on pools of 1, 2 and 3 threads.

mod float;
mod kquant;
mod panel;
mod quant;

use super::kquant::{Isa as KQuantIsa, KQuantMatMul};
use super::packed::RepackCache;
use super::panel::{PanelIsa, PanelMatMul};
use super::qdot::Isa;
use super::quantized::QuantMatMul;
use super::shape::Geometry;
use crate::device::cpu::{CpuKernel, RawTensor, ThreadPool};
use ir::{DType, Layout, Op};
use kernels::reference::{Dense, compute, gather, scatter};
use kernels::testing::{Rng, nmse, nmse_threshold};

/// Bytes aligned to 64 (as the runtime's arenas and scratch are).
struct Buf(Vec<[u64; 8]>);

impl Buf {
    fn new(bytes: usize) -> Buf {
        Buf(vec![[0; 8]; bytes.div_ceil(64).max(1)])
    }
    fn bytes(&mut self) -> &mut [u8] {
        let n = self.0.len() * 64;
        // SAFETY: the Vec owns n bytes; u8 has no alignment or validity needs.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr() as *mut u8, n) }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr() as *mut u8
    }
}

/// A test tensor: a packed root of `root_ne`, viewed through `axes`
/// (`Layout::permuted`), filled with values uniform in [lo, hi) rounded to dtype.
struct Tensor {
    buf: Buf,
    layout: Layout,
}

impl Tensor {
    fn new(
        rng: &mut Rng,
        dtype: DType,
        root_ne: [i64; 4],
        axes: [u8; 4],
        lo: f64,
        hi: f64,
    ) -> Tensor {
        let root = Layout::contiguous(dtype, root_ne).expect("valid root extents");
        let mut buf = Buf::new(root.span_bytes() as usize);
        let n: i64 = root_ne.iter().product();
        let values = Dense::new(root_ne, rng.vec(n as usize, lo, hi));
        scatter(&values, buf.bytes(), &root);
        let layout = root.permuted(axes).expect("a permutation");
        Tensor { buf, layout }
    }

    fn packed(rng: &mut Rng, dtype: DType, ne: [i64; 4]) -> Tensor {
        Tensor::new(rng, dtype, ne, [0, 1, 2, 3], -1.0, 1.0)
    }

    fn values(&mut self) -> Dense {
        let layout = self.layout;
        gather(self.buf.bytes(), &layout)
    }

    fn raw(&mut self) -> RawTensor {
        RawTensor {
            data: self.buf.ptr(),
            dtype: self.layout.dtype,
            ne: self.layout.ne,
            nb: self.layout.nb,
        }
    }
}

/// Which kernel to test.
#[derive(Clone, Copy, Debug)]
enum Route {
    /// Whatever `prepare_mul_mat` picks.
    Default,
    /// The integer kernel with this instruction set; `true`: src0 prepared
    /// as a weight (repacked where the set does that: AVX2).
    Quant(Isa, bool),
    /// The K-quant kernel with this instruction set ([`super::kquant`]),
    /// src0 repacked (but for the scalar set, which reads it in place).
    KQuant(KQuantIsa),
    /// src0 packed in panels for this set ([`super::panel`]); besides the
    /// reference, each element must equal, to the bit, one `f32::mul_add`
    /// chain over K in order.
    Panels(PanelIsa),
}

/// dst as the panel kernels must compute it: per element, `acc =
/// a.mul_add(b, acc)` over kk in order from +0, on the f32 values.
fn fma_chains(a: &Dense, b: &Dense, out: &Layout) -> Vec<f32> {
    let [m, n, ne12, ne13] = out.ne.map(|e| e as usize);
    let (k, ne02, ne03) = (a.ne[0] as usize, a.ne[2] as usize, a.ne[3] as usize);
    let at = |d: &Dense, i: [usize; 4]| {
        let ne = d.ne.map(|e| e as usize);
        d.data[i[0] + ne[0] * (i[1] + ne[1] * (i[2] + ne[2] * i[3]))] as f32
    };
    let mut v = Vec::with_capacity(m * n * ne12 * ne13);
    for b3 in 0..ne13 {
        for b2 in 0..ne12 {
            for j in 0..n {
                for i in 0..m {
                    let ia = [0, i, b2 / (ne12 / ne02), b3 / (ne13 / ne03)];
                    let mut acc = 0f32;
                    for kk in 0..k {
                        let x = at(a, [kk, ia[1], ia[2], ia[3]]);
                        acc = x.mul_add(at(b, [kk, j, b2, b3]), acc);
                    }
                    v.push(acc);
                }
            }
        }
    }
    v
}

/// Runs mul_mat(a, b) through `route` on pools of 1, 2 and 3 threads and
/// compares each result with the reference.
fn check(a: &mut Tensor, b: &mut Tensor, route: Route) {
    let (va, vb) = (a.values(), b.values());
    let ne = [
        a.layout.ne[1],
        b.layout.ne[1],
        b.layout.ne[2],
        b.layout.ne[3],
    ];
    let out = Layout::contiguous(DType::F32, ne).unwrap();
    let want = compute(&Op::MulMat, &[&va, &vb], &out);
    let repack = RepackCache::new();
    for nth in 1..=3 {
        let mut dst = Buf::new(out.span_bytes() as usize);
        for w in dst.bytes().chunks_exact_mut(4) {
            w.copy_from_slice(&f32::NAN.to_le_bytes());
        }
        let raw_dst = RawTensor {
            data: dst.ptr(),
            dtype: DType::F32,
            ne,
            nb: out.nb,
        };
        let kernel: Box<dyn CpuKernel> = match route {
            Route::Default => super::prepare_mul_mat(raw_dst, a.raw(), b.raw()).unwrap(),
            // SAFETY: a's bytes do not change while the kernel lives.
            Route::Quant(isa, weight) => Box::new(unsafe {
                QuantMatMul::with_isa(
                    Geometry::new(raw_dst, a.raw(), b.raw()).unwrap(),
                    isa,
                    weight.then_some(&repack),
                )
            }),
            // SAFETY: a's bytes do not change while the kernel lives.
            Route::KQuant(isa) => Box::new(
                unsafe {
                    KQuantMatMul::with_isa(
                        Geometry::new(raw_dst, a.raw(), b.raw()).unwrap(),
                        isa,
                        Some(&repack),
                    )
                }
                .unwrap()
                .expect("a repacked copy of a contiguous src0"),
            ),
            Route::Panels(isa) => {
                let geo = Geometry::new(raw_dst, a.raw(), b.raw()).unwrap();
                // SAFETY: a's bytes do not change while the kernel lives.
                let panels = unsafe { super::panel::pack(&a.raw(), isa) }.unwrap();
                Box::new(PanelMatMul::new(geo, panels))
            }
        };
        if let Route::Quant(Isa::Avx2, true) = route {
            assert!(
                kernel.describe().contains("repacked"),
                "{}",
                kernel.describe()
            );
        }
        let mut scratch = Buf::new(kernel.scratch_bytes());
        let scratch_ptr = scratch.ptr() as usize;
        let pool = ThreadPool::new(nth);
        // SAFETY: the tensors and scratch outlive the run; every thread calls run once.
        pool.run(&|ctx| unsafe { kernel.run(ctx, scratch_ptr as *mut u8) });
        let got = gather(dst.bytes(), &out);
        if let Route::Panels(_) = route {
            let chains = fma_chains(&va, &vb, &out);
            for (e, (&g, &c)) in got.data.iter().zip(&chains).enumerate() {
                assert_eq!(
                    (g as f32).to_bits(),
                    c.to_bits(),
                    "{}: element {e} is {g}, the FMA chain gives {c} ({nth} threads, src0 {:?} src1 {:?})",
                    kernel.describe(),
                    a.layout,
                    b.layout
                );
            }
        }
        let err = nmse(&want.data, &got.data);
        assert!(
            err < nmse_threshold("mul_mat"),
            "{}: nmse {err:e} with {nth} threads, src0 {:?} src1 {:?}",
            kernel.describe(),
            a.layout,
            b.layout
        );
    }
}
