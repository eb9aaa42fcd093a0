//! Fuzz target `differential`: see `ggplan_tests::fuzz::differential` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::differential(data));
