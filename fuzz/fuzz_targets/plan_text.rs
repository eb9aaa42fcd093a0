//! Fuzz target `plan_text`: see `ggplan_tests::fuzz::plan_text` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::plan_text(data));
