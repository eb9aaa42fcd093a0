//! Fuzz target `tokenizer`: see `ggplan_tests::fuzz::tokenizer` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::tokenizer(data));
