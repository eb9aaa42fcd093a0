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

    /// The ns during which streams `a` and `b` both ran a step or copy: the
    /// evidence that two streams really ran at the same time.
    pub fn overlap_ns(&self, a: u32, b: u32) -> u64 {
        let (a, b) = (self.busy_intervals(a), self.busy_intervals(b));
        let (mut i, mut j, mut both) = (0, 0, 0);
        while i < a.len() && j < b.len() {
            let (start, end) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
            both += end.saturating_sub(start);
            if a[i].1 < b[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        both
    }

    /// `stream`'s steps and copies as sorted, disjoint [start, end) intervals.
    fn busy_intervals(&self, stream: u32) -> Vec<(u64, u64)> {
        let mut spans: Vec<(u64, u64)> = (self.spans.iter())
            .filter(|s| s.stream == stream && matches!(s.kind, SpanKind::Step(_)))
            .map(|s| (s.start_ns, s.end_ns.max(s.start_ns)))
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(stream: u32, start_ns: u64, end_ns: u64) -> TraceSpan {
        TraceSpan::step(stream, 0, start_ns, end_ns)
    }

    #[test]
    fn overlap_counts_only_time_both_streams_ran_steps() {
        let mut t = Trace {
            spans: vec![
                span(0, 0, 10),
                span(0, 5, 20), // overlaps its own stream: merged to [0, 20)
                span(0, 30, 40),
                span(1, 15, 35), // meets [0, 20) for 5 and [30, 40) for 5
                span(1, 38, 50), // 2 more
                span(2, 0, 100),
            ],
        };
        assert_eq!(t.overlap_ns(0, 1), 12);
        assert_eq!(t.overlap_ns(1, 0), 12);
        assert_eq!(t.overlap_ns(0, 2), 30);
        assert_eq!(t.overlap_ns(0, 3), 0);
        // Waits are not work.
        t.spans.push(TraceSpan::wait(3, &[0], 0, 100));
        assert_eq!(t.overlap_ns(0, 3), 0);
    }
}
