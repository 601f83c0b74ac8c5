//! The command line and the agents' adapters: surface, hooks, MCP, transparent verbs.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;

mod claude_hook;
mod cli_surface;
mod hook_e2e;
mod mcp;
mod transparent;
