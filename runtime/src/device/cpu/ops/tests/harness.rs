//! Test support: tensors in owned memory (contiguous, permuted, strided views),
//! and [`check`], which runs a prepared kernel on pools of 1, 2 and 3 threads
//! over a poisoned destination and compares it with `kernels::reference`.

use crate::device::cpu::ops::prepare_op;
use crate::device::cpu::{RawTensor, ThreadPool};
use ir::{DType, Layout, Op};
use kernels::reference::{Dense, compute, gather, scatter};
use kernels::testing::{Rng, nmse, nmse_threshold};
use std::sync::OnceLock;

/// A tensor over owned memory: `layout` seen from byte `off` of `mem`.
#[derive(Clone)]
pub struct T {
    mem: Vec<u64>,
    off: usize,
    /// The tensor's layout.
    pub layout: Layout,
}

impl T {
    fn new(bytes: usize, off: usize, layout: Layout) -> T {
        T {
            mem: vec![0; bytes.div_ceil(8) + 1],
            off,
            layout,
        }
    }

    /// All of the memory, as bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a u64 buffer seen as its bytes.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().cast::<u8>(), self.mem.len() * 8) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe {
            std::slice::from_raw_parts_mut(self.mem.as_mut_ptr().cast::<u8>(), self.mem.len() * 8)
        }
    }

    /// The tensor's values.
    pub fn values(&self) -> Dense {
        gather(&self.bytes()[self.off..], &self.layout)
    }

    /// Writes `values` through the layout.
    pub fn set(&mut self, values: &Dense) {
        let (off, layout) = (self.off, self.layout);
        scatter(values, &mut self.bytes_mut()[off..], &layout);
    }

    /// The kernel's view of it.
    pub fn raw(&mut self) -> RawTensor {
        let layout = self.layout;
        RawTensor {
            // SAFETY: `off` is inside the buffer.
            data: unsafe { self.mem.as_mut_ptr().cast::<u8>().add(self.off) },
            dtype: layout.dtype,
            ne: layout.ne,
            nb: layout.nb,
        }
    }
}

/// Uniform values in [lo, hi) for `ne`.
pub fn random(rng: &mut Rng, ne: [i64; 4], lo: f64, hi: f64) -> Dense {
    let n = ne.iter().product::<i64>() as usize;
    Dense::new(ne, rng.vec(n, lo, hi))
}

/// A contiguous tensor holding `values`.
pub fn dense(dtype: DType, values: &Dense) -> T {
    let layout = Layout::contiguous(dtype, values.ne).expect("valid extents");
    let mut t = T::new(layout.span_bytes() as usize, 0, layout);
    t.set(values);
    t
}

/// A contiguous tensor of uniform values in [-1, 1).
pub fn filled(rng: &mut Rng, dtype: DType, ne: [i64; 4]) -> T {
    dense(dtype, &random(rng, ne, -1.0, 1.0))
}

/// A permuted view with extents `ne` (ggml_permute with `axes` of a packed
/// tensor), filled with uniform values in [lo, hi).
pub fn permuted(rng: &mut Rng, dtype: DType, ne: [i64; 4], axes: [u8; 4], lo: f64, hi: f64) -> T {
    let base_ne = [0, 1, 2, 3].map(|i| ne[axes[i] as usize]);
    let base = Layout::contiguous(dtype, base_ne).expect("valid extents");
    let layout = base.permuted(axes).expect("a permutation");
    assert_eq!(layout.ne, ne);
    let mut t = T::new(base.span_bytes() as usize, 0, layout);
    t.set(&random(rng, ne, lo, hi));
    t
}

/// A view with extents `ne` inside a packed tensor of extents `base_ne`
/// (each at least `ne`), starting at element `start` of the base's rows: its
/// rows are strided. The rest of the base holds `fill` values.
pub fn view_in(rng: &mut Rng, dtype: DType, ne: [i64; 4], base_ne: [i64; 4], start: [i64; 4]) -> T {
    let base = Layout::contiguous(dtype, base_ne).expect("valid extents");
    let mut whole = T::new(base.span_bytes() as usize, 0, base);
    whole.set(&random(rng, base_ne, -1.0, 1.0));
    let off = base.offset_of(start) as usize;
    T {
        mem: whole.mem,
        off,
        layout: Layout {
            dtype,
            ne,
            nb: base.nb,
        },
    }
}

