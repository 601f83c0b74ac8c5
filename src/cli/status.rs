//! `verbd status [--json | --prometheus] [--output FILE]`: the daemon's identity and, for callers
//! whose roles are all human, its counters (`verbd::status` says what and why). `--output`
//! writes the file atomically — a temporary file in the same directory, synced, then renamed over
//! the target — so node_exporter's textfile collector never reads half a file; when the daemon
//! does not answer, a `--prometheus` file still gets `verbd_up 0` (and the exit code says so).
#![forbid(unsafe_code)]

use super::{EXIT_DENIED, EXIT_ERROR, EXIT_UNAVAILABLE};
use anyhow::Context;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use verbd::protocol::{Request, Response};
use verbd::status::{Status, down_exposition, render_prometheus, render_text};

/// How the status is written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Prometheus,
}

/// `verbd status`.
pub fn run(socket: &Path, format: Format, output: Option<&Path>) -> anyhow::Result<ExitCode> {
    let response = verbd::client::request(socket, &Request::Status {}, Duration::from_secs(30));
    let status = match response {
        Ok(Response::Info { info }) => serde_json::from_value::<Status>(info)
            .context("the daemon's status answer has an unexpected shape")?,
        Ok(other) => {
            if format == Format::Prometheus
                && let Some(path) = output
            {
                write_atomically(path, &down_exposition())?;
            }
            eprintln!("verbd: status: unexpected answer {other:?}");
            return Ok(ExitCode::from(EXIT_ERROR));
        }
        Err(error) => {
            if format == Format::Prometheus
                && let Some(path) = output
            {
                write_atomically(path, &down_exposition())?;
            }
            eprintln!("verbd: {error}");
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        }
    };
    let text = match format {
        Format::Text => render_text(&status),
        Format::Json => serde_json::to_string_pretty(&status)? + "\n",
        Format::Prometheus => render_prometheus(&status),
    };
    match output {
        Some(path) => write_atomically(path, &text)?,
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    if format != Format::Text && status.metrics.is_none() {
        eprintln!(
            "verbd: status: the daemon shows its counters only to callers whose roles are all human; uid {} has roles {:?} (add a `kind = \"human\"` role for it, docs/fleet.md)",
            status.caller.uid, status.caller.roles
        );
        return Ok(ExitCode::from(EXIT_DENIED));
    }
    Ok(ExitCode::SUCCESS)
}

/// Write `text` to `path` so that a reader sees the old file or the new one, never a part.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let temporary = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(|| format!("writing {}", path.display()))
}
