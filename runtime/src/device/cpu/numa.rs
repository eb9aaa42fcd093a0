//! Host memory bound to one NUMA node: `mbind(2)` on a fresh buffer's pages
//! before anything touches them, and `get_mempolicy(2)` to read back where a
//! page lives (for tests and `ggplan devices`).
//!
//! Binding is best effort, as the kernel allows: a sandbox may forbid the
//! call (seccomp), a kernel may lack NUMA support; the caller gets the reason
//! and the buffer stays usable, unbound.

/// `MPOL_MF_MOVE` (linux/mempolicy.h): move pages already faulted in.
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;
/// `MPOL_F_NODE` (linux/mempolicy.h): get_mempolicy returns a node number.
const MPOL_F_NODE: libc::c_ulong = 1;
/// `MPOL_F_ADDR` (linux/mempolicy.h): ... of the page at an address.
const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
/// Nodes a mask can name (16 words).
const MASK_WORDS: usize = 16;

/// The pages of `[ptr, ptr + len)` must come from node `node` (MPOL_BIND).
/// Whole pages only: `ptr` should be page-aligned (a partial first or last
/// page is left as it was).
pub fn bind(ptr: *mut u8, len: usize, node: u32) -> Result<(), String> {
    if node as usize >= MASK_WORDS * 64 - 1 {
        return Err(format!(
            "NUMA node {node} is beyond the {} nodes a mask names",
            MASK_WORDS * 64 - 1
        ));
    }
    let page = page_size();
    let start = (ptr as usize).next_multiple_of(page);
    let end = (ptr as usize + len) / page * page;
    if end <= start {
        return Ok(());
    }
    let mut mask = [0 as libc::c_ulong; MASK_WORDS];
    mask[node as usize / 64] |= 1 << (node % 64);
    // SAFETY: the range is whole pages of a buffer this process owns; the
    // mask holds MASK_WORDS * 64 bits, of which maxnode - 1 are read.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            start as *mut libc::c_void,
            end - start,
            libc::MPOL_BIND,
            mask.as_ptr(),
            (MASK_WORDS * 64) as libc::c_ulong,
            MPOL_MF_MOVE,
        )
    };
    if rc != 0 {
        return Err(format!(
            "mbind to NUMA node {node} failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The node holding the page at `ptr` (faulted in: the caller touched it),
/// or `None` when the kernel does not say.
pub fn node_of(ptr: *const u8) -> Option<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int; no mask is passed (maxnode 0).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            ptr as *mut libc::c_void,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    (rc == 0 && node >= 0).then_some(node as u32)
}

/// The policy of the page at `ptr`: its mode (`libc::MPOL_*`) and the
/// nodes of its mask, or `None` when the kernel does not say.
pub fn policy_of(ptr: *const u8) -> Option<(libc::c_int, Vec<u32>)> {
    let mut mode: libc::c_int = -1;
    let mut mask = [0 as libc::c_ulong; MASK_WORDS];
    // SAFETY: the mask holds MASK_WORDS * 64 bits, maxnode says as many.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            (MASK_WORDS * 64) as libc::c_ulong,
            ptr as *mut libc::c_void,
            MPOL_F_ADDR,
        )
    };
    if rc != 0 {
        return None;
    }
    let nodes = (0..MASK_WORDS * 64)
        .filter(|&n| mask[n / 64] >> (n % 64) & 1 == 1)
        .map(|n| n as u32)
        .collect();
    Some((mode, nodes))
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::AlignedBuffer;

    #[test]
    fn a_buffer_bound_to_node_0_lives_there() {
        let len = 64 * page_size();
        let buf = AlignedBuffer::zeroed(len, page_size()).unwrap();
        match bind(buf.as_ptr(), len, 0) {
            Ok(()) => {
                // SAFETY: the buffer owns len bytes.
                unsafe { std::ptr::write_bytes(buf.as_ptr(), 1, len) };
                let (mode, nodes) = policy_of(buf.as_ptr()).expect("get_mempolicy answers");
                assert_eq!((mode, nodes), (libc::MPOL_BIND, vec![0]));
                assert_eq!(node_of(buf.as_ptr().wrapping_add(len - 1)), Some(0));
            }
            // A sandbox without mbind: say so, the test cannot check more.
            Err(why) => eprintln!("NUMA binding unavailable here: {why}"),
        }
    }

    #[test]
    fn a_node_beyond_the_mask_is_refused_by_number() {
        let buf = AlignedBuffer::zeroed(page_size(), page_size()).unwrap();
        let err = bind(buf.as_ptr(), page_size(), 5000).unwrap_err();
        assert!(err.contains("5000"), "{err}");
    }
}
