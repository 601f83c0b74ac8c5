//! Recorded agent commands, read from files in the formats agents leave behind, auto-detected
//! per line:
//!
//! - a plain shell command line;
//! - JSONL `{"command": "…"}` (a shell line) or `{"argv": ["…", …]}` (an exec argv, no shell);
//! - Claude Code transcript JSONL: `{"type":"assistant","message":{"content":[{"type":
//!   "tool_use","name":"Bash","input":{"command":"…"}}]}}` — every Bash `tool_use` is a command;
//! - Codex session ("rollout") JSONL: `{"type":"response_item","payload":{…}}` with a
//!   `function_call` named `shell` (`arguments` is a JSON string holding `command`: an argv),
//!   `shell_command` (`command`: a string) or `exec_command` (`cmd`: a string), or a
//!   `local_shell_call` whose `action.command` is an argv. Older rollouts put the payload at
//!   the top level. Codex runs its shell tool's argv directly and the model conventionally
//!   wraps a script as `["bash", "-lc", SCRIPT]`; that transport wrapper is unwrapped (and
//!   only that exact shape), the script then read as a shell line.
//!
//! JSON lines of other kinds (messages, tool results, metadata) are skipped and counted; a line
//! that starts with `{` but is not JSON is reported, never read as shell.
#![forbid(unsafe_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};

/// How a recorded command was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Text a shell would parse.
    Shell(String),
    /// An argv executed directly (no shell).
    Argv(Vec<String>),
}

impl Recorded {
    /// The command as one line for display.
    pub fn display(&self) -> String {
        match self {
            Recorded::Shell(s) => s.clone(),
            Recorded::Argv(a) => shell_words::join(a),
        }
    }
}

/// Which format a line was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Plain,
    Jsonl,
    ClaudeCode,
    Codex,
}

/// One recorded command and where it came from.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `file:line`
    pub source: String,
    pub format: Format,
    pub command: Recorded,
}

/// What was read.
#[derive(Debug, Default)]
pub struct Collected {
    pub entries: Vec<Entry>,
    /// JSON lines that carry no command (messages, results, metadata).
    pub skipped: usize,
    /// Lines or files that could not be read, with why.
    pub problems: Vec<String>,
    pub files: usize,
}

/// Why inputs could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{0}: matches no file")]
    NoMatch(String),
}

/// Expand the `--from` arguments: files, directories (every `*.jsonl`, `*.json`, `*.txt`,
/// `*.log` and `*.history` file below, sorted) and globs with `*`/`?` in any component.
pub fn expand_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, SourceError> {
    let mut files = Vec::new();
    for input in inputs {
        let text = input.to_string_lossy();
        if text.contains(['*', '?']) {
            let matched = glob(&text);
            if matched.is_empty() {
                return Err(SourceError::NoMatch(text.into_owned()));
            }
            for m in matched {
                collect(&m, &mut files)?;
            }
        } else {
            collect(input, &mut files)?;
        }
    }
    Ok(files)
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), SourceError> {
    let io = |error| SourceError::Io {
        path: path.display().to_string(),
        error,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        let mut children: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        children.sort();
        for child in children {
            let wanted = child.is_dir()
                || child
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "jsonl" | "json" | "txt" | "log" | "history"));
            if wanted {
                collect(&child, files)?;
            }
        }
    } else {
        files.push(path.to_path_buf());
    }
    Ok(())
}

/// Match a pattern with `*` and `?` (within one path component) against the file system.
fn glob(pattern: &str) -> Vec<PathBuf> {
    let absolute = pattern.starts_with('/');
    let mut current = vec![if absolute {
        PathBuf::from("/")
    } else {
        PathBuf::from(".")
    }];
    for component in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for base in &current {
            if component.contains(['*', '?']) {
                let Ok(read) = std::fs::read_dir(base) else {
                    continue;
                };
                let mut names: Vec<PathBuf> = read
                    .filter_map(|e| e.ok())
                    .filter(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        (!name.starts_with('.') || component.starts_with('.'))
                            && wildcard(component, &name)
                    })
                    .map(|e| e.path())
                    .collect();
                names.sort();
                next.extend(names);
            } else {
                let p = base.join(component);
                if p.exists() {
                    next.push(p);
                }
            }
        }
        current = next;
    }
    if !absolute {
        current = current
            .into_iter()
            .map(|p| p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p))
            .collect();
    }
    current
}

fn wildcard(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Read every file and collect its commands.
pub fn read_files(files: &[PathBuf]) -> Collected {
    let mut out = Collected::default();
    for file in files {
        out.files += 1;
        match std::fs::read(file) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                read_text(&text, &file.display().to_string(), &mut out);
            }
            Err(e) => out.problems.push(format!("{}: {e}", file.display())),
        }
    }
    out
}

/// Collect the commands of one file's text.
pub fn read_text(text: &str, name: &str, out: &mut Collected) {
    for (index, line) in text.lines().enumerate() {
        let source = format!("{name}:{}", index + 1);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if !trimmed.starts_with('{') {
            out.entries.push(Entry {
                source,
                format: Format::Plain,
                command: Recorded::Shell(trimmed.to_string()),
            });
            continue;
        }
        let value: Value = match serde_json::from_str(trimmed) {
            Ok(v) => v,
            Err(e) => {
                out.problems
                    .push(format!("{source}: starts with `{{` but is not JSON ({e})"));
                continue;
            }
        };
        let (format, commands) = commands_of(&value);
        if commands.is_empty() {
            out.skipped += 1;
        }
        for command in commands {
            out.entries.push(Entry {
                source: source.clone(),
                format,
                command,
            });
        }
    }
}

