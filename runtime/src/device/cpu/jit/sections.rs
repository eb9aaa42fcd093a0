//! Where MCJIT puts a kernel's machine code and constants: one reserved
//! region per compiled module, code in its first half, data (the constant
//! pools) in its second.
//!
//! Why: MCJIT's default memory manager may place code and data far apart, so
//! it must use the large code model, where every constant costs a 64-bit
//! address load plus the load itself. In a vector loop that runs short of
//! registers LLVM re-loads constants on every iteration (about a third of the
//! instructions of a silu loop). Keeping both halves within one small region
//! makes the small code model safe (RIP-relative reach is ±2 GiB), so each
//! constant is one load.
//!
//! Invariants: code and data never leave the region (allocation fails with a
//! null pointer instead, which LLVM reports as an error); after
//! `finalize_memory` the code half is read + execute, the data half stays read
//! + write; the region is unmapped exactly once, in `destroy`.

use inkwell::memory_manager::McjitMemoryManager;

/// Bytes reserved per module (address space only; pages are committed when
/// touched). A fused kernel's code is a few kilobytes.
const REGION: usize = 8 << 20;
const HALF: usize = REGION / 2;

/// The region of one module.
#[derive(Debug)]
pub(super) struct NearSections {
    base: *mut u8,
    code_used: usize,
    data_used: usize,
}

impl NearSections {
    /// Reserves a fresh region.
    pub fn new() -> Result<NearSections, String> {
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                REGION,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "reserving {REGION} bytes for JIT code: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(NearSections {
            base: base.cast(),
            code_used: 0,
            data_used: 0,
        })
    }

    fn bump(&self, used: &mut usize, start: usize, size: usize, alignment: u32) -> *mut u8 {
        let align = (alignment as usize).max(16);
        let offset = used.next_multiple_of(align);
        if offset + size > HALF {
            return std::ptr::null_mut();
        }
        *used = offset + size;
        // SAFETY: start + offset + size <= start + HALF, inside the region.
        unsafe { self.base.add(start + offset) }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(4096)
}

impl McjitMemoryManager for NearSections {
    fn allocate_code_section(
        &mut self,
        size: libc::uintptr_t,
        alignment: libc::c_uint,
        _section_id: libc::c_uint,
        _section_name: &str,
    ) -> *mut u8 {
        let mut used = self.code_used;
        let p = self.bump(&mut used, 0, size, alignment);
        self.code_used = used;
        p
    }

    fn allocate_data_section(
        &mut self,
        size: libc::uintptr_t,
        alignment: libc::c_uint,
        _section_id: libc::c_uint,
        _section_name: &str,
        _is_read_only: bool,
    ) -> *mut u8 {
        let mut used = self.data_used;
        let p = self.bump(&mut used, HALF, size, alignment);
        self.data_used = used;
        p
    }

    fn finalize_memory(&mut self) -> Result<(), String> {
        let code = self.code_used.next_multiple_of(page_size()).min(HALF);
        if code == 0 {
            return Ok(());
        }
        // SAFETY: the first `code` bytes of our own mapping (page aligned).
        let r =
            unsafe { libc::mprotect(self.base.cast(), code, libc::PROT_READ | libc::PROT_EXEC) };
        if r != 0 {
            return Err(format!(
                "making JIT code executable: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    fn destroy(&mut self) {
        if !self.base.is_null() {
            // SAFETY: our mapping, unmapped once (base is cleared after).
            unsafe { libc::munmap(self.base.cast(), REGION) };
            self.base = std::ptr::null_mut();
        }
    }
}
