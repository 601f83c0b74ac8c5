//! libFuzzer target: the `wire_request` property of `fuzz/properties.rs`.
#![no_main]

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::wire_request(data));
