//! Small hand-made plans for tests of what plan consumers (the reference
//! plan evaluator, the runtime) do with tensor parallelism, before a compiler
//! pass makes such plans: each is valid for the plan checker as written.

use ir::plan::{
    Arena, DeviceId, DeviceKind, DeviceStats, PLAN_FORMAT_VERSION, Placement, Plan, PlanDevice,
    PlanStream, PlanTensor, Record, Split, Stats, Step, StreamKind, Usage, Wait,
};
use ir::{DType, Layout, Op, Role, WeightShard};

/// Two devices (core groups `cpu0`, `cpu1`, or `cpu0` and `second` when it
/// is given) running one tensor-parallel layer without a single copy:
///
/// - weights `u` `[6, 3]` cut along axis 0 into `u.0` (cpu0) and `u.1`
///   (cpu1), `[3, 3]` each, and `v` `[4, 7]` cut along axis 1 into `v.0`
///   `[4, 3]` (cpu0) and `v.1` `[4, 4]` (cpu1);
/// - partial sums `p.r = sqr(u.r)` on each device;
/// - `r.r = all_reduce_sum(p.0, p.1)` (group 0) and
///   `g.r = all_gather(dim 1; v.0, v.1)` (group 1) on each device `r`, every
///   participant reading the other device's part in place; outputs `r.0`,
///   `r.1`, `g.0`, `g.1`.
///
/// So `r.r = sqr(u[0..3]) + sqr(u[3..6])` and `g.r = v`, on both devices.
/// Global order: split 0 (cpu0) `p.0`, recording event 0; split 1 (cpu1)
/// `p.1`, recording event 1, then (after waiting on event 0) `r.1`, `g.1`;
/// split 2 (cpu0), after waiting on event 1, `r.0`, `g.0`.
pub fn collective_pair(second: Option<DeviceKind>) -> Plan {
    let device = |name: &str, kind| PlanDevice {
        name: name.to_string(),
        kind,
        memory_bytes: 1 << 30,
        alignment: 64,
        max_buffer_bytes: 1 << 30,
    };
    let second = second.unwrap_or(DeviceKind::CpuCores {
        group: 1,
        groups: 2,
    });
    let second_name = match second {
        DeviceKind::Cuda { ordinal } => format!("cuda{ordinal}"),
        _ => "cpu1".to_string(),
    };
    let devices = vec![
        device(
            "cpu0",
            DeviceKind::CpuCores {
                group: 0,
                groups: 2,
            },
        ),
        device(&second_name, second),
    ];
    // Arenas: 0, 1 the weights of cpu0, cpu1; 2, 3 their compute arenas.
    let arenas = vec![
        arena(0, Usage::Weights, 128),
        arena(1, Usage::Weights, 128),
        arena(0, Usage::Compute, 256),
        arena(1, Usage::Compute, 256),
    ];
    let shard = |of: &str, full_ne, axis, start| WeightShard {
        of: of.to_string(),
        full_ne,
        axis,
        start,
    };
    let (u, v) = ([6, 3, 1, 1], [4, 7, 1, 1]);
    let tensors = vec![
        tensor(
            "u.0",
            [3, 3, 1, 1],
            Role::Weight,
            0,
            (0, 0),
            Some(shard("u", u, 0, 0)),
        ),
        tensor(
            "v.0",
            [4, 3, 1, 1],
            Role::Weight,
            0,
            (0, 64),
            Some(shard("v", v, 1, 0)),
        ),
        tensor(
            "u.1",
            [3, 3, 1, 1],
            Role::Weight,
            1,
            (1, 0),
            Some(shard("u", u, 0, 3)),
        ),
        tensor(
            "v.1",
            [4, 4, 1, 1],
            Role::Weight,
            1,
            (1, 64),
            Some(shard("v", v, 1, 3)),
        ),
        tensor("p.0", [3, 3, 1, 1], Role::Intermediate, 0, (2, 0), None),
        tensor("p.1", [3, 3, 1, 1], Role::Intermediate, 1, (3, 0), None),
        tensor("r.0", [3, 3, 1, 1], Role::Output, 0, (2, 64), None),
        tensor("r.1", [3, 3, 1, 1], Role::Output, 1, (3, 64), None),
        tensor("g.0", [4, 7, 1, 1], Role::Output, 0, (2, 128), None),
        tensor("g.1", [4, 7, 1, 1], Role::Output, 1, (3, 128), None),
    ];
    let reduce = |rank| Op::AllReduceSum {
        group: 0,
        rank,
        ranks: 2,
    };
    let gather = |rank| Op::AllGather {
        dim: 1,
        group: 1,
        rank,
        ranks: 2,
    };
    let op = |op, dst, srcs: &[u32]| Step::Op {
        op,
        dst,
        srcs: srcs.to_vec(),
    };
    let splits = vec![
        Split {
            device: DeviceId(0),
            stream: 0,
            copies: vec![],
            waits: vec![],
            records: vec![Record { after: 0, event: 0 }],
            steps: vec![op(Op::Sqr, 4, &[0])],
        },
        Split {
            device: DeviceId(1),
            stream: 1,
            copies: vec![],
            waits: vec![Wait {
                before: 1,
                event: 0,
            }],
            records: vec![Record { after: 0, event: 1 }],
            steps: vec![
                op(Op::Sqr, 5, &[2]),
                op(reduce(1), 7, &[4, 5]),
                op(gather(1), 9, &[1, 3]),
            ],
        },
        Split {
            device: DeviceId(0),
            stream: 0,
            copies: vec![],
            waits: vec![Wait {
                before: 0,
                event: 1,
            }],
            records: vec![],
            steps: vec![op(reduce(0), 6, &[4, 5]), op(gather(0), 8, &[1, 3])],
        },
    ];
    let device_stats = |d| DeviceStats {
        device: DeviceId(d),
        compute_bytes: 256,
        compute_lower_bound: 224,
        resident_bytes: 128,
        algorithm: "by hand".to_string(),
    };
    Plan {
        format_version: PLAN_FORMAT_VERSION,
        compiler_version: "test".to_string(),
        graph_name: "collective_pair".to_string(),
        graph_hash: "0000000000000000".to_string(),
        target_name: "cpu0+cpu1".to_string(),
        options: vec![],
        devices,
        n_graph_tensors: tensors.len() as u32,
        tensors,
        arenas,
        kernels: vec![],
        streams: (0..2)
            .map(|d| PlanStream {
                device: DeviceId(d),
                kind: StreamKind::Compute,
            })
            .collect(),
        n_events: 2,
        splits,
        stats: Stats {
            devices: vec![device_stats(0), device_stats(1)],
            n_splits: 3,
            links: vec![],
            fused_nodes: 0,
            estimated_us: 0.0,
            split_us: vec![0.0; 3],
        },
    }
}

fn arena(device: u32, usage: Usage, size: u64) -> Arena {
    Arena {
        device: DeviceId(device),
        usage,
        size,
    }
}

/// A packed F32 tensor of `ne` on `device` at (arena, offset).
fn tensor(
    name: &str,
    ne: [i64; 4],
    role: Role,
    device: u32,
    (arena, offset): (u32, u64),
    shard: Option<WeightShard>,
) -> PlanTensor {
    let layout = Layout::contiguous(DType::F32, ne).expect("valid extents");
    PlanTensor {
        name: name.to_string(),
        dtype: DType::F32,
        ne,
        nb: layout.nb,
        role,
        device: DeviceId(device),
        placement: Placement::Arena { arena, offset },
        copy_of: None,
        init: None,
        shard,
        part: None,
        reason: "by hand".to_string(),
    }
}
