//! Which cores the calling thread may run on, and pinning it to some: what
//! the worker pool and the CPU device both use, below both.

/// The cores this process may run on, in order.
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: `set` is a plain bit set the call fills; size is its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            let cores: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect();
            if !cores.is_empty() {
                return cores;
            }
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Pins the calling thread to `cores` (best effort: a sandbox may refuse).
pub fn pin_current_thread(cores: &[usize]) {
    if cores.is_empty() {
        return;
    }
    // SAFETY: as in allowed_cores; core numbers come from the affinity mask.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
