//! NUMA-node devices (`numa0`, `numa0+numa1`): a plan for node 0 runs on any
//! Linux host, with its arenas bound to the node's memory, and gives the
//! `cpu` plan's outputs; a node the host lacks is refused by name before
//! anything is allocated.

use compiler::pipeline::{CompileOptions, compile};
use compiler::target::Target;
use ggplan_tests::workspace_root;
use ir::plan::Plan;
use runtime::device::cpu::{CpuDevice, numa};
use runtime::memory::AlignedBuffer;
use runtime::{LoadOptions, Runtime, RuntimeError, Weights};
use std::sync::Arc;

fn plan(target: &str) -> Plan {
    let path = workspace_root().join("examples/graphs/llama2l.ron");
    let graph = ir::text::read_graph(&path).unwrap();
    let target = Target::preset(target).unwrap();
    compile(&graph, &target, &CompileOptions::default())
        .unwrap()
        .plan
}

fn load(plan: Plan) -> Result<Runtime, RuntimeError> {
    let options = LoadOptions {
        threads: 2,
        ..LoadOptions::default()
    };
    Runtime::load(Arc::new(plan), Weights::Random { seed: 5 }, &options)
}

fn logits(rt: &mut Runtime) -> Vec<f32> {
    let tokens: Vec<i32> = (0..128).map(|j| (j * 37 + 11) % 8000).collect();
    rt.set_input_i32("tokens", &tokens).unwrap();
    rt.run().unwrap();
    rt.output_f32("result_output").unwrap()
}

#[test]
fn a_node_0_plan_runs_bound_to_its_node_and_equals_the_cpu_plan() {
    let mut on_node = load(plan("numa0")).unwrap();
    assert_eq!(
        (on_node.devices()[0].as_any())
            .downcast_ref::<CpuDevice>()
            .and_then(|d| d.node()),
        Some(0)
    );
    let page = numa::page_size();
    let probe = AlignedBuffer::zeroed(page, page).unwrap();
    let binding_works = numa::bind(probe.as_ptr(), page, 0).is_ok();
    let unbound: Vec<&String> = on_node
        .load_report()
        .warnings
        .iter()
        .filter(|w| w.contains("not bound"))
        .collect();
    if binding_works {
        assert!(unbound.is_empty(), "{unbound:?}");
    } else {
        eprintln!("mbind is refused on this host; the plan ran unbound: {unbound:?}");
        assert_eq!(unbound.len(), 1, "one note per device");
    }
    let mut on_cpu = load(plan("cpu")).unwrap();
    // The same kernels on the same thread count: the same bits.
    assert_eq!(logits(&mut on_node), logits(&mut on_cpu));
}

#[test]
fn a_node_the_host_lacks_is_refused_by_name() {
    let mut p = plan("numa0");
    p.devices[0].kind = ir::plan::DeviceKind::CpuNode { node: 4000 };
    p.devices[0].name = "numa4000".to_string();
    let err = load(p).err().expect("refused").to_string();
    assert!(
        err.contains("numa4000") && err.contains("NUMA node 4000") && err.contains("numa0"),
        "{err}"
    );
}
