//! The embedded plan loads with no compilation and runs. (Its own test
//! binary: the count of compiler calls is per process, so nothing else here
//! may compile.)

use ggplan_example_embedded_plan::{greedy, load, tokens};

#[test]
fn the_embedded_plan_loads_with_no_compilation_and_runs() {
    let loaded = load(2).expect("the embedded plan loads");
    assert_eq!(loaded.plans_compiled, 0, "a plan was compiled at start-up");
    assert_eq!(
        ggplan::compiler_calls(),
        0,
        "the compiler ran in this process"
    );
    let mut runtime = loaded.runtime;
    assert_eq!(runtime.plan().graph_name, "llama2l");
    assert!(
        runtime.load_report().fallbacks.is_empty(),
        "{:?}",
        runtime.load_report().fallbacks
    );
    runtime
        .set_input_i32("tokens", &tokens())
        .expect("tokens set");
    runtime.run().expect("the plan runs");
    let logits = runtime.output_f32("result_output").expect("logits");
    assert_eq!(logits.len(), 8000 * 128);
    assert!(logits.iter().all(|v| v.is_finite()));
    assert_eq!(greedy(&logits, 8000).len(), 128);
}
