//! Hand-made plans for the checker tests, built as `Plan` structs, and the
//! helpers that build them.

// The collective and shard families' suite, over `tensor_parallel_plan`.
#[path = "collective.rs"]
mod collective;

use compiler::Target;
use ir::plan::{
    Arena, BinaryFn, Copy, DeviceId, DeviceStats, Expr, FusedKernel, LinkStats,
    PLAN_FORMAT_VERSION, Placement, Plan, PlanDevice, PlanStream, PlanTensor, Record, Split, Stats,
    Step, StreamKind, UnaryFn, Usage, Wait,
};
use ir::{DType, Op, Role, WeightShard};

pub const CPU: DeviceId = DeviceId(0);
/// In `cpu+cuda0` (the preset's device order), cuda0 is d0 and the cpu d1.
pub const GPU2: DeviceId = DeviceId(0);
/// The cpu of `cpu+cuda0`.
pub const CPU2: DeviceId = DeviceId(1);
/// Core group 0 of `cpu0+cpu1`.
pub const CORES0: DeviceId = DeviceId(0);
/// Core group 1 of `cpu0+cpu1`.
pub const CORES1: DeviceId = DeviceId(1);

pub fn cpu_cuda() -> Target {
    Target::preset("cpu+cuda0").expect("preset")
}

/// The plan devices of a preset target.
pub fn devices(target: &str) -> Vec<PlanDevice> {
    let t = Target::preset(target).expect("preset");
    let dev = |d: &compiler::Device| PlanDevice {
        name: d.name.clone(),
        kind: d.kind,
        memory_bytes: d.memory_bytes,
        alignment: d.alignment,
        max_buffer_bytes: d.max_buffer_bytes,
    };
    t.devices.iter().map(dev).collect()
}

/// A packed tensor, placed in `arena` at `offset`.
pub fn at(
    name: &str,
    dtype: DType,
    ne: [i64; 4],
    role: Role,
    dev: DeviceId,
    arena: u32,
    offset: u64,
) -> PlanTensor {
    let (bb, row) = (
        dtype.block_bytes(),
        ne[0] as u64 / dtype.block_elems() * dtype.block_bytes(),
    );
    let nb = [bb, row, row * ne[1] as u64, row * (ne[1] * ne[2]) as u64];
    let placement = Placement::Arena { arena, offset };
    let reason = "hand-made".to_string();
    let (name, copy_of, init) = (name.to_string(), None, None);
    PlanTensor {
        name,
        dtype,
        ne,
        nb,
        role,
        device: dev,
        placement,
        copy_of,
        init,
        shard: None,
        part: None,
        reason,
    }
}

/// An f32 [16, 4] tensor on the cpu of a one-device plan.
pub fn f32x(name: &str, role: Role, arena: u32, offset: u64) -> PlanTensor {
    at(name, DType::F32, [16, 4, 1, 1], role, CPU, arena, offset)
}

pub fn with(mut t: PlanTensor, placement: Placement) -> PlanTensor {
    t.placement = placement;
    t
}

pub fn copy_of(mut t: PlanTensor, of: u32) -> PlanTensor {
    t.copy_of = Some(of);
    t
}

pub fn op(op: Op, dst: u32, srcs: &[u32]) -> Step {
    Step::Op {
        op,
        dst,
        srcs: srcs.to_vec(),
    }
}

/// A split on `device`'s compute stream (no events: [`plan`] adds them).
pub fn split(device: DeviceId, copies: Vec<Copy>, steps: Vec<Step>) -> Split {
    Split {
        device,
        stream: 2 * device.0,
        copies,
        waits: vec![],
        records: vec![],
        steps,
    }
}

/// A copy on the copy stream of its destination `to`.
pub fn copy(src: u32, dst: u32, bytes: u64, to: DeviceId) -> Copy {
    Copy {
        src,
        dst,
        bytes,
        stream: 2 * to.0 + 1,
        wait: vec![],
        record: None,
    }
}

