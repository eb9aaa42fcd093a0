//! A tensor-parallel plan on two core groups (`kernels::testing::plans::
//! collective_pair`: weight shards on each device, an all-reduce and an
//! all-gather whose participants read the other device's part in place):
//! loaded, run on the executor, checked step by step and against the
//! reference plan evaluator, from random weights and from a file.

use super::support::TempGguf;
use crate::check::{check_outputs, check_steps};
use crate::{LoadOptions, Runtime, Weights};
use ir::{DType, Layout};
use kernels::testing::plans::collective_pair;
use std::collections::BTreeMap;
use std::sync::Arc;

fn load(weights: &Weights, options: &LoadOptions) -> Runtime {
    Runtime::load(Arc::new(collective_pair(None)), weights.clone(), options)
        .unwrap_or_else(|e| panic!("the fixture loads: {e}"))
}

fn bits(rt: &Runtime, name: &str) -> Vec<u32> {
    rt.output_f32(name)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// The f32 values of `u` and `v` as `weights` binds them unsplit.
fn sources(weights: &Weights) -> (Vec<f32>, Vec<f32>) {
    let values = |name: &str, ne| {
        let layout = Layout::contiguous(DType::F32, ne).unwrap();
        let bound = crate::weights::bind_weight(weights, name, &layout, None).unwrap();
        let bytes = match bound {
            crate::weights::BoundWeight::InPlace(b) => b.to_vec(),
            crate::weights::BoundWeight::Copy(b) => b.into_owned(),
        };
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<f32>>()
    };
    (values("u", [6, 3, 1, 1]), values("v", [4, 7, 1, 1]))
}

/// Runs the plan and checks every output: both participants of each
/// collective hold the same bits, which are the unsplit computation's.
fn run_and_check(weights: &Weights) {
    let mut rt = load(weights, &LoadOptions::default());
    assert!(
        rt.load_report().fallbacks.is_empty(),
        "{:?}",
        rt.load_report().fallbacks
    );
    rt.run().unwrap();
    let (u, v) = sources(weights);
    // r = sqr(u[0..3]) + sqr(u[3..6]) in f32, part 0 first.
    let want: Vec<u32> = (0..3)
        .flat_map(|row| (0..3).map(move |col| (row, col)))
        .map(|(row, col)| {
            let (a, b) = (u[row * 6 + col], u[row * 6 + 3 + col]);
            (a * a + b * b).to_bits()
        })
        .collect();
    assert_eq!(bits(&rt, "r.0"), want);
    assert_eq!(bits(&rt, "r.1"), want);
    let v_bits: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
    assert_eq!(bits(&rt, "g.0"), v_bits);
    assert_eq!(bits(&rt, "g.1"), v_bits);

    let outputs = check_outputs(&rt, weights, BTreeMap::new()).unwrap();
    assert_eq!(outputs.len(), 4);
    assert!(outputs.iter().all(|c| c.passed()), "{outputs:?}");

    // `--check`: every step in isolation on the inputs it read (parts on the
    // other device included); collectives are held to exact bits.
    let steps = check_steps(&mut rt, &mut |_| {}).unwrap();
    assert_eq!(steps.len(), 6);
    assert!(steps.iter().all(|c| c.passed()), "{steps:?}");
    let collectives: Vec<_> = steps
        .iter()
        .filter(|c| c.kind.starts_with("all_"))
        .collect();
    assert_eq!(collectives.len(), 4);
    assert!(
        collectives
            .iter()
            .all(|c| c.threshold == 0.0 && c.nmse == 0.0)
    );
    // The observed run computed what the executor's run did.
    assert_eq!(bits(&rt, "r.1"), want);
}

#[test]
fn collectives_read_the_other_devices_parts_in_place_random_weights() {
    run_and_check(&Weights::Random { seed: 3 });
}

#[test]
fn collectives_read_the_other_devices_parts_in_place_file_weights() {
    let layout = |ne| Layout::contiguous(DType::F32, ne).unwrap();
    let u = kernels::evaluate::random_leaf("stored u", &layout([6, 3, 1, 1]), 9, None);
    let v = kernels::evaluate::random_leaf("stored v", &layout([4, 7, 1, 1]), 9, None);
    let file = TempGguf::new(
        "collective_pair",
        &[
            ("u", DType::F32, [6, 3, 1, 1], &u),
            ("v", DType::F32, [4, 7, 1, 1], &v),
        ],
    );
    run_and_check(&Weights::open(&file.0).unwrap());
}

#[test]
fn delayed_streams_give_the_same_bits() {
    let weights = Weights::Random { seed: 4 };
    let mut first = load(&weights, &LoadOptions::default());
    first.run().unwrap();
    let names = ["r.0", "r.1", "g.0", "g.1"];
    let want: Vec<Vec<u32>> = names.iter().map(|n| bits(&first, n)).collect();
    for seed in 0..20 {
        let options = LoadOptions {
            fault_injection: Some(seed),
            ..LoadOptions::default()
        };
        let mut rt = load(&weights, &options);
        rt.run().unwrap();
        let got: Vec<Vec<u32>> = names.iter().map(|n| bits(&rt, n)).collect();
        assert_eq!(got, want, "fault injection seed {seed}");
        assert!(rt.injected_delays() > 0, "seed {seed}: no delay injected");
    }
}

/// Prepares every step of `plan` over scratch arenas (nothing runs), as
/// `Runtime::load` does after the plan checker, with a CPU device standing
/// in for each plan device (the refusals come from the plan's kinds).
fn prepare(plan: &ir::plan::Plan) -> Result<usize, crate::RuntimeError> {
    use crate::device::Device;
    use crate::device::cpu::{CpuDevice, FastKernels};
    let kernels = Arc::new(FastKernels::new(crate::Precision::Fast)?);
    let devices: Vec<Arc<dyn Device>> = (plan.devices.iter())
        .map(|d| Arc::new(CpuDevice::for_tests(&d.name, Arc::clone(&kernels))) as Arc<dyn Device>)
        .collect();
    let mut bases = Vec::new();
    for (i, a) in plan.arenas.iter().enumerate() {
        let device = &devices[a.device.index()];
        bases.push(device.alloc_arena(i, a.size, a.usage, false)?.unwrap());
    }
    let addr = crate::addresses::resolve(plan, &bases, &vec![None; plan.tensors.len()]);
    let ctx = crate::device::PrepareCtx { plan, addr: &addr };
    let steps = crate::steps::prepare_all(&ctx, &devices, None)?;
    Ok(steps.len())
}

#[test]
fn reads_across_devices_are_refused_unless_a_collective_reads_cpu_memory() {
    assert_eq!(prepare(&collective_pair(None)).unwrap(), 6);
    // The checker refuses both plans below at load; preparation re-checks.
    let cuda = collective_pair(Some(ir::plan::DeviceKind::Cuda { ordinal: 0 }));
    assert_eq!(
        prepare(&cuda).err().unwrap().to_string(),
        "step 2 ('r.1'): all_reduce_sum on device 'cuda0' reads 'p.0' on device 'cpu0': \
         collectives read parts in place only between CPU devices (one host's memory)"
    );
    let mut plan = collective_pair(None);
    let ir::plan::Step::Op { op, .. } = &mut plan.splits[2].steps[0] else {
        unreachable!("the fixture's r.0 is an op step")
    };
    *op = ir::Op::Add;
    assert_eq!(
        prepare(&plan).err().unwrap().to_string(),
        "step 4 ('r.0'): add on device 'cpu0' reads 'p.1' on device 'cpu1': \
         only collectives read tensors on other devices (others need a copy)"
    );
}

#[test]
fn collectives_read_in_place_between_any_cpu_kinds_and_nothing_else_does() {
    use ir::plan::DeviceKind::{Cpu, CpuCores, CpuNode, Cuda};
    use ir::plan::peer_read_refusal;
    let cpus = [
        Cpu,
        CpuCores {
            group: 1,
            groups: 2,
        },
        CpuNode { node: 1 },
    ];
    for a in cpus {
        for b in cpus {
            assert_eq!(peer_read_refusal(true, a, b), None, "{a:?} reads {b:?}");
            assert!(
                peer_read_refusal(false, a, b).is_some(),
                "{a:?} reads {b:?}"
            );
        }
        let gpu = Cuda { ordinal: 0 };
        assert!(peer_read_refusal(true, a, gpu).is_some());
        assert!(peer_read_refusal(true, gpu, a).is_some());
    }
}
