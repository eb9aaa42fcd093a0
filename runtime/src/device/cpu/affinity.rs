//! Which cores the calling thread may run on, and pinning it to some: what
//! the worker pool and the CPU device both use, below both.
//!
//! Pinning is best effort (a container or sandbox may refuse it), but never
//! silent: [`pin_current_thread`] returns why it failed, and
//! [`pin_or_warn`] logs it, at warn level the first time in a process.

use std::sync::atomic::{AtomicBool, Ordering};

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

/// Why the calling thread could not be pinned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not pin a thread to cores {}: {reason}", list(cores))]
pub struct PinError {
    /// The cores asked for.
    pub cores: Vec<usize>,
    /// What the system said.
    pub reason: String,
}

fn list(cores: &[usize]) -> String {
    let cores: Vec<String> = cores.iter().map(usize::to_string).collect();
    cores.join(", ")
}

/// Pins the calling thread to `cores` (nothing to do for none).
pub fn pin_current_thread(cores: &[usize]) -> Result<(), PinError> {
    if cores.is_empty() {
        return Ok(());
    }
    let fail = |reason: String| PinError {
        cores: cores.to_vec(),
        reason,
    };
    let limit = libc::CPU_SETSIZE as usize;
    if let Some(&c) = cores.iter().find(|&&c| c >= limit) {
        return Err(fail(format!(
            "core {c} is beyond the {limit} an affinity mask holds"
        )));
    }
    // SAFETY: `set` is a plain bit set; every core is below CPU_SETSIZE.
    let status = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if status == 0 {
        Ok(())
    } else {
        let os = std::io::Error::last_os_error();
        Err(fail(format!("sched_setaffinity: {os}")))
    }
}

/// Whether a pinning failure was logged at warn level yet (once per process:
/// a pool pins every worker and a device pins its caller on every run).
static WARNED: AtomicBool = AtomicBool::new(false);

/// [`pin_current_thread`], logging a failure (the thread runs unpinned).
pub fn pin_or_warn(cores: &[usize]) {
    if let Err(e) = pin_current_thread(cores) {
        if WARNED.swap(true, Ordering::Relaxed) {
            tracing::debug!("{e}; the thread runs unpinned");
        } else {
            tracing::warn!("{e}; the thread runs unpinned (later failures are logged at debug)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_to_allowed_cores_works_and_a_refusal_names_the_cores() {
        // On a thread of its own: pinning changes the calling thread.
        std::thread::spawn(|| {
            let allowed = allowed_cores();
            assert_eq!(pin_current_thread(&allowed), Ok(()));
            assert_eq!(pin_current_thread(&[]), Ok(()));
            // A core no machine here has: the kernel refuses a mask of no
            // usable core (EINVAL), and the error says which were asked for.
            let err = pin_current_thread(&[1000, 1001]).unwrap_err();
            assert_eq!(err.cores, vec![1000, 1001]);
            let text = err.to_string();
            assert!(
                text.contains("cores 1000, 1001") && text.contains("sched_setaffinity"),
                "{text}"
            );
            let err = pin_current_thread(&[usize::MAX]).unwrap_err();
            assert!(err.to_string().contains("beyond the"), "{err}");
            // A failed pin left the thread where it was.
            assert_eq!(allowed_cores(), allowed);
        })
        .join()
        .unwrap();
    }
}
