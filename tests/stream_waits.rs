//! Why the plan's lifetimes stay in global order across streams: in every
//! multi-device example plan, each wait a stream does is for data it reads
//! (read after write). The checker's cross-stream write-after-read rule
//! would let the `sync` pass order a reuse of bytes that another stream
//! still reads by an extra wait; none of these plans needs one, so sharing
//! bytes between streams' lifetimes costs no stall. A change that makes a
//! stream wait only to reuse memory fails here, naming the plan and the wait.

use compiler::pipeline::{CompileOptions, compile};
use compiler::placement::PlacementOptions;
use compiler::target::Target;
use ggplan_tests::workspace_root;
use ir::plan::{Plan, Step};

fn compile_example(graph: &str, target: &str, placement: PlacementOptions, micro: u32) -> Plan {
    let path = workspace_root().join(format!("examples/graphs/{graph}.ron"));
    let graph = ir::text::read_graph(&path).unwrap();
    let options = CompileOptions {
        placement,
        micro_batches: micro,
        tensor_split: None,
        ..CompileOptions::default()
    };
    compile(&graph, &Target::preset(target).unwrap(), &options)
        .unwrap()
        .plan
}

/// The owners of the tensors a step reads, and the owners it writes.
fn step_io(p: &Plan, step: &Step) -> (Vec<u32>, Vec<u32>) {
    let (srcs, dsts) = match step {
        Step::Op { srcs, dst, .. } => (srcs.clone(), vec![*dst]),
        Step::MulMatAdd { srcs, dst, .. } | Step::MulMatGlu { srcs, dst, .. } => {
            (srcs.to_vec(), vec![*dst])
        }
        Step::MulMatMany { srcs, dsts } | Step::RopeStore { srcs, dsts, .. } => {
            (srcs.clone(), dsts.clone())
        }
        Step::Attention { srcs, dst, .. } => (srcs.clone(), vec![*dst]),
        Step::Fused { kernel } => {
            let k = &p.kernels[*kernel as usize];
            (k.inputs.clone(), vec![k.output])
        }
    };
    let owners = |ts: &[u32]| ts.iter().map(|&t| p.owner(t)).collect();
    (owners(&srcs), owners(&dsts))
}

/// The owners written by whatever records `event`.
fn written_by(p: &Plan, event: u32) -> Vec<u32> {
    for split in &p.splits {
        if let Some(c) = split.copies.iter().find(|c| c.record == Some(event)) {
            return vec![p.owner(c.dst)];
        }
        if let Some(r) = split.records.iter().find(|r| r.event == event) {
            return step_io(p, &split.steps[r.after as usize]).1;
        }
    }
    panic!("event {event} is never recorded");
}

/// Waits that are not for data the waiter reads: (split, what, event).
fn waits_not_for_data(p: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for (s, split) in p.splits.iter().enumerate() {
        for w in &split.waits {
            let (reads, _) = step_io(p, &split.steps[w.before as usize]);
            if !written_by(p, w.event).iter().any(|t| reads.contains(t)) {
                out.push(format!(
                    "split {s} step {} waits on event {}",
                    w.before, w.event
                ));
            }
        }
        for (c, copy) in split.copies.iter().enumerate() {
            for &e in &copy.wait {
                if !written_by(p, e).contains(&p.owner(copy.src)) {
                    out.push(format!("split {s} copy {c} waits on event {e}"));
                }
            }
        }
    }
    out
}

#[test]
fn every_wait_in_the_multi_device_examples_is_for_data() {
    // Given shares: the cost policy alone would keep one device.
    let layer = |devices: usize| PlacementOptions {
        layer_split: Some(vec![1.0; devices]),
        ..PlacementOptions::default()
    };
    let offload = || PlacementOptions {
        offload_layers: Some(1),
        ..PlacementOptions::default()
    };
    let mut plans = Vec::new();
    for micro in [1, 2, 4, 8] {
        let p = compile_example("llama2l_kv", "cpu0+cpu1", layer(2), micro);
        plans.push((format!("llama2l_kv cpu0+cpu1 --pipeline {micro}"), p));
    }
    for graph in ["llama2l", "bert2l"] {
        let p = compile_example(graph, "cpu+cuda0", offload(), 1);
        plans.push((format!("{graph} cpu+cuda0 --offload-layers 1"), p));
        let p = compile_example(graph, "cpu0+cpu1+cpu2+cpu3", layer(4), 1);
        plans.push((format!("{graph} cpu0+cpu1+cpu2+cpu3 layer split"), p));
    }
    let mut waits = 0;
    for (what, p) in &plans {
        assert!(p.n_events > 0, "{what}: a multi-device plan with no events");
        waits += p.splits.iter().map(|s| s.waits.len()).sum::<usize>();
        let extra = waits_not_for_data(p);
        assert!(extra.is_empty(), "{what}: {extra:?}");
    }
    assert!(
        waits >= plans.len(),
        "every plan has step waits to classify"
    );

    // The classifier sees a wait that is not for data: step 0 of the last
    // split waiting on an event it does not read.
    let (what, mut p) = plans.remove(0);
    let last = p.splits.len() - 1;
    let (reads, _) = step_io(&p, &p.splits[last].steps[0]);
    let unrelated = (0..p.n_events)
        .find(|&e| !written_by(&p, e).iter().any(|t| reads.contains(t)))
        .expect("an event step 0 does not read");
    p.splits[last].waits.insert(
        0,
        ir::plan::Wait {
            before: 0,
            event: unrelated,
        },
    );
    assert_eq!(waits_not_for_data(&p).len(), 1, "{what}");
}
