//! libFuzzer target: the `transcript_reader` property of `fuzz/properties.rs`.
#![no_main]

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::transcript_reader(data));
