//! Fuzz target `gguf`: see `ggplan_tests::fuzz::gguf` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::gguf(data));
