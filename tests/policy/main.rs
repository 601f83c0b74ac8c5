//! The policy tools, the fuzz properties, the package definition and the layering of src/.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;

mod builder;
mod fuzz_properties;
mod layering;
mod packaging;
mod policy_tools;
mod policy_tools_hostile;
