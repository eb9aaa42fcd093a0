//! Fuzz target `rpc_answers`: see `ggplan_tests::fuzz::rpc_answers` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::rpc_answers(data));
