//! Fuzz target `hf_folder`: see `ggplan_tests::fuzz::hf_folder` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::hf_folder(data));
