//! Fuzz target `capture`: see `ggplan_tests::fuzz::capture` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::capture(data));
