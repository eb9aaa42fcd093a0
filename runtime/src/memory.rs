//! Host memory: aligned zero-initialised buffers for arenas, and how much
//! memory this machine has available.
//!
//! Invariant: an [`AlignedBuffer`] never moves its bytes, so addresses baked
//! into prepared kernels stay valid for its whole life.

use std::alloc::{Layout, alloc_zeroed, dealloc};

/// Alignment of every buffer: a cache line, and a full AVX-512 vector.
pub const BUFFER_ALIGN: usize = 64;

/// Buffers of at least this many bytes are aligned to [`HUGE_PAGE`] and asked
/// to be backed by transparent huge pages ([`AlignedBuffer::zeroed`]).
pub const HUGE_PAGE_MIN: usize = 4 << 20;

/// The x86-64 transparent huge page size.
pub const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, aligned, fixed-size heap buffer.
pub struct AlignedBuffer {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
}

/// Where an [`AlignedBuffer`]'s bytes come from, for freeing them.
enum Backing {
    /// Nothing (a zero-size buffer).
    None,
    /// The global allocator, with this layout.
    Heap(Layout),
    /// An anonymous mapping of `len` bytes at `base` (huge buffers on Linux).
    #[cfg_attr(any(miri, not(target_os = "linux")), allow(dead_code))]
    Mapped { base: *mut u8, len: usize },
}

// SAFETY: the buffer owns its bytes; synchronisation of access is the
// runtime's (kernels write disjoint bytes; runs are exclusive via &mut).
unsafe impl Send for AlignedBuffer {}
// SAFETY: as above.
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// `len` zero bytes aligned to `align.max(BUFFER_ALIGN)`; `None` when the
    /// allocation fails (the caller reports which arena).
    ///
    /// A buffer of [`HUGE_PAGE_MIN`] bytes or more starts on a huge page and
    /// is advised `MADV_HUGEPAGE` before its first touch, so that where the
    /// kernel's transparent huge pages are `madvise` (Debian's default) or
    /// `always`, its pages are 2 MiB: decode streams ~100 MB of repacked
    /// weights per token, which with 4 KiB pages misses the TLB every 4 KiB.
    /// The advice is only a hint; a kernel that declines it changes nothing.
    /// `GGPLAN_HUGE_PAGES=0` leaves it out (with the kernel's `defrag` set to
    /// `madvise`, a fault in an advised range may compact memory first: one
    /// load in five took 380 ms instead of 120 in a measurement here).
    ///
    /// Measured (2-core Xeon, SmolLM2 Q4_1 decode plan, `ggplan bench`, 150
    /// runs, five alternations with the heap-allocated build, 2026-11-26):
    /// load 116-122 ms against 196-200 (the kernel zero-fills mapped pages;
    /// the heap's aligned path wrote every byte first); decode median
    /// 4.16-5.06 ms against 4.50-5.17, lower in four of five pairs.
    pub fn zeroed(len: usize, align: usize) -> Option<AlignedBuffer> {
        if len == 0 {
            return Some(AlignedBuffer {
                ptr: std::ptr::without_provenance_mut(BUFFER_ALIGN),
                len: 0,
                backing: Backing::None,
            });
        }
        let align = align.max(BUFFER_ALIGN).next_power_of_two();
        // (Miri cannot model mappings: it takes the heap path.)
        if len >= HUGE_PAGE_MIN && align <= HUGE_PAGE {
            #[cfg(all(target_os = "linux", not(miri)))]
            return map_huge(len);
        }
        let layout = Layout::from_size_align(len, align).ok()?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(AlignedBuffer {
            ptr,
            len,
            backing: Backing::Heap(layout),
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

/// `len` zero bytes from an anonymous mapping, starting on a huge page and
/// advised `MADV_HUGEPAGE` before any touch (the kernel zero-fills pages on
/// first touch, so nothing is written here). `None` when the mapping fails.
#[cfg(all(target_os = "linux", not(miri)))]
fn map_huge(len: usize) -> Option<AlignedBuffer> {
    // One huge page more than asked, so an aligned start exists inside.
    let map_len = len.checked_add(HUGE_PAGE)?;
    // SAFETY: a fresh private anonymous mapping; no existing memory is named.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base.cast::<u8>();
    let ptr = base.wrapping_add(base.align_offset(HUGE_PAGE));
    if std::env::var("GGPLAN_HUGE_PAGES").as_deref() != Ok("0") {
        // SAFETY: ptr..ptr + len lies inside the mapping (at most HUGE_PAGE -
        // 1 bytes were skipped); the advice changes no contents, and a kernel
        // that declines it (THP off) leaves 4 KiB pages: failures are ignored.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
    }
    Some(AlignedBuffer {
        ptr,
        len,
        backing: Backing::Mapped { base, len: map_len },
    })
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        match self.backing {
            Backing::None => {}
            // SAFETY: allocated with this layout in `zeroed`.
            Backing::Heap(layout) => unsafe { dealloc(self.ptr, layout) },
            // SAFETY: mapped with this base and length in `map_huge`.
            Backing::Mapped { base, len } => unsafe {
                libc::munmap(base.cast(), len);
            },
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
    #[cfg_attr(
        miri,
        ignore = "mappings are outside Miri's model; megabytes interpreted"
    )]
    fn huge_buffers_start_on_a_huge_page_and_are_whole() {
        for len in [HUGE_PAGE_MIN, HUGE_PAGE_MIN + 4097, 3 * HUGE_PAGE_MIN] {
            let b = AlignedBuffer::zeroed(len, 256).unwrap();
            if cfg!(target_os = "linux") {
                assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0, "len {len}");
            }
            assert!(b.as_slice().iter().all(|&x| x == 0), "len {len}");
            // Every byte is writable, the last one included.
            // SAFETY: inside the buffer, which this test owns.
            unsafe { std::ptr::write_bytes(b.as_ptr(), 0xA5, len) };
            assert_eq!(b.as_slice()[len - 1], 0xA5);
        }
        // An alignment above a huge page still goes to the allocator.
        let b = AlignedBuffer::zeroed(HUGE_PAGE_MIN, 4 * HUGE_PAGE).unwrap();
        assert_eq!(b.as_ptr() as usize % (4 * HUGE_PAGE), 0);
    }

    #[test]
    fn available_memory_is_known_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(available_bytes().unwrap() > 0);
        }
    }
}
