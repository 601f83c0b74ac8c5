//! `verbd mcp`: serve MCP on stdio for an agent runtime, or print a runtime's configuration
//! snippet (`--print-config`). The work is in `verbd::adapters::mcp`.
#![forbid(unsafe_code)]

use anyhow::Context;
use std::path::Path;
use std::process::ExitCode;
use verbd::adapters::mcp;

pub fn run(
    socket: &Path,
    socket_flag: Option<&Path>,
    print_config: Option<mcp::config::Client>,
) -> anyhow::Result<ExitCode> {
    if let Some(client) = print_config {
        let exe = std::env::current_exe().context("locating the verbd binary")?;
        verbd::print_lossy!("{}", mcp::config::snippet(client, &exe, socket_flag));
        return Ok(ExitCode::SUCCESS);
    }
    Ok(ExitCode::from(mcp::run(socket.to_path_buf())))
}