pub fn scale(scale: f32) -> Op {
    Op::Scale { scale, bias: 0.0 }
}

/// A plan; stats are filled from `splits`, links and per-device compute bytes;
/// two streams per device (compute `2d`, copy `2d + 1`), no events yet
/// ([`resync`] adds them).
pub fn plan(
    devices: Vec<PlanDevice>,
    n_graph: u32,
    tensors: Vec<PlanTensor>,
    arenas: &[(DeviceId, Usage, u64)],
    splits: Vec<Split>,
) -> Plan {
    let arenas: Vec<Arena> = arenas
        .iter()
        .map(|&(device, usage, size)| Arena {
            device,
            usage,
            size,
        })
        .collect();
    let compute = arenas.iter().filter(|a| a.usage == Usage::Compute);
    let stats = |a: &Arena| DeviceStats {
        device: a.device,
        compute_bytes: a.size,
        compute_lower_bound: a.size / 2,
        resident_bytes: 0,
        algorithm: "greedy_by_size".to_string(),
    };
    let stats = Stats {
        devices: compute.map(stats).collect(),
        n_splits: splits.len() as u32,
        links: vec![],
        fused_nodes: 0,
        estimated_us: 1.0,
        split_us: vec![1.0 / splits.len().max(1) as f64; splits.len()],
    };
    let streams = (0..devices.len() as u32)
        .flat_map(|d| {
            [StreamKind::Compute, StreamKind::Copy].map(|kind| PlanStream {
                device: DeviceId(d),
                kind,
            })
        })
        .collect();
    Plan {
        format_version: PLAN_FORMAT_VERSION,
        compiler_version: "0.1.0".to_string(),
        graph_name: "hand".to_string(),
        graph_hash: "0000000000000000".to_string(),
        target_name: "hand".to_string(),
        options: vec![],
        devices,
        n_graph_tensors: n_graph,
        tensors,
        arenas,
        kernels: vec![],
        streams,
        n_events: 0,
        splits,
        stats,
    }
}

/// `p` with its events cleared and derived again by the compiler's `sync`
/// pass (after a test edited its copies or steps).
pub fn resync(mut p: Plan) -> Plan {
    for split in &mut p.splits {
        split.waits.clear();
        split.records.clear();
        for c in &mut split.copies {
            c.wait.clear();
            c.record = None;
        }
    }
    compiler::sync::insert_events(p)
}

/// One device, two tensors, one op: y = scale(x).
pub fn minimal_plan() -> Plan {
    let tensors = vec![f32x("x", Role::Input, 0, 0), f32x("y", Role::Output, 1, 0)];
    let arenas = [(CPU, Usage::Io, 256), (CPU, Usage::Compute, 256)];
    let steps = vec![op(scale(2.0), 1, &[0])];
    plan(
        devices("cpu"),
        2,
        tensors,
        &arenas,
        vec![split(CPU, vec![], steps)],
    )
}

/// One device: a = x * w, av = view(a), b = silu(av), y = b + a written in
/// place over a (a dies there). Compute arena: a and y at 0, b at 512.
pub fn chain_plan() -> Plan {
    let tensors = vec![
        f32x("x", Role::Input, 0, 0),
        at("w", DType::F32, [16, 1, 1, 1], Role::Weight, CPU, 1, 0),
        f32x("a", Role::Intermediate, 2, 0),
        with(
            f32x("av", Role::Intermediate, 0, 0),
            Placement::View { of: 2, offset: 0 },
        ),
        f32x("b", Role::Intermediate, 2, 512),
        f32x("y", Role::Output, 2, 0),
    ];
    let arenas = [
        (CPU, Usage::Io, 256),
        (CPU, Usage::Weights, 64),
        (CPU, Usage::Compute, 1024),
    ];
    let steps = vec![
        op(Op::Mul, 2, &[0, 1]),
        op(Op::Silu, 4, &[3]),
        op(Op::Add, 5, &[4, 2]),
    ];
    plan(
        devices("cpu"),
        6,
        tensors,
        &arenas,
        vec![split(CPU, vec![], steps)],
    )
}

