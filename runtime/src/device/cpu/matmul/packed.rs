//! Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 weights repacked once at load for the AVX2 lane
//! kernel (`qdot::avx2_lane`), and the cache that shares one repacked copy
//! between every kernel (and runtime) that reads the same weight (these,
//! K-quant weights in the order of [`super::kquant::repack`], and float
//! weights in panels for [`super::panel`]).
//!
//! Layout: a repacked row has exactly the bytes of the original row, and rows
//! sit at the same offsets, so a row's address moves by one fixed offset.
//! Within a row, blocks go in groups of [`GROUP`] (the last group may hold
//! `t < 8`); a group of `t` blocks starting at block `b` takes the bytes of
//! those blocks (at `b * block_bytes`) and holds, in order:
//! - the `t` f16 scales `d`;
//! - Q4_1 and Q5_1 only: the `t` f16 minimums `m`;
//! - Q5_0 and Q5_1 only, `4 t` bytes of fifth bits: for `t > 4` *bit
//!   planes* laid out as the quant vectors below (byte `4 j + i` belongs to
//!   lane `j`, block `b + j`), whose bit `2 v` is the fifth bit of the value
//!   in the low nibble of byte `i` of lane `j` in quant vector `v` (value
//!   `4 v + i`) and bit `2 v + 1` the same for its high nibble (value
//!   `16 + 4 v + i`), so one shift or one GFNI affine step brings a whole
//!   vector's fifth bits to bit 4 (`fifth_bit_planes`); for `t <= 4` (the
//!   pair tail below), the `t` blocks' own u32 `qh` words in block order;
//! - the quants (Q8_0: 32 bytes a block; Q4 and Q5: 16 bytes of nibbles, whose low
//!   nibbles are values 0..16 and high nibbles values 16..32) as vectors of
//!   `4 t` bytes (8 for Q8_0, 4 for Q4): in vector `v`, the 4 bytes of lane
//!   `j` are bytes `4 v .. 4 v + 4` of block `b + j`'s quants;
//! - except in a last group of `t <= 4` blocks ([`PAIRED_TAIL`]), whose
//!   quants come in pairs of blocks, to fill one 32-byte load with two:
//!   Q4 blocks' 16 bytes one after the other; Q8_0 pairs as 16 bytes of
//!   each block (values 0..16), then 16 of each (values 16..32), a last
//!   block alone as its 32 bytes. (Half the work of a group of 8 for
//!   K = 576, whose rows end in 2 blocks.)
//!
//! So one 32-byte load holds 4 bytes of each of 8 blocks: after the integer
//! products, 32-bit lane `j` sums block `b + j` alone, and the blocks' scales
//! apply as one vector per group, with no horizontal reduction per block.
//! The activations' `ql` ([`super::q8`]) are laid out the same way.
//!
//! Memory: one copy of each repacked weight beside the original (which stays
//! mapped or in the weights arena); SmolLM2-135M's Q8_0 token embedding is
//! also its output head, so it exists twice (get_rows reads the original).
//!
//! Time: one thread, in row order. Splitting each weight's rows over rayon's
//! pool was measured slower (2026-11-25, this 2-core host, SmolLM2-135M Q4_1
//! prefill plan, 63.3 MiB repacked, JIT kernels from the disk cache, 2
//! threads): kernels prepared in 115-120 ms in order against 131-135 ms in
//! parallel, three runs each. Repacking touches each byte once, so it is
//! bound by first-touch page faults on the source mapping and the fresh
//! copy, which do not scale across two cores.
//!
//! Invariants:
//! - only tensors that never change after load are repacked (the runtime
//!   passes a cache only for mul_mat operands whose root is a weight); the
//!   original bytes stay where they were, for every other reader (get_rows);
//! - a cached copy lives as long as a kernel holds it: the cache keeps weak
//!   references, so its memory is what the loaded runtimes use
//!   ([`RepackCache::live_bytes`]).

