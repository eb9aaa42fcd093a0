//! What a traced run records: one span per step, copy and event wait, per
//! stream, in nanoseconds since the run started. The CLI writes it as a
//! Chrome trace (`ggplan run --trace`).

/// What a span covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// A prepared step or copy (global index, as [`crate::Runtime::steps`]).
    Step(usize),
    /// Waiting on these events.
    Wait(Vec<u32>),
}

/// One interval on one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceSpan {
    /// The plan's stream index.
    pub stream: u32,
    /// What ran.
    pub kind: SpanKind,
    /// Start, ns since the run started.
    pub start_ns: u64,
    /// End, ns since the run started.
    pub end_ns: u64,
}

impl TraceSpan {
    pub(crate) fn step(stream: u32, step: usize, start_ns: u64, end_ns: u64) -> TraceSpan {
        TraceSpan {
            stream,
            kind: SpanKind::Step(step),
            start_ns,
            end_ns,
        }
    }

    pub(crate) fn wait(stream: u32, events: &[u32], start_ns: u64, end_ns: u64) -> TraceSpan {
        TraceSpan {
            stream,
            kind: SpanKind::Wait(events.to_vec()),
            start_ns,
            end_ns,
        }
    }
}

/// The spans of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// Every span, stream by stream.
    pub spans: Vec<TraceSpan>,
}

impl Trace {
    /// Per stream: (busy ns in steps, run length ns) — idle = run - busy.
    pub fn busy_per_stream(&self) -> Vec<(u32, u64)> {
        let mut out: std::collections::BTreeMap<u32, u64> = Default::default();
        for s in &self.spans {
            if let SpanKind::Step(_) = s.kind {
                *out.entry(s.stream).or_default() += s.end_ns.saturating_sub(s.start_ns);
            }
        }
        out.into_iter().collect()
    }

    /// The run's length: the latest span end.
    pub fn length_ns(&self) -> u64 {
        self.spans.iter().map(|s| s.end_ns).max().unwrap_or(0)
    }
}