/// The commands one JSON line carries, and its format.
pub fn commands_of(value: &Value) -> (Format, Vec<Recorded>) {
    // Claude Code transcript: assistant messages with Bash tool_use blocks.
    if let Some(content) = value
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        && (value.get("type").and_then(Value::as_str).is_some() || value.get("sessionId").is_some())
    {
        let commands = content
            .iter()
            .filter(|b| {
                b.get("type").and_then(Value::as_str) == Some("tool_use")
                    && b.get("name").and_then(Value::as_str) == Some("Bash")
            })
            .filter_map(|b| b.get("input")?.get("command")?.as_str())
            .map(|c| Recorded::Shell(c.to_string()))
            .collect();
        return (Format::ClaudeCode, commands);
    }
    if value.get("type").and_then(Value::as_str).is_some() && value.get("message").is_some() {
        // A Claude Code line of another kind (user text, summary).
        return (Format::ClaudeCode, Vec::new());
    }
    // Codex rollout: wrapped in {"type":"response_item","payload":…} or bare.
    let item = match (
        value.get("type").and_then(Value::as_str),
        value.get("payload"),
    ) {
        (Some("response_item"), Some(payload)) => Some(payload),
        (Some(_), Some(_)) => return (Format::Codex, Vec::new()),
        (Some("function_call" | "local_shell_call"), None) => Some(value),
        _ => None,
    };
    if let Some(item) = item {
        return (Format::Codex, codex_item(item).into_iter().collect());
    }
    if let Some(command) = value.get("command").and_then(Value::as_str) {
        return (Format::Jsonl, vec![Recorded::Shell(command.to_string())]);
    }
    if let Some(argv) = value.get("argv").and_then(string_array) {
        return (Format::Jsonl, vec![Recorded::Argv(argv)]);
    }
    if let Some(argv) = value.get("command").and_then(string_array) {
        return (Format::Jsonl, vec![Recorded::Argv(argv)]);
    }
    (Format::Jsonl, Vec::new())
}

fn string_array(v: &Value) -> Option<Vec<String>> {
    let items = v.as_array()?;
    let out: Vec<String> = items
        .iter()
        .map(|x| x.as_str().map(str::to_string))
        .collect::<Option<_>>()?;
    (!out.is_empty()).then_some(out)
}

fn codex_item(item: &Value) -> Option<Recorded> {
    match item.get("type").and_then(Value::as_str)? {
        "function_call" => {
            let name = item.get("name").and_then(Value::as_str)?;
            let arguments = item.get("arguments")?;
            let arguments: Value = match arguments {
                Value::String(s) => serde_json::from_str(s).ok()?,
                other => other.clone(),
            };
            match name {
                "shell" | "container.exec" => {
                    let argv = arguments.get("command").and_then(string_array)?;
                    Some(unwrap_codex_shell(argv))
                }
                "shell_command" => Some(Recorded::Shell(
                    arguments.get("command")?.as_str()?.to_string(),
                )),
                "exec_command" => {
                    Some(Recorded::Shell(arguments.get("cmd")?.as_str()?.to_string()))
                }
                _ => None,
            }
        }
        "local_shell_call" => {
            let argv = item.get("action")?.get("command").and_then(string_array)?;
            Some(unwrap_codex_shell(argv))
        }
        _ => None,
    }
}

/// Codex's transport wrapper `["bash", "-lc", SCRIPT]` (or sh/zsh, -c/-lc): the script.
fn unwrap_codex_shell(argv: Vec<String>) -> Recorded {
    if let [shell, flag, script] = argv.as_slice() {
        let shell_name = shell.rsplit('/').next().unwrap_or(shell);
        if matches!(shell_name, "bash" | "sh" | "zsh") && matches!(flag.as_str(), "-lc" | "-c") {
            return Recorded::Shell(script.clone());
        }
    }
    Recorded::Argv(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_format() {
        let text = concat!(
            "sudo systemctl status nginx\n",
            "{\"command\": \"journalctl -u nginx -n 5\"}\n",
            "{\"argv\": [\"ss\", \"-tlnp\"]}\n",
            "{\"type\":\"assistant\",\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{\"command\":\"df -h\",\"description\":\"disk\"}}]}}\n",
            "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"ok\"}]}}\n",
            "{\"timestamp\":\"t\",\"type\":\"response_item\",\"payload\":{\"type\":\"function_call\",\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":[\\\"bash\\\",\\\"-lc\\\",\\\"free -m\\\"]}\",\"call_id\":\"c1\"}}\n",
            "{\"timestamp\":\"t\",\"type\":\"event_msg\",\"payload\":{\"type\":\"exec_command_begin\",\"command\":[\"bash\",\"-lc\",\"free -m\"]}}\n",
            "{not json\n",
        );
        let mut out = Collected::default();
        read_text(text, "f", &mut out);
        let got: Vec<(Format, String)> = out
            .entries
            .iter()
            .map(|e| (e.format, e.command.display()))
            .collect();
        assert_eq!(
            got,
            [
                (Format::Plain, "sudo systemctl status nginx".to_string()),
                (Format::Jsonl, "journalctl -u nginx -n 5".into()),
                (Format::Jsonl, "ss -tlnp".into()),
                (Format::ClaudeCode, "df -h".into()),
                (Format::Codex, "free -m".into()),
            ]
        );
        assert_eq!(out.skipped, 2);
        assert_eq!(out.problems.len(), 1);
    }

    #[test]
    fn codex_argv_without_the_wrapper_stays_an_argv() {
        assert_eq!(
            unwrap_codex_shell(vec!["sh".into(), "-c".into(), "id".into(), "x".into()]),
            Recorded::Argv(vec!["sh".into(), "-c".into(), "id".into(), "x".into()])
        );
        assert!(wildcard("*.jsonl", "a.jsonl"));
        assert!(!wildcard("*.jsonl", "a.json"));
    }
}
