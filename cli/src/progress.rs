//! Progress bars for long operations, shown only when stderr is a terminal
//! (so pipes, files and CI logs never get escape sequences).

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A bar of `len` units labelled `message`: drawn on stderr when it is a
/// terminal, hidden (every call a no-op) otherwise.
pub fn bar(len: u64, message: &str) -> ProgressBar {
    bar_for(len, message, std::io::stderr().is_terminal())
}

fn bar_for(len: u64, message: &str, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    // The template is a constant, so it always parses; fall back to the default style anyway.
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(message.to_string());
    pb
}

/// A hook for the runtime's kernel preparation (steps done, steps in all)
/// that moves `bar`.
pub fn preparing(bar: &ProgressBar) -> std::sync::Arc<dyn Fn(usize, usize) + Send + Sync> {
    let bar = bar.clone();
    std::sync::Arc::new(move |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
}

/// A hook for the runtime's weight uploads (bytes written, bytes in all)
/// that shows a bar in bytes above the others in `bars` once a load uploads
/// at least 1 MiB (a CPU load writes only its small constants), and clears it
/// when the upload is done.
pub fn uploading(
    bars: &MultiProgress,
    visible: bool,
) -> std::sync::Arc<dyn Fn(u64, u64) + Send + Sync> {
    let bars = bars.clone();
    let shown = std::sync::OnceLock::new();
    std::sync::Arc::new(move |done, total| {
        if total < 1 << 20 {
            return;
        }
        let bar: &ProgressBar = shown.get_or_init(|| {
            let bar = bars.insert(0, bar_for(total, "uploading weights", visible));
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} ({binary_bytes_per_sec}, eta {eta})",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
        }
    })
}

/// Runs `load` with `options` plus a bar labelled `message` over kernel
/// preparation and, for a GPU or remote server, one over the weights' upload
/// (both hidden unless stderr is a terminal).
pub fn while_preparing<T>(
    options: &runtime::LoadOptions,
    message: &str,
    load: impl FnOnce(&runtime::LoadOptions) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let visible = std::io::stderr().is_terminal();
    let target = if visible {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    // One owner for both bars, so each keeps its own line.
    let bars = MultiProgress::with_draw_target(target);
    let prepare = bars.add(bar_for(0, message, visible));
    let mut options = options.clone();
    options.on_upload = Some(uploading(&bars, visible));
    options.on_prepare = Some(preparing(&prepare));
    let result = load(&options);
    prepare.finish_and_clear();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_when_not_a_terminal() {
        let pb = bar_for(10, "work", false);
        assert!(pb.is_hidden());
        pb.inc(3);
        assert_eq!(pb.position(), 3);
        let shown = bar_for(10, "work", true);
        assert_eq!(
            (shown.length(), shown.message()),
            (Some(10), "work".to_string())
        );
    }
}
