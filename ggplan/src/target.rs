//! Targets: the devices a plan is made for, with their memory, speed and
//! links.
//!
//! Three kinds: a built-in preset ([`Target::PRESETS`]: `cpu`, `cuda0`,
//! `cpu+cuda0`, ...), a RON target file, and (feature `jit`) `host`, this
//! machine as the runtime's registry finds it, with CPU rates measured by a
//! short calibration cached on disk. A plan for a preset or file is the same
//! on every machine; a plan for `host` is the same on the machine that made
//! it.

use crate::Result;

#[cfg(feature = "runtime")]
pub use crate::host::{HOST, add_remote_devices, cache_path, host_target};
pub use compiler::target::{Device, DeviceKind, Link, MatmulGflops, Target, Throughput};

/// A target by name: a preset, a RON target file, or (feature `jit`)
/// `host`. Notes the host calibration has for the user are logged with
/// `tracing` at the warn level; [`resolve_with_notes`] hands them over instead.
///
/// ```
/// let target = ggplan::target::resolve("cpu+cuda0")?;
/// assert_eq!(target.devices.len(), 2);
/// # Ok::<(), ggplan::Error>(())
/// ```
pub fn resolve(name_or_path: &str) -> Result<Target> {
    resolve_with_notes(name_or_path, &mut |note| tracing::warn!("{note}"))
}

/// [`resolve`], with the host calibration's notes ("calibrating this
/// host...", a stale cache) passed to `note`.
pub fn resolve_with_notes(name_or_path: &str, note: &mut dyn FnMut(&str)) -> Result<Target> {
    #[cfg(feature = "runtime")]
    if name_or_path == HOST {
        return host_target(false, note);
    }
    #[cfg(not(feature = "runtime"))]
    let _ = note;
    Ok(Target::parse(name_or_path)?)
}