/// I32 indices below `below`.
pub fn indices(rng: &mut Rng, ne: [i64; 4], below: usize) -> T {
    let n = ne.iter().product::<i64>() as usize;
    let v = (0..n).map(|_| rng.below(below) as f64).collect();
    dense(DType::I32, &Dense::new(ne, v))
}

/// A packed tensor whose every byte is poison: NaN for floats (also the f16
/// scales of quantized blocks), i32::MIN for I32.
pub fn poisoned(dtype: DType, ne: [i64; 4]) -> T {
    let layout = Layout::contiguous(dtype, ne).expect("valid extents");
    let mut t = T::new(layout.span_bytes() as usize, 0, layout);
    let pattern: &[u8] = match dtype {
        DType::F32 => &f32::NAN.to_le_bytes(),
        DType::F16 => &[0x00, 0x7E],
        DType::BF16 => &[0xC0, 0x7F],
        DType::I32 => &i32::MIN.to_le_bytes(),
        _ => &[0xFF],
    };
    for (i, b) in t.bytes_mut().iter_mut().enumerate() {
        *b = pattern[i % pattern.len()];
    }
    t
}

/// Where the kernel writes.
pub enum Dst {
    /// Its own (poisoned) tensor.
    Own(T),
    /// Through source `i` (cpy, set_rows, and in-place steps).
    Into(usize),
}

/// How the result is compared with the reference.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Expect {
    /// Every byte of the destination's memory equals the reference scattered
    /// into the original memory (data movement and exact conversions).
    Bytes,
    /// The values equal the reference's exactly (before rounding to dst).
    Values,
    /// NMSE against the reference rounded to the destination dtype.
    Nmse,
}

/// Pools of 1, 2 and 3 threads, made once and shared by every test.
pub fn pools() -> &'static [ThreadPool] {
    static POOLS: OnceLock<Vec<ThreadPool>> = OnceLock::new();
    POOLS.get_or_init(|| (1..=3).map(ThreadPool::new).collect())
}

/// Runs `op` over `srcs` into `dst` on 1, 2 and 3 threads and compares each
/// result with the reference, panicking with `what` on a mismatch.
pub fn check(what: &str, op: Op, mut srcs: Vec<T>, dst: Dst, expect: Expect) {
    let refs: Vec<Dense> = srcs.iter().map(T::values).collect();
    let ref_refs: Vec<&Dense> = refs.iter().collect();
    let (mut out, into) = match dst {
        Dst::Own(t) => (t, None),
        Dst::Into(i) => (srcs[i].clone(), Some(i)),
    };
    let want = compute(&op, &ref_refs, &out.layout);
    let original = out.clone();
    let mut expected = out.clone();
    expected.set(&want);
    let rounded = expected.values();
    for pool in pools() {
        let nth = pool.n_threads();
        let mut raws: Vec<RawTensor> = srcs.iter_mut().map(T::raw).collect();
        let dst_raw = match into {
            Some(i) => {
                srcs[i] = original.clone();
                raws[i] = srcs[i].raw();
                raws[i]
            }
            None => {
                out = original.clone();
                out.raw()
            }
        };
        let kernel = prepare_op(&op, dst_raw, &raws)
            .unwrap_or_else(|e| panic!("{what}: prepare failed: {e}"));
        let mut scratch = vec![0u8; kernel.scratch_bytes() + 64];
        let at = scratch.as_mut_ptr().align_offset(64);
        // SAFETY: the scratch has scratch_bytes() after aligning to 64.
        let scratch = unsafe { scratch.as_mut_ptr().add(at) } as usize;
        pool.run(&|ctx| {
            // SAFETY: every tensor lives in `srcs` / `out` for the whole run.
            unsafe { kernel.run(ctx, scratch as *mut u8) }
        });
        let got = match into {
            Some(i) => &srcs[i],
            None => &out,
        };
        let label = format!("{what} [{}] on {nth} threads", kernel.describe());
        match expect {
            Expect::Bytes => {
                if got.bytes() != expected.bytes() {
                    let first = got
                        .bytes()
                        .iter()
                        .zip(expected.bytes())
                        .position(|(a, b)| a != b)
                        .unwrap_or(0);
                    panic!("{label}: bytes differ from the reference, first at byte {first}");
                }
            }
            Expect::Values => assert_eq!(got.values(), want, "{label}"),
            Expect::Nmse => {
                let e = nmse(&rounded.data, &got.values().data);
                let limit = nmse_threshold(op.name());
                assert!(e <= limit, "{label}: nmse {e:e} > {limit:e}");
            }
        }
    }
}
