//! Tests of the JIT against the reference kernels: test tensors in several
//! layouts (packed, transposed views, padded rows, misaligned starts), output
//! buffers poisoned with NaN, pools of 1, 2 and 3 threads.

mod fused;
mod jit;
mod math;
mod ops;
mod softmax;

use crate::device::cpu::{CpuKernel, RawTensor, ThreadPool};
use ir::{DType, Layout};
use kernels::reference::{Dense, gather, scatter};
use kernels::testing::Rng;

/// How a test tensor is laid out in its buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    /// Contiguous.
    Packed,
    /// A transposed view of a packed root (dims 0 and 1 swapped): nb0 is a row.
    Transposed,
    /// Rows 3 elements longer than ne0 (packed elements, gaps between rows).
    Padded,
    /// Packed, starting one element past a 64-byte boundary.
    Offset,
}

/// A test tensor's bytes (8-byte aligned, at least) and its layout.
pub(super) struct Buf {
    mem: Vec<u64>,
    offset: usize,
    layout: Layout,
}

impl Buf {
    /// A buffer for `ne` laid out as `kind`, filled with NaN.
    pub fn new(dtype: DType, ne: [i64; 4], kind: Kind) -> Buf {
        let es = dtype.block_bytes();
        let layout = match kind {
            Kind::Packed | Kind::Offset => Layout::contiguous(dtype, ne).unwrap(),
            Kind::Transposed => {
                let root = Layout::contiguous(dtype, [ne[1], ne[0], ne[2], ne[3]]).unwrap();
                Layout {
                    dtype,
                    ne,
                    nb: [root.nb[1], root.nb[0], root.nb[2], root.nb[3]],
                }
            }
            Kind::Padded => {
                let root = Layout::contiguous(dtype, [ne[0] + 3, ne[1], ne[2], ne[3]]).unwrap();
                Layout { ne, ..root }
            }
        };
        let offset = if kind == Kind::Offset { es as usize } else { 0 };
        let bytes = layout.span_bytes() as usize + offset + 64;
        let mut buf = Buf {
            mem: vec![0; bytes.div_ceil(8)],
            offset,
            layout,
        };
        buf.poison();
        buf
    }

    /// Fills every byte with NaN patterns.
    pub fn poison(&mut self) {
        let pattern: u64 = match self.layout.dtype {
            DType::F16 => 0x7e00_7e00_7e00_7e00,
            _ => 0x7fc0_0000_7fc0_0000,
        };
        self.mem.fill(pattern);
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the Vec<u64> is viewed as its bytes.
        let all = unsafe {
            std::slice::from_raw_parts(self.mem.as_ptr().cast::<u8>(), self.mem.len() * 8)
        };
        &all[self.offset..]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.mem.len() * 8;
        // SAFETY: the Vec<u64> is viewed as its bytes.
        let all = unsafe { std::slice::from_raw_parts_mut(self.mem.as_mut_ptr().cast::<u8>(), n) };
        &mut all[self.offset..]
    }

    /// Writes `values` (rounded to the dtype).
    pub fn set(&mut self, values: &Dense) {
        let layout = self.layout;
        scatter(values, self.bytes_mut(), &layout);
    }

    /// The values held.
    pub fn get(&self) -> Dense {
        gather(self.bytes(), &self.layout)
    }

    /// The kernel's view.
    pub fn raw(&mut self) -> RawTensor {
        let layout = self.layout;
        RawTensor {
            data: self.bytes_mut().as_mut_ptr(),
            dtype: layout.dtype,
            ne: layout.ne,
            nb: layout.nb,
        }
    }
}

/// A tensor of uniform random values in [lo, hi), as stored (rounded to its
/// dtype), with its values.
pub(super) fn random(
    rng: &mut Rng,
    dtype: DType,
    ne: [i64; 4],
    kind: Kind,
    (lo, hi): (f64, f64),
) -> (Buf, Dense) {
    let mut buf = Buf::new(dtype, ne, kind);
    let n = ne.iter().product::<i64>() as usize;
    buf.set(&Dense::new(ne, rng.vec(n, lo, hi)));
    let values = buf.get();
    (buf, values)
}

/// `values` rounded to `dtype` (the reference for an output of that dtype).
pub(super) fn rounded(values: &Dense, dtype: DType) -> Dense {
    let mut buf = Buf::new(dtype, values.ne, Kind::Packed);
    buf.set(values);
    buf.get()
}

/// Runs `kernel` once on a fresh pool of `threads` (dropped at once: idle
/// pools spin, which would starve the tests on a small machine).
pub(super) fn run(kernel: &dyn CpuKernel, threads: usize) {
    ThreadPool::new(threads).run(&|ctx| {
        // SAFETY: the test keeps the kernel's tensors alive; no scratch is needed.
        unsafe { kernel.run(ctx, std::ptr::null_mut()) }
    });
}

/// One JIT for the correctness tests, so that they share compiled kernels.
pub(super) fn shared_jit() -> &'static crate::device::cpu::jit::Jit {
    static JIT: std::sync::OnceLock<crate::device::cpu::jit::Jit> = std::sync::OnceLock::new();
    JIT.get_or_init(|| crate::device::cpu::jit::Jit::new().unwrap())
}

/// Pool sizes every kernel runs on.
pub(super) fn pools() -> [usize; 3] {
    [1, 2, 3]
}

/// Output shapes at odd sizes: rows 1, 3, 17, 783 and 4096, ne0 1, 7, 33, 1023.
pub(super) const SHAPES: [[i64; 4]; 8] = [
    [1, 1, 1, 1],
    [7, 3, 1, 1],
    [33, 17, 1, 1],
    [1023, 3, 1, 1],
    [1, 17, 1, 1],
    [7, 27, 29, 1],
    [33, 16, 16, 16],
    [1023, 1, 1, 1],
];

/// Asserts NMSE(reference, actual) under `threshold`, naming the case.
pub(super) fn assert_close(what: &str, reference: &Dense, actual: &Dense, threshold: f64) {
    let e = kernels::testing::nmse(&reference.data, &actual.data);
    assert!(
        e <= threshold,
        "{what}: nmse {e:e} > {threshold:e} (first values: ref {:?} got {:?})",
        &reference.data[..reference.data.len().min(6)],
        &actual.data[..actual.data.len().min(6)]
    );
}
