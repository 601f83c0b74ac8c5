//! `verbd mcp --print-config CLIENT`: the configuration snippet that makes an agent runtime start
//! `verbd mcp` as a stdio MCP server named `verbd`.
//!
//! The server must be named `verbd`: tool names are sized for Claude Code's
//! `mcp__verbd__<tool>` (64 characters at most). The command is the absolute path of this
//! binary, so the runtime's `PATH` does not matter; `--socket` is added only when given.
#![forbid(unsafe_code)]

use super::catalog::MAX_WAIT_SECS;
use serde_json::json;
use std::path::Path;

/// The agent runtimes a snippet can be printed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// Claude Code: `.mcp.json` (project) or `claude mcp add-json verbd '…'`.
    Claude,
    /// Codex CLI: `~/.codex/config.toml`.
    Codex,
    /// Gemini CLI: `~/.gemini/settings.json` (or `.gemini/settings.json`).
    Gemini,
    /// Cursor: `~/.cursor/mcp.json` (or `.cursor/mcp.json`).
    Cursor,
}

/// Seconds a client should allow one tool call: the longest `verbd_wait` plus a margin.
pub const CLIENT_TOOL_TIMEOUT_SECS: u64 = MAX_WAIT_SECS + 10;

/// The snippet for `client`, ending with a newline.
pub fn snippet(client: Client, verbd_binary: &Path, socket: Option<&Path>) -> String {
    let command = verbd_binary.to_string_lossy().into_owned();
    let mut args = vec!["mcp".to_string()];
    if let Some(socket) = socket {
        args.push("--socket".into());
        args.push(socket.to_string_lossy().into_owned());
    }
    let json_text = |value: serde_json::Value| {
        let mut text = serde_json::to_string_pretty(&value).expect("values always serialize");
        text.push('\n');
        text
    };
    match client {
        Client::Claude => json_text(json!({
            "mcpServers": { "verbd": { "type": "stdio", "command": command, "args": args } }
        })),
        Client::Cursor => json_text(json!({
            "mcpServers": { "verbd": { "command": command, "args": args } }
        })),
        Client::Gemini => json_text(json!({
            "mcpServers": { "verbd": {
                "command": command,
                "args": args,
                "timeout": CLIENT_TOOL_TIMEOUT_SECS * 1000,
            } }
        })),
        Client::Codex => {
            let quoted: Vec<String> = args.iter().map(|a| toml_string(a)).collect();
            format!(
                "[mcp_servers.verbd]\n\
                 command = {command}\n\
                 args = [{args}]\n\
                 # verbd_wait blocks for up to {MAX_WAIT_SECS} s; give calls room to finish.\n\
                 tool_timeout_sec = {CLIENT_TOOL_TIMEOUT_SECS}\n\
                 # \"auto\" follows the tools' annotations: read-only and mutating verbs run without a\n\
                 # Codex prompt (verbd asks its own human for every verb that needs approval),\n\
                 # destructive verbs get a Codex prompt as well. \"approve\" drops Codex's prompt; verbd\n\
                 # still decides every call. Under approval_policy = \"never\" (codex exec), use \"approve\":\n\
                 # otherwise Codex fails every call its own policy would prompt for.\n\
                 default_tools_approval_mode = \"auto\"\n",
                command = toml_string(&command),
                args = quoted.join(", "),
            )
        }
    }
}

/// A TOML basic string (JSON string escaping is valid TOML for these characters).
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).expect("strings always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_parse_in_their_formats_and_start_verbd_mcp() {
        let bin = Path::new("/usr/local/bin/verbd");
        let socket = Path::new("/run/verbd/verbd.sock");
        for client in [Client::Claude, Client::Cursor, Client::Gemini] {
            let text = snippet(client, bin, Some(socket));
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            let server = &value["mcpServers"]["verbd"];
            assert_eq!(server["command"], "/usr/local/bin/verbd");
            assert_eq!(
                server["args"],
                json!(["mcp", "--socket", "/run/verbd/verbd.sock"])
            );
        }
        let codex: toml::Table = toml::from_str(&snippet(Client::Codex, bin, None)).unwrap();
        let server = &codex["mcp_servers"]["verbd"];
        assert_eq!(server["command"].as_str(), Some("/usr/local/bin/verbd"));
        assert_eq!(server["args"].as_array().unwrap().len(), 1);
        assert_eq!(
            server["tool_timeout_sec"].as_integer(),
            Some(CLIENT_TOOL_TIMEOUT_SECS as i64)
        );
        assert_eq!(server["default_tools_approval_mode"].as_str(), Some("auto"));
    }
}
