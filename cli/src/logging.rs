//! Log output for `ggplan -v` / `-vv`: `tracing` events to stderr.
//!
//! Quiet by default: without `-v` and without `RUST_LOG` no subscriber is
//! installed, so commands print only their own output. `RUST_LOG`, when set,
//! wins over the flag (it may name crates and levels precisely).

use tracing_subscriber::EnvFilter;

/// The filter for `verbosity` (the number of `-v` flags), if logging is on.
fn filter(verbosity: u8, rust_log: Option<&str>) -> Option<EnvFilter> {
    if let Some(spec) = rust_log.filter(|s| !s.trim().is_empty()) {
        return EnvFilter::try_new(spec).ok();
    }
    let level = match verbosity {
        0 => return None,
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    Some(EnvFilter::new(level))
}

/// Installs the stderr subscriber for `verbosity` (see the module docs).
pub fn init(verbosity: u8) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let Some(filter) = filter(verbosity, rust_log.as_deref()) else {
        return;
    };
    use std::io::IsTerminal;
    // A second init (tests) keeps the first subscriber: nothing to report.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_unless_asked() {
        assert!(filter(0, None).is_none());
        assert!(filter(0, Some("  ")).is_none());
        assert_eq!(filter(1, None).unwrap().to_string(), "info");
        assert_eq!(filter(2, None).unwrap().to_string(), "debug");
        assert_eq!(filter(5, None).unwrap().to_string(), "trace");
        assert_eq!(filter(0, Some("warn")).unwrap().to_string(), "warn");
    }
}