use super::kind::{self, fifth_bit_bytes, quant_bytes, scale_fields};
use super::kquant::{kind::weight_kind as kquant_kind, repack as kquant_repack};
use super::panel::{PanelIsa, Panels};
use super::q8::{GROUP, PAIRED_TAIL};
use crate::device::cpu::RawTensor;
use crate::memory::AlignedBuffer;
use ir::DType;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

/// A repacked copy of one weight tensor's bytes.
pub struct PackedWeights {
    /// The memory holding the copy (shared with other copies when carved
    /// from a [`Slab`] chunk, which lives as long as any of them).
    chunk: Arc<AlignedBuffer>,
    /// The copy's first byte within `chunk`.
    start: usize,
    /// The copy's bytes (the original's span).
    len: usize,
    /// The original tensor's first byte (rows keep their offsets from it).
    origin: usize,
}

impl PackedWeights {
    /// Address in the repacked copy of the original row at `row`.
    ///
    /// # Safety
    /// `row` is the first byte of a row of the tensor this was made from.
    pub unsafe fn row(&self, row: *const u8) -> *const u8 {
        // SAFETY: the copy has the original's span, rows at the same offsets.
        unsafe {
            self.chunk
                .as_ptr()
                .add(self.start + (row as usize - self.origin))
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.len
    }
}

/// The bit planes of a group of Q5 blocks (module doc) from the blocks'
/// `qh` words (`qh.len()` blocks, at most 8): byte `4 j + i` holds, at bit
/// `2 v`, bit `4 v + i` of block `j`'s word and, at bit `2 v + 1`, its bit
/// `16 + 4 v + i`. Bytes past `4 qh.len()` stay zero.
pub(crate) fn fifth_bit_planes(qh: &[u32]) -> [u8; 32] {
    let mut planes = [0u8; 32];
    for (j, &word) in qh.iter().enumerate() {
        for i in 0..4 {
            for v in 0..4 {
                let low = (word >> (4 * v + i)) & 1;
                let high = (word >> (16 + 4 * v + i)) & 1;
                planes[4 * j + i] |= ((low | high << 1) << (2 * v)) as u8;
            }
        }
    }
    planes
}

/// Repacks `rows` rows of `nb` blocks of `kind` from `src` into `dst`
/// (module doc).
///
/// # Safety
/// `src` and `dst` hold `rows * nb * block_bytes(kind)` bytes each and do
/// not overlap.
pub unsafe fn repack_rows(kind: u8, src: *const u8, dst: *mut u8, rows: usize, nb: usize) {
    let bytes = kind::block_bytes(kind);
    let fields = scale_fields(kind);
    let fifth = fifth_bit_bytes(kind);
    let quants = quant_bytes(kind);
    for r in 0..rows {
        for b in (0..nb).step_by(GROUP) {
            let t = GROUP.min(nb - b);
            // SAFETY: blocks b..b + t of row r are inside both buffers; every
            // write below stays inside their t * bytes bytes.
            unsafe {
                let from = src.add((r * nb + b) * bytes);
                let to = dst.add((r * nb + b) * bytes);
                let hdst = to.add(2 * fields * t);
                let qdst = hdst.add(fifth * t);
                if fifth > 0 && t > PAIRED_TAIL {
                    let mut qh = [0u32; GROUP];
                    for (j, word) in qh.iter_mut().enumerate().take(t) {
                        *word = (from.add(j * bytes + 2 * fields) as *const u32).read_unaligned();
                    }
                    let planes = fifth_bit_planes(&qh[..t]);
                    std::ptr::copy_nonoverlapping(planes.as_ptr(), hdst, fifth * t);
                }
                for j in 0..t {
                    let blk = from.add(j * bytes);
                    for f in 0..fields {
                        std::ptr::copy_nonoverlapping(blk.add(2 * f), to.add(2 * (f * t + j)), 2);
                    }
                    let h = blk.add(2 * fields);
                    if t <= PAIRED_TAIL {
                        std::ptr::copy_nonoverlapping(h, hdst.add(fifth * j), fifth);
                    }
                    let q = h.add(fifth);
                    if t > PAIRED_TAIL {
                        for v in 0..quants / 4 {
                            std::ptr::copy_nonoverlapping(
                                q.add(4 * v),
                                qdst.add(4 * (v * t + j)),
                                4,
                            );
                        }
                    } else if kind != kind::Q8_0 {
                        std::ptr::copy_nonoverlapping(q, qdst.add(16 * j), 16);
                    } else {
                        // Pair p: both blocks' quants 0..16, then both
                        // blocks' 16..32; a last block alone: its 32 bytes.
                        let (p, side) = (j / 2, j % 2);
                        let whole_pair = 2 * p + 1 < t;
                        for h in 0..2 {
                            let at = 64 * p
                                + if whole_pair {
                                    32 * h + 16 * side
                                } else {
                                    16 * h
                                };
                            std::ptr::copy_nonoverlapping(q.add(16 * h), qdst.add(at), 16);
                        }
                    }
                }
            }
        }
    }
}

/// What a repacked copy is of: the original's address, dtype and extents.
type Key = (usize, DType, [i64; 4]);

/// Repacked copies by original address, shared by the kernels of every
/// runtime loaded with one [`crate::FastKernels`]: quantized weights for the
/// AVX2 lane kernel, and float weights in panels ([`super::panel`]).
#[derive(Default)]
pub struct RepackCache {
    copies: Mutex<BTreeMap<Key, Weak<PackedWeights>>>,
    panels: Mutex<BTreeMap<(Key, PanelIsa), Weak<Panels>>>,
    slab: Mutex<Slab>,
}

/// Bytes of one [`Slab`] chunk.
const SLAB_CHUNK: usize = 32 << 20;

/// Repacked copies smaller than half a chunk are carved one after another
/// from chunks of [`SLAB_CHUNK`] bytes, which [`AlignedBuffer::zeroed`] puts
/// on transparent huge pages: a model's ~200 matrices of a few hundred KiB
/// each would otherwise each be its own 4 KiB-paged mapping, and decode,
/// which streams all of them per token, would miss the TLB every 4 KiB.
/// A chunk lives while a copy carved from it does (or while it is the one
/// being filled); the unused tail of the current chunk is never touched.
#[derive(Default)]
struct Slab {
    /// The chunk being filled and its bytes used so far.
    current: Option<(Arc<AlignedBuffer>, usize)>,
}

impl Slab {
    /// `len` zero bytes aligned to 64 as (chunk, offset); `None` when memory
    /// cannot be had.
    fn carve(&mut self, len: usize) -> Option<(Arc<AlignedBuffer>, usize)> {
        if len > SLAB_CHUNK / 2 {
            return Some((Arc::new(AlignedBuffer::zeroed(len, 64)?), 0));
        }
        let len = len.next_multiple_of(64);
        match &mut self.current {
            Some((chunk, used)) if *used + len <= chunk.len() => {
                let at = *used;
                *used += len;
                Some((chunk.clone(), at))
            }
            _ => {
                let chunk = Arc::new(AlignedBuffer::zeroed(SLAB_CHUNK, 64)?);
                self.current = Some((chunk.clone(), len));
                Some((chunk, 0))
            }
        }
    }
}

impl RepackCache {
    /// An empty cache.
    pub fn new() -> RepackCache {
        RepackCache::default()
    }

