//! Plans the facade's unit tests share.

use crate::Plan;

/// The example llama2l (2 blocks) on `cpu+cuda0` with its last block
/// offloaded: two splits, cpu then cuda0, the second copying from the first.
pub(crate) fn llama2l_offloaded() -> Plan {
    let graph = crate::graph::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/graphs/llama2l.ron"
    ))
    .expect("the example graph reads");
    let target = crate::target::resolve("cpu+cuda0").expect("a preset");
    let options = crate::CompileOptions {
        placement: crate::PlacementOptions {
            offload_layers: Some(1),
            ..Default::default()
        },
        ..Default::default()
    };
    crate::compile(&graph, &target, &options)
        .expect("llama2l compiles")
        .plan
}
