//! Plan values as a person reads them in a terminal: `Display` in words
//! (`weights arena`, `CUDA GPU 0`, `waits for events 1, 2`), never Rust's
//! debug forms (`Some(0)`, `Arena { arena: 0, .. }`). The plan file itself
//! keeps its RON names; these are for messages, `show`, `explain` and traces.

use super::{DeviceKind, Placement, StreamKind, Usage};
use crate::tensor::Role;
use std::fmt;

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Usage::Weights => "weights",
            Usage::State => "state",
            Usage::Io => "io",
            Usage::Compute => "compute",
        })
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Weight => "weight",
            Role::Input => "input",
            Role::State => "state",
            Role::Constant => "constant",
            Role::Intermediate => "intermediate",
            Role::Output => "output",
        })
    }
}

impl fmt::Display for StreamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StreamKind::Compute => "compute",
            StreamKind::Copy => "copy",
        })
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DeviceKind::Cpu => f.write_str("host CPU"),
            DeviceKind::CpuCores { group, groups } => {
                write!(f, "CPU core group {group} of {groups}")
            }
            DeviceKind::CpuNode { node } => write!(f, "CPU NUMA node {node}"),
            DeviceKind::Cuda { ordinal } => write!(f, "CUDA GPU {ordinal}"),
            DeviceKind::Remote { server } => write!(f, "RPC server {server}"),
        }
    }
}

/// Without the plan at hand, tensors and arenas are named by index; `explain`
/// names them (`cli/src/cmd_show.rs`).
impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Placement::Arena { arena, offset } => write!(f, "arena {arena} at byte {offset}"),
            Placement::View { of, offset } => write!(f, "a view of tensor {of} at +{offset}"),
            Placement::Fused => f.write_str("inside a fused kernel (no memory)"),
        }
    }
}

/// `event 3`, `events 1, 2`; `no event` for none.
pub fn events_in_words(events: &[u32]) -> String {
    let list: Vec<String> = events.iter().map(u32::to_string).collect();
    match events.len() {
        0 => "no event".to_string(),
        1 => format!("event {}", list[0]),
        _ => format!("events {}", list.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_words_not_debug_forms() {
        assert_eq!(Usage::Weights.to_string(), "weights");
        assert_eq!(Role::Intermediate.to_string(), "intermediate");
        assert_eq!(StreamKind::Copy.to_string(), "copy");
        let group = DeviceKind::CpuCores {
            group: 1,
            groups: 2,
        };
        assert_eq!(group.to_string(), "CPU core group 1 of 2");
        assert_eq!(DeviceKind::Cuda { ordinal: 0 }.to_string(), "CUDA GPU 0");
        let arena = Placement::Arena {
            arena: 2,
            offset: 64,
        };
        assert_eq!(arena.to_string(), "arena 2 at byte 64");
        assert_eq!(events_in_words(&[]), "no event");
        assert_eq!(events_in_words(&[4]), "event 4");
        assert_eq!(events_in_words(&[1, 2]), "events 1, 2");
    }
}
