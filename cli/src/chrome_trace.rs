//! `ggplan run --trace FILE.json`: a traced run as a Chrome trace (the JSON
//! that Perfetto and chrome://tracing open): one track per stream, named
//! `device compute` / `device copy`, a complete event per step, copy and
//! event wait, times in microseconds since the run started. Also prints each
//! stream's busy and idle share of the run (the pipeline bubbles).
//!
//! Invariant: the file is written atomically; the same trace writes the same bytes.

use anyhow::{Context, Result};
use ir::plan::Plan;
use runtime::Runtime;
use runtime::executor::trace::{SpanKind, Trace};
use serde_json::json;
use std::path::Path;

fn stream_name(plan: &Plan, stream: u32) -> String {
    match plan.streams.get(stream as usize) {
        Some(s) => {
            let device = plan
                .devices
                .get(s.device.index())
                .map_or("?", |d| d.name.as_str());
            format!("{device} {}", s.kind)
        }
        None => format!("stream {stream}"),
    }
}

/// The trace as Chrome trace JSON.
pub fn to_json(rt: &Runtime, trace: &Trace) -> serde_json::Value {
    let plan = rt.plan();
    let mut events = Vec::new();
    let mut streams: Vec<u32> = trace.spans.iter().map(|s| s.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    for &s in &streams {
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": 0, "tid": s,
            "args": { "name": stream_name(plan, s) },
        }));
    }
    for span in &trace.spans {
        let (name, cat, args) = match &span.kind {
            SpanKind::Step(i) => {
                let step = &rt.steps()[*i];
                let tensor = &plan.tensors[step.dst as usize].name;
                (
                    format!("{} {tensor}", step.kind),
                    if step.kind == "copy" { "copy" } else { "step" },
                    json!({ "step": i, "split": step.split, "bytes": step.bytes }),
                )
            }
            SpanKind::Wait(events) => (
                format!("waits for {}", ir::plan::events_in_words(events)),
                "wait",
                json!({ "events": events }),
            ),
        };
        events.push(json!({
            "name": name, "cat": cat, "ph": "X", "pid": 0, "tid": span.stream,
            "ts": span.start_ns as f64 / 1e3,
            "dur": span.end_ns.saturating_sub(span.start_ns) as f64 / 1e3,
            "args": args,
        }));
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

/// Writes `trace` to `path` and prints each stream's busy share of the run.
pub fn write(rt: &Runtime, trace: &Trace, path: &Path) -> Result<()> {
    let text = serde_json::to_string(&to_json(rt, trace))?;
    ir::text::write_atomically(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    let length = trace.length_ns().max(1);
    println!(
        "trace: {} spans over {:.3} ms, written to {}",
        trace.spans.len(),
        length as f64 / 1e6,
        path.display()
    );
    for (stream, busy) in trace.busy_per_stream() {
        println!(
            "  {:<16} busy {:.3} ms ({:.1}%), idle {:.1}%",
            stream_name(rt.plan(), stream),
            busy as f64 / 1e6,
            100.0 * busy as f64 / length as f64,
            100.0 - 100.0 * busy as f64 / length as f64
        );
    }
    Ok(())
}
