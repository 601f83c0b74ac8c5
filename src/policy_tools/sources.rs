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
    #[error("{0}: not a regular file or a directory")]
    NotRegular(String),
}

/// The most bytes read from one file; the rest of a larger file is skipped, and said so.
pub const MAX_FILE_BYTES: u64 = 32 << 20;
/// The most bytes read from all files together; files past it are skipped, and said so.
pub const MAX_TOTAL_BYTES: u64 = 256 << 20;
/// A longer line is skipped (a command is never this long; a flood of bytes often is).
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// How deep a directory walk goes, and how many files it lists at most.
const MAX_DEPTH: usize = 32;
const MAX_FILES: usize = 100_000;

/// The files to read, and what the walk left out with why.
#[derive(Debug, Default)]
pub struct Inputs {
    pub files: Vec<PathBuf>,
    pub skipped: Vec<String>,
}

/// Expand the `--from` arguments: files, directories (every `*.jsonl`, `*.json`, `*.txt`,
/// `*.log` and `*.history` file below, sorted) and globs with `*`/`?` in any component.
///
/// The names in a transcript directory are the agent's: below an argument, and for every name
/// a glob matched, no symbolic link is followed and only regular files and directories are
/// taken (a link to `/dev/zero`, a FIFO, a device or `x -> .` loops are skipped and named); a
/// directory is entered once (by device and inode) and at most 32 deep. A literal
/// argument is the operator's own: a link there is followed, to a regular file or directory.
pub fn expand_inputs(inputs: &[PathBuf]) -> Result<Inputs, SourceError> {
    let mut walk = Walk::default();
    for input in inputs {
        let text = input.to_string_lossy();
        if text.contains(['*', '?']) {
            let matched = glob(&text);
            if matched.is_empty() {
                return Err(SourceError::NoMatch(text.into_owned()));
            }
            for m in matched {
                walk.entry(&m, 0)?;
            }
        } else {
            let io = |error| SourceError::Io {
                path: input.display().to_string(),
                error,
            };
            let meta = std::fs::metadata(input).map_err(io)?;
            if meta.is_dir() {
                walk.directory(input, &meta, 0)?;
            } else if meta.is_file() {
                // Read by its resolved name: files are opened without following a link.
                walk.out
                    .files
                    .push(std::fs::canonicalize(input).map_err(io)?);
            } else {
                return Err(SourceError::NotRegular(input.display().to_string()));
            }
        }
    }
    Ok(walk.out)
}

#[derive(Default)]
struct Walk {
    out: Inputs,
    entered: std::collections::HashSet<(u64, u64)>,
}

impl Walk {
    /// A name the agent may have chosen: taken as it is, never followed.
    fn entry(&mut self, path: &Path, depth: usize) -> Result<(), SourceError> {
        use std::os::unix::fs::FileTypeExt;
        let meta = std::fs::symlink_metadata(path).map_err(|error| SourceError::Io {
            path: path.display().to_string(),
            error,
        })?;
        let kind = meta.file_type();
        let skip = |why: &str| format!("{}: skipped, {why}", path.display());
        if kind.is_symlink() {
            self.out
                .skipped
                .push(skip("a symbolic link (never followed)"));
        } else if kind.is_dir() {
            self.directory(path, &meta, depth)?;
        } else if kind.is_file() {
            if self.out.files.len() >= MAX_FILES {
                self.out
                    .skipped
                    .push(skip(&format!("more than {MAX_FILES} files")));
            } else {
                self.out.files.push(path.to_path_buf());
            }
        } else {
            let what = if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "a device"
            };
            self.out
                .skipped
                .push(skip(&format!("not a regular file ({what})")));
        }
        Ok(())
    }

    fn directory(
        &mut self,
        path: &Path,
        meta: &std::fs::Metadata,
        depth: usize,
    ) -> Result<(), SourceError> {
        use std::os::unix::fs::MetadataExt;
        if !self.entered.insert((meta.dev(), meta.ino())) {
            self.out.skipped.push(format!(
                "{}: skipped, a directory already read",
                path.display()
            ));
            return Ok(());
        }
        if depth >= MAX_DEPTH {
            self.out.skipped.push(format!(
                "{}: skipped, deeper than {MAX_DEPTH} directories",
                path.display()
            ));
            return Ok(());
        }
        let mut children: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|error| SourceError::Io {
                path: path.display().to_string(),
                error,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        children.sort();
        for child in children {
            let is_dir = std::fs::symlink_metadata(&child).is_ok_and(|m| m.is_dir());
            let wanted = is_dir
                || child
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "jsonl" | "json" | "txt" | "log" | "history"))
                || std::fs::symlink_metadata(&child).is_ok_and(|m| m.file_type().is_symlink());
            if wanted {
                self.entry(&child, depth + 1)?;
            }
        }
        Ok(())
    }
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

/// Read every file and collect its commands, with what the walk skipped among the problems.
///
/// A file is opened without following a link and without blocking (a FIFO or device swapped in
/// after the walk is refused by its type, never waited on), and read up to [`MAX_FILE_BYTES`]
/// (whole lines; all files together up to [`MAX_TOTAL_BYTES`]); a line over [`MAX_LINE_BYTES`]
/// is skipped. Each cut is said.
pub fn read_files(inputs: &Inputs) -> Collected {
    let mut out = Collected {
        problems: inputs.skipped.clone(),
        ..Collected::default()
    };
    let mut total: u64 = 0;
    for file in &inputs.files {
        let left = MAX_TOTAL_BYTES.saturating_sub(total);
        if left == 0 {
            out.problems.push(format!(
                "{}: skipped, the files before it reached the {} MiB read in all",
                file.display(),
                MAX_TOTAL_BYTES >> 20
            ));
            continue;
        }
        out.files += 1;
        match read_capped(file, MAX_FILE_BYTES.min(left)) {
            Ok((bytes, size)) => {
                total += bytes.len() as u64;
                if size > bytes.len() as u64 {
                    out.problems.push(format!(
                        "{}: read the first {} MiB of {size} bytes; the rest skipped",
                        file.display(),
                        (bytes.len() as u64).div_ceil(1 << 20)
                    ));
                }
                let text = String::from_utf8_lossy(&bytes);
                read_text(&text, &file.display().to_string(), &mut out);
            }
            Err(e) => out.problems.push(format!("{}: {e}", file.display())),
        }
    }
    out
}

/// Up to `cap` bytes of `path` (cut after its last whole line when cut), and the file's size.
fn read_capped(path: &Path, cap: u64) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("skipped, not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(cap).read_to_end(&mut bytes)?;
    let size = meta.len().max(bytes.len() as u64);
    if size > bytes.len() as u64
        && let Some(end) = bytes.iter().rposition(|b| *b == b'\n')
    {
        bytes.truncate(end + 1);
    }
    Ok((bytes, size))
}

/// Collect the commands of one file's text.
pub fn read_text(text: &str, name: &str, out: &mut Collected) {
    for (index, line) in text.lines().enumerate() {
        let source = format!("{name}:{}", index + 1);
        if line.len() > MAX_LINE_BYTES {
            out.problems.push(format!(
                "{source}: skipped, a line of {} bytes (over {} MiB)",
                line.len(),
                MAX_LINE_BYTES >> 20
            ));
            continue;
        }
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