/// `cpu+cuda0`: h = relu(x) on cpu; copy h to cuda0; y = mul_mat(w q4_0,
/// h@cuda0) on cuda0; yv = view(y); copy y to cpu, where yv is re-created
/// over the copy; z = scale(yv@cpu) in place over y@cpu.
pub fn two_device_plan() -> Plan {
    let x4 = |name, role, dev, arena, offset| {
        at(name, DType::F32, [32, 4, 1, 1], role, dev, arena, offset)
    };
    let y4 = |name, role, dev, arena, offset| {
        at(name, DType::F32, [8, 4, 1, 1], role, dev, arena, offset)
    };
    let yv = y4("yv", Role::Intermediate, GPU2, 0, 0);
    let yv_cpu = copy_of(y4("yv@cpu", Role::Intermediate, CPU2, 0, 0), 5);
    let tensors = vec![
        x4("x", Role::Input, CPU2, 0, 0),
        at("w", DType::Q4_0, [32, 8, 1, 1], Role::Weight, GPU2, 1, 0),
        x4("h", Role::Intermediate, CPU2, 2, 0),
        y4("y", Role::Intermediate, GPU2, 3, 512),
        y4("z", Role::Output, CPU2, 2, 0),
        with(yv, Placement::View { of: 3, offset: 0 }),
        copy_of(x4("h@cuda0", Role::Intermediate, GPU2, 3, 0), 2),
        copy_of(y4("y@cpu", Role::Intermediate, CPU2, 2, 0), 3),
        with(yv_cpu, Placement::View { of: 7, offset: 0 }),
    ];
    let arenas = [
        (CPU2, Usage::Io, 512),
        (GPU2, Usage::Weights, 256),
        (CPU2, Usage::Compute, 512),
        (GPU2, Usage::Compute, 768),
    ];
    let splits = vec![
        split(CPU2, vec![], vec![op(Op::Relu, 2, &[0])]),
        split(
            GPU2,
            vec![copy(2, 6, 512, GPU2)],
            vec![op(Op::MulMat, 3, &[1, 6])],
        ),
        split(
            CPU2,
            vec![copy(3, 7, 128, CPU2)],
            vec![op(scale(0.5), 4, &[8])],
        ),
    ];
    let mut p = plan(devices("cpu+cuda0"), 6, tensors, &arenas, splits);
    let link = |from, to, bytes| LinkStats {
        from,
        to,
        copies: 1,
        bytes,
    };
    p.stats.links = vec![link(CPU2, GPU2, 512), link(GPU2, CPU2, 128)];
    resync(p)
}

/// One device, one fused kernel: y = silu(rms_norm(x) * w); n and m take no memory.
pub fn fused_plan() -> Plan {
    let tensors = vec![
        f32x("x", Role::Input, 0, 0),
        at("w", DType::F32, [16, 1, 1, 1], Role::Weight, CPU, 1, 0),
        with(f32x("n", Role::Intermediate, 0, 0), Placement::Fused),
        with(f32x("m", Role::Intermediate, 0, 0), Placement::Fused),
        f32x("y", Role::Output, 2, 0),
    ];
    let arenas = [
        (CPU, Usage::Io, 256),
        (CPU, Usage::Weights, 64),
        (CPU, Usage::Compute, 256),
    ];
    let steps = vec![Step::Fused { kernel: 0 }];
    let mut p = plan(
        devices("cpu"),
        5,
        tensors,
        &arenas,
        vec![split(CPU, vec![], steps)],
    );
    let body = vec![
        Expr::RmsNorm {
            input: 0,
            eps: 1e-5,
        },
        Expr::Input(1),
        Expr::Binary(BinaryFn::Mul, 0, 1),
        Expr::Unary(UnaryFn::Silu, 2),
    ];
    p.kernels = vec![FusedKernel {
        inputs: vec![0, 1],
        output: 4,
        nodes: vec![2, 3, 4],
        body,
    }];
    p
}

