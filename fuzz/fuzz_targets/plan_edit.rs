//! Fuzz target `plan_edit`: see `ggplan_tests::fuzz::plan_edit` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::plan_edit(data));