    /// The repacked copy of `src0`, made now or shared: Q8_0, Q4_0, Q4_1,
    /// Q5_0 and Q5_1 for the lane kernel (module doc), Q4_K, Q5_K and Q6_K
    /// for the K-quant tiles (`kquant::repack`); `None` for other dtypes,
    /// tensors that are not contiguous, or when the memory cannot be had.
    ///
    /// # Safety
    /// `src0`'s bytes are readable and never change while the copy lives.
    pub unsafe fn get(&self, src0: &RawTensor) -> Option<Arc<PackedWeights>> {
        type RepackRows = unsafe fn(u8, *const u8, *mut u8, usize, usize);
        let (kind, repack): (u8, RepackRows) = match kind::weight_kind(src0.dtype) {
            Some(kind) => (kind, repack_rows),
            None => (kquant_kind(src0.dtype)?, kquant_repack::repack_rows),
        };
        if !src0.is_contiguous() {
            return None;
        }
        let key = (src0.data as usize, src0.dtype, src0.ne);
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = copies.get(&key).and_then(Weak::upgrade) {
            return Some(p);
        }
        copies.retain(|_, w| w.strong_count() > 0);
        let span = src0.span_bytes() as usize;
        let (chunk, start) = self
            .slab
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .carve(span)?;
        let nb = src0.ne[0] as usize / src0.dtype.block_elems() as usize;
        let rows = span / (nb * src0.dtype.block_bytes() as usize);
        // SAFETY: both hold `span` bytes = rows * nb blocks (contiguous); the
        // carved bytes belong to this copy alone.
        unsafe { repack(kind, src0.data, chunk.as_ptr().add(start), rows, nb) };
        let p = Arc::new(PackedWeights {
            chunk,
            start,
            len: span,
            origin: src0.data as usize,
        });
        copies.insert(key, Arc::downgrade(&p));
        Some(p)
    }