/// `t` as the slice of stored tensor `of` (extents `full_ne`) that starts at
/// `start` along `axis`.
pub fn shard(mut t: PlanTensor, of: &str, full_ne: [i64; 4], axis: u8, start: i64) -> PlanTensor {
    t.shard = Some(WeightShard {
        of: of.to_string(),
        full_ne,
        axis,
        start,
    });
    t
}

/// The collective group of [`tensor_parallel_plan`].
pub const TP_GROUP: u32 = 1;

/// An `all_reduce_sum` participant of [`TP_GROUP`] over two ranks.
pub fn all_reduce(rank: u32) -> Op {
    Op::AllReduceSum {
        group: TP_GROUP,
        rank,
        ranks: 2,
    }
}

/// `cpu0+cpu1` (two core groups), a feed-forward block split Megatron-style:
/// `y = down · silu(up · x)`, `up` [16, 32] cut along axis 1 (each core group
/// computes 16 of the 32 hidden features) and `down` [32, 16] along axis 0
/// (each group's product is a partial sum of `y`), then a 2-rank
/// `all_reduce_sum` on each group gives `y` (group 0, the output) and `y#1`
/// (group 1, the mirrored copy).
///
/// | t | tensor | device | bytes |
/// |---|--------|--------|-------|
/// | 0 | x (input) [16, 4] | cpu0 | io 0 |
/// | 1, 2 | up#0, up#1 [16, 16]: slices 0.., 16.. of 'ffn_up' | cpu0, cpu1 | weights 0 |
/// | 3, 4 | down#0, down#1 [16, 16]: slices 0.., 16.. of 'ffn_down' | cpu0, cpu1 | weights 1024 |
/// | 5, 6 | h#r = mul_mat(up#r, x) | cpu0, cpu1 | compute 0 |
/// | 7, 8 | g#r = silu(h#r) | cpu0, cpu1 | compute 256 |
/// | 9, 10 | p#r = mul_mat(down#r, g#r), the parts | cpu0, cpu1 | compute 512 |
/// | 11, 12 | y, y#1 = all_reduce_sum(p#0, p#1) ranks 0, 1 | cpu0, cpu1 | compute 768 |
/// | 13 | x@cpu1 (copy of x) | cpu1 | compute 1024 |
///
/// Splits: 0 (cpu0) h#0, g#0, p#0, records e0; 1 (cpu1) copies x (records
/// e1), h#1 (waits e1), g#1, p#1 (records e2), y#1 (waits e0: it reads p#0 in
/// place on cpu0); 2 (cpu0) y (waits e2: it reads p#1 in place on cpu1). The
/// events are stated here, not derived by the compiler's `sync`.
pub fn tensor_parallel_plan() -> Plan {
    let (d0, d1) = (CORES0, CORES1);
    let act = |name, role, dev, arena, offset| {
        at(name, DType::F32, [16, 4, 1, 1], role, dev, arena, offset)
    };
    let mat = |name, dev, offset| {
        at(
            name,
            DType::F32,
            [16, 16, 1, 1],
            Role::Weight,
            dev,
            if dev == d0 { 1 } else { 2 },
            offset,
        )
    };
    let up = |name, dev, start| shard(mat(name, dev, 0), "ffn_up", [16, 32, 1, 1], 1, start);
    let down = |name, dev, start| shard(mat(name, dev, 1024), "ffn_down", [32, 16, 1, 1], 0, start);
    let tensors = vec![
        act("x", Role::Input, d0, 0, 0),
        up("up#0", d0, 0),
        up("up#1", d1, 16),
        down("down#0", d0, 0),
        down("down#1", d1, 16),
        act("h#0", Role::Intermediate, d0, 3, 0),
        act("h#1", Role::Intermediate, d1, 4, 0),
        act("g#0", Role::Intermediate, d0, 3, 256),
        act("g#1", Role::Intermediate, d1, 4, 256),
        act("p#0", Role::Intermediate, d0, 3, 512),
        act("p#1", Role::Intermediate, d1, 4, 512),
        act("y", Role::Output, d0, 3, 768),
        act("y#1", Role::Intermediate, d1, 4, 768),
        copy_of(act("x@cpu1", Role::Intermediate, d1, 4, 1024), 0),
    ];
    let arenas = [
        (d0, Usage::Io, 256),
        (d0, Usage::Weights, 2048),
        (d1, Usage::Weights, 2048),
        (d0, Usage::Compute, 1024),
        (d1, Usage::Compute, 1280),
    ];
    let mut x_copy = copy(0, 13, 256, d1);
    x_copy.record = Some(1);
    let mut s0 = split(
        d0,
        vec![],
        vec![
            op(Op::MulMat, 5, &[1, 0]),
            op(Op::Silu, 7, &[5]),
            op(Op::MulMat, 9, &[3, 7]),
        ],
    );
    s0.records = vec![Record { after: 2, event: 0 }];
    let mut s1 = split(
        d1,
        vec![x_copy],
        vec![
            op(Op::MulMat, 6, &[2, 13]),
            op(Op::Silu, 8, &[6]),
            op(Op::MulMat, 10, &[4, 8]),
            op(all_reduce(1), 12, &[9, 10]),
        ],
    );
    s1.waits = vec![
        Wait {
            before: 0,
            event: 1,
        },
        Wait {
            before: 3,
            event: 0,
        },
    ];
    s1.records = vec![Record { after: 2, event: 2 }];
    let mut s2 = split(d0, vec![], vec![op(all_reduce(0), 11, &[9, 10])]);
    s2.waits = vec![Wait {
        before: 0,
        event: 2,
    }];
    let mut p = plan(devices("cpu0+cpu1"), 13, tensors, &arenas, vec![s0, s1, s2]);
    p.stats.links = vec![LinkStats {
        from: d0,
        to: d1,
        copies: 1,
        bytes: 256,
    }];
    p.n_events = 3;
    p
}

