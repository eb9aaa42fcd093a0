//! CUDA C to PTX with NVRTC (loaded at run time), with a disk cache by key.
//!
//! The key is a hash of the source, the virtual architecture and the
//! options, so a cached PTX is exactly what NVRTC would produce for them.
//! Loading looks in the cache first and needs no NVRTC on a hit: a GPU host
//! without the toolkit runs plans whose kernels were compiled elsewhere
//! (`GGPLAN_CUDA_CACHE` names the folder; default
//! `$XDG_CACHE_HOME/ggplan/cuda` or `~/.cache/ggplan/cuda`).
//!
//! Invariant: nothing of cudarc's NVRTC is called before the library was
//! found (cudarc panics without it), and the compile call runs under
//! `catch_unwind`, so a missing or broken NVRTC is an error, never a crash.

use super::codegen::fnv1a;
use crate::RuntimeError;
use std::path::PathBuf;

/// Options every module is compiled with.
pub const OPTIONS: &[&str] = &["--std=c++17"];

/// The virtual architecture to compile for on a GPU of compute capability
/// `cc`: its own where NVRTC 12 knows it, else the newest one below (PTX
/// runs on later GPUs through the driver's compiler); `None` before Volta.
pub fn architecture(cc: (i32, i32)) -> Option<&'static str> {
    const KNOWN: [((i32, i32), &str); 9] = [
        ((7, 0), "compute_70"),
        ((7, 5), "compute_75"),
        ((8, 0), "compute_80"),
        ((8, 6), "compute_86"),
        ((8, 7), "compute_87"),
        ((8, 9), "compute_89"),
        ((9, 0), "compute_90"),
        ((10, 0), "compute_100"),
        ((12, 0), "compute_120"),
    ];
    KNOWN.iter().rev().find(|(k, _)| *k <= cc).map(|(_, a)| *a)
}

/// The cache folder.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GGPLAN_CUDA_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("ggplan").join("cuda"))
}

/// The cache file name of `source` compiled for `arch`.
pub fn cache_name(source: &str, arch: &str) -> String {
    let mut key = Vec::new();
    key.extend_from_slice(source.as_bytes());
    key.extend_from_slice(arch.as_bytes());
    for o in OPTIONS {
        key.extend_from_slice(o.as_bytes());
    }
    format!("{:016x}-{arch}.ptx", fnv1a(&key))
}

/// True when NVRTC can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen libnvrtc under its usual names.
    std::panic::catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false)
}

/// The PTX of `source` for `arch`: from the cache, else compiled (and
/// stored). `device` names the device in errors.
pub fn ptx(source: &str, arch: &'static str, device: &str) -> Result<String, RuntimeError> {
    let path = cache_dir().map(|d| d.join(cache_name(source, arch)));
    if let Some(p) = &path
        && let Ok(text) = std::fs::read_to_string(p)
    {
        return Ok(text);
    }
    let text = compile(source, arch, device)?;
    if let Some(p) = &path {
        store(p, &text);
    }
    Ok(text)
}

/// Compiles with NVRTC (no cache).
pub fn compile(source: &str, arch: &'static str, device: &str) -> Result<String, RuntimeError> {
    let fail = |what: String| RuntimeError::Cuda {
        device: device.to_string(),
        what,
    };
    if !nvrtc_present() {
        return Err(fail(format!(
            "its kernels are not in the cache ({}) and NVRTC (libnvrtc.so) cannot be loaded \
             to compile them: install the CUDA toolkit or the nvidia-cuda-nvrtc-cu12 wheel and \
             put its lib folder on LD_LIBRARY_PATH",
            cache_dir().map_or("none".to_string(), |d| d.display().to_string())
        )));
    }
    let options = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        options: OPTIONS.iter().map(|o| o.to_string()).collect(),
        ..Default::default()
    };
    let source = source.to_string();
    let result =
        super::probe::catch_quietly(move || cudarc::nvrtc::compile_ptx_with_opts(source, options));
    match result {
        Ok(Ok(ptx)) => Ok(ptx.to_src()),
        Ok(Err(cudarc::nvrtc::CompileError::CompileError { log, .. })) => Err(fail(format!(
            "NVRTC could not compile a kernel for {arch}:\n{}",
            log.to_string_lossy()
        ))),
        Ok(Err(e)) => Err(fail(format!("NVRTC failed: {e:?}"))),
        Err(_) => Err(fail(
            "NVRTC is too old for this build (a function is missing)".to_string(),
        )),
    }
}

/// Writes `text` to `path` through a temporary file (never half written);
/// a cache that cannot be written is not an error.
fn store(path: &std::path::Path, text: &str) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_round_down_to_known_ones() {
        assert_eq!(architecture((9, 0)), Some("compute_90"));
        assert_eq!(architecture((8, 9)), Some("compute_89"));
        assert_eq!(architecture((9, 5)), Some("compute_90"));
        assert_eq!(architecture((6, 1)), None);
        assert_ne!(cache_name("a", "compute_80"), cache_name("a", "compute_90"));
    }
}
