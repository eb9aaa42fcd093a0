//! Fuzz target `npy`: see `ggplan_tests::fuzz::npy` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ggplan_tests::fuzz::npy(data));