    /// The panels of the 2-D float weight `src0` for `isa`, packed now or
    /// shared; `None` when the memory cannot be had.
    ///
    /// # Safety
    /// `src0`'s bytes are readable and never change while the panels live.
    pub unsafe fn panels(&self, src0: &RawTensor, isa: PanelIsa) -> Option<Arc<Panels>> {
        let key = ((src0.data as usize, src0.dtype, src0.ne), isa);
        let mut panels = self.panels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = panels.get(&key).and_then(Weak::upgrade) {
            return Some(p);
        }
        panels.retain(|_, w| w.strong_count() > 0);
        // SAFETY: forwarded.
        let p = unsafe { super::panel::pack(src0, isa) }?;
        panels.insert(key, Arc::downgrade(&p));
        Some(p)
    }

    /// Bytes of the repacked copies that kernels hold now.
    pub fn live_bytes(&self) -> u64 {
        let copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        let panels = self.panels.lock().unwrap_or_else(|e| e.into_inner());
        let copies = copies.values().filter_map(Weak::upgrade).map(|p| p.bytes());
        let panels = panels.values().filter_map(Weak::upgrade).map(|p| p.bytes());
        copies.chain(panels).map(|b| b as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_carves_disjoint_aligned_parts_and_gives_large_copies_their_own() {
        let mut slab = Slab::default();
        let (a, at_a) = slab.carve(100).unwrap();
        let (b, at_b) = slab.carve(1000).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "small copies share a chunk");
        assert_eq!((at_a, at_b), (0, 128), "each part starts on 64 bytes");
        let (big, at_big) = slab.carve(SLAB_CHUNK / 2 + 1).unwrap();
        assert_eq!(at_big, 0);
        assert!(!Arc::ptr_eq(&big, &a), "a large copy has its own memory");
        // Filling the chunk moves on to a fresh one.
        let (c, _) = slab.carve(SLAB_CHUNK / 2).unwrap();
        let (d, at_d) = slab.carve(SLAB_CHUNK / 2).unwrap();
        assert!(Arc::ptr_eq(&c, &a));
        assert!(!Arc::ptr_eq(&d, &a));
        assert_eq!(at_d, 0);
        // A chunk outlives the slab while a part of it does.
        drop(slab);
        assert_eq!(Arc::strong_count(&a), 3, "a, b, c");
    }
}
