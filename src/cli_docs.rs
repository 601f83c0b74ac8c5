//! Shell completions and man pages generated from the command line definition itself, so they
//! never drift from it: `verbd completions bash|zsh|fish` prints a completion script and
//! `verbd man DIR` writes `verbd.1` and one page per subcommand (`verbd-policy-coverage.1`…).
//! Hidden (internal) subcommands get no page.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// Print the completion script of `shell` for `command`.
pub fn completions(mut command: clap::Command, shell: clap_complete::Shell, out: &mut dyn Write) {
    let name = command.get_name().to_string();
    clap_complete::generate(shell, &mut command, name, out);
}

/// Write the man pages of `command` and all its visible subcommands into `dir`.
pub fn man_pages(command: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut command = command;
    command.build();
    write_page(&command, command.get_name(), dir, &mut written)?;
    Ok(written)
}

fn write_page(
    command: &clap::Command,
    page: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    clap_mangen::Man::new(command.clone())
        .title(page.to_string())
        .render(&mut buffer)?;
    let path = dir.join(format!("{page}.1"));
    std::fs::write(&path, buffer)?;
    written.push(path);
    for sub in command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("{page}-{}", sub.get_name());
        write_page(sub, &name, dir, written)?;
    }
    Ok(())
}