/// Adds `t` to `p` as graph tensor `n_graph_tensors` (the copies after it
/// move up by one, and every index of them with them); returns its index.
pub fn add_graph_tensor(p: &mut Plan, t: PlanTensor) -> u32 {
    let at = p.n_graph_tensors;
    let shift = |i: &mut u32| {
        if *i >= at {
            *i += 1;
        }
    };
    p.tensors.insert(at as usize, t);
    p.n_graph_tensors += 1;
    for t in &mut p.tensors {
        if let Some(of) = &mut t.copy_of {
            shift(of);
        }
        if let Placement::View { of, .. } = &mut t.placement {
            shift(of);
        }
    }
    for s in &mut p.splits {
        for c in &mut s.copies {
            shift(&mut c.src);
            shift(&mut c.dst);
        }
        for step in &mut s.steps {
            if let Step::Op { dst, srcs, .. } = step {
                shift(dst);
                srcs.iter_mut().for_each(shift);
            }
        }
    }
    for k in &mut p.kernels {
        k.inputs.iter_mut().for_each(shift);
        k.nodes.iter_mut().for_each(shift);
        shift(&mut k.output);
    }
    at
}

/// Grows arena `arena` of `p` by `bytes` (and its device's compute stats
/// when it is a compute arena).
pub fn grow_arena(p: &mut Plan, arena: usize, bytes: u64) {
    let a = &mut p.arenas[arena];
    a.size += bytes;
    if a.usage == Usage::Compute {
        let device = a.device;
        for d in p.stats.devices.iter_mut().filter(|d| d.device == device) {
            d.compute_bytes += bytes;
        }
    }
}
