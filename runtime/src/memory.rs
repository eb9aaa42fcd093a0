//! Host memory: aligned zero-initialised buffers for arenas, and how much
//! memory this machine has available.
//!
//! Invariant: an [`AlignedBuffer`] never moves its bytes, so addresses baked
//! into prepared kernels stay valid for its whole life.

use std::alloc::{Layout, alloc_zeroed, dealloc};

/// Alignment of every buffer: a cache line, and a full AVX-512 vector.
pub const BUFFER_ALIGN: usize = 64;

/// A zeroed, aligned, fixed-size heap buffer.
pub struct AlignedBuffer {
    ptr: *mut u8,
    len: usize,
    layout: Option<Layout>,
}

// SAFETY: the buffer owns its bytes; synchronisation of access is the
// runtime's (kernels write disjoint bytes; runs are exclusive via &mut).
unsafe impl Send for AlignedBuffer {}
// SAFETY: as above.
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// `len` zero bytes aligned to `align.max(BUFFER_ALIGN)`; `None` when the
    /// allocation fails (the caller reports which arena).
    pub fn zeroed(len: usize, align: usize) -> Option<AlignedBuffer> {
        if len == 0 {
            return Some(AlignedBuffer {
                ptr: std::ptr::without_provenance_mut(BUFFER_ALIGN),
                len: 0,
                layout: None,
            });
        }
        let align = align.max(BUFFER_ALIGN).next_power_of_two();
        let layout = Layout::from_size_align(len, align).ok()?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(AlignedBuffer {
            ptr,
            len,
            layout: Some(layout),
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-size buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (dangling only when len == 0).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated with this layout in `zeroed`.
            unsafe { dealloc(self.ptr, layout) };
        }
    }
}

/// Bytes of memory available to a new allocation (Linux MemAvailable), or
/// `None` where it cannot be read.
pub fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        for len in [0, 1, 63, 4096] {
            let b = AlignedBuffer::zeroed(len, 32).unwrap();
            assert_eq!(b.as_ptr() as usize % BUFFER_ALIGN, 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
            assert_eq!(b.len(), len);
        }
    }

    #[test]
    fn available_memory_is_known_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(available_bytes().unwrap() > 0);
        }
    }
}
