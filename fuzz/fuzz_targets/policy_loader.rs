//! libFuzzer target: the `policy_loader` property of `fuzz/properties.rs`.
#![no_main]

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::policy_loader(data));
