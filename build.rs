//! Link flags of the `verbd` binary (the library and the tests are not affected).
//!
//! `-z pack-relative-relocs`: the binary is position-independent, so at every start the dynamic
//! loader patches each pointer in its read-only-after-relocation data (vtables, string slices in
//! static tables, panic locations) with the load address. Stored as RELA entries (24 bytes each)
//! that table was 3.3 MB in a debug build and most of the loader's work before `main`; packed as
//! RELR (a bitmap, glibc 2.36 and later) it is a few dozen kilobytes and the loop over it far
//! shorter (docs/PERFORMANCE.md, "CLI start"). Every `verbd call` and `verbd hook` pays that
//! start, and the daemon re-executes itself once for its spawner. The binary then needs glibc
//! 2.36 (Debian 12, Ubuntu 23.04), which every system with the systemd (>= 252) the package
//! depends on already has; an older glibc refuses to load it with a message naming
//! `GLIBC_ABI_DT_RELR`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
}
