//! The files a program needs to start: the program itself, the interpreter of a `#!` script, the
//! ELF interpreter (`PT_INTERP`, the dynamic loader) and the shared libraries it loads — each with
//! the access the kernel checks when it starts (execute for the program and the interpreters,
//! read for the libraries and a script).
//!
//! Used by the self-test, which then observes each access in a real child confined by the verb's
//! profile (`sandbox::PreparedSandbox::observe`): which files are needed is computed here,
//! outside the sandbox; whether the profile allows them is observed, never inferred from paths.
//!
//! How: a script's `#!` line names its interpreter (followed in turn); an ELF file's program
//! headers name its loader; the libraries are what that loader itself resolves, listed by
//! `LOADER --list PROGRAM` (the loader maps the libraries, prints them and exits without running
//! the program's code) with an empty environment, as verbs run. A statically linked program
//! needs only itself.
//!
//! Invariant: every path returned is canonical (symlinks resolved, as the kernel's checks see
//! them), and each (path, access) pair appears once.
#![forbid(unsafe_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How deep `#!` interpreters may chain (the kernel allows 4 levels of binfmt rewriting).
const MAX_SCRIPT_DEPTH: usize = 4;

/// One file a program needs, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeededFile {
    pub path: PathBuf,
    /// Executed (`true`) or read (`false`).
    pub execute: bool,
    /// Its role, for messages: `the program`, `its loader`, `a library of /usr/bin/echo`, …
    pub role: String,
}

/// Why the needed files cannot be found (even outside any sandbox).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeedError {
    #[error("{}: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
    #[error("{} chains more than {MAX_SCRIPT_DEPTH} `#!` interpreters", path.display())]
    ScriptDepth { path: PathBuf },
    #[error("{}: the loader {} could not list its libraries: {reason}", program.display(), loader.display())]
    Loader {
        program: PathBuf,
        loader: PathBuf,
        reason: String,
    },
}

/// The files `program` needs to start.
pub fn needed(program: &Path) -> Result<Vec<NeededFile>, NeedError> {
    let mut files = Vec::new();
    collect(program, "the program", 0, &mut files)?;
    Ok(files)
}

fn collect(
    path: &Path,
    role: &str,
    depth: usize,
    files: &mut Vec<NeededFile>,
) -> Result<(), NeedError> {
    let unreadable = |e: std::io::Error| NeedError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let real = std::fs::canonicalize(path).map_err(unreadable)?;
    add(files, &real, true, role);
    let mut head = [0u8; 256];
    let mut file = std::fs::File::open(&real).map_err(unreadable)?;
    let read = file.read(&mut head).map_err(unreadable)?;
    let head = &head[..read];
    if let Some(line) = head.strip_prefix(b"#!") {
        if depth >= MAX_SCRIPT_DEPTH {
            return Err(NeedError::ScriptDepth { path: real });
        }
        // The interpreter reads the script by name.
        add(files, &real, false, role);
        let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
        let interpreter = String::from_utf8_lossy(line)
            .split_whitespace()
            .next()
            .map(PathBuf::from)
            .ok_or_else(|| NeedError::Unreadable {
                path: real.clone(),
                reason: "its #! line names no interpreter".into(),
            })?;
        return collect(
            &interpreter,
            &format!("the interpreter of {}", real.display()),
            depth + 1,
            files,
        );
    }
    let Some(loader) = elf_interpreter(&real).map_err(unreadable)? else {
        return Ok(());
    };
    let loader = std::fs::canonicalize(&loader).map_err(|e| NeedError::Unreadable {
        path: loader.clone(),
        reason: e.to_string(),
    })?;
    add(
        files,
        &loader,
        true,
        &format!("the loader of {}", real.display()),
    );
    for library in libraries(&loader, &real)? {
        add(
            files,
            &library,
            false,
            &format!("a library of {}", real.display()),
        );
    }
    Ok(())
}

fn add(files: &mut Vec<NeededFile>, path: &Path, execute: bool, role: &str) {
    if !files.iter().any(|f| f.path == path && f.execute == execute) {
        files.push(NeededFile {
            path: path.to_path_buf(),
            execute,
            role: role.to_string(),
        });
    }
}

/// `PT_INTERP` of a 64-bit little-endian ELF file, `None` for anything else (static programs,
/// other formats: the kernel's own checks of the program still apply).
fn elf_interpreter(path: &Path) -> std::io::Result<Option<PathBuf>> {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(path)?;
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1]) {
        return Ok(None);
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return Ok(None);
    };
    for index in 0..usize::from(phnum) {
        let header = phoff as usize + index * usize::from(phentsize);
        if u32_at(header) != Some(PT_INTERP) {
            continue;
        }
        let (Some(offset), Some(size)) = (u64_at(header + 8), u64_at(header + 32)) else {
            return Ok(None);
        };
        let Some(name) = bytes.get(offset as usize..(offset + size) as usize) else {
            return Ok(None);
        };
        let name = name.split(|&b| b == 0).next().unwrap_or_default();
        return Ok(Some(PathBuf::from(
            String::from_utf8_lossy(name).into_owned(),
        )));
    }
    Ok(None)
}

/// The libraries `loader` maps for `program`, canonical.
fn libraries(loader: &Path, program: &Path) -> Result<Vec<PathBuf>, NeedError> {
    let failed = |reason: String| NeedError::Loader {
        program: program.to_path_buf(),
        loader: loader.to_path_buf(),
        reason,
    };
    let out = Command::new(loader)
        .arg("--list")
        .arg(program)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(failed(format!("{} {}", text.trim(), stderr.trim())));
    }
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        // `libc.so.6 => /lib/…/libc.so.6 (0x…)`, `/lib64/ld-linux-x86-64.so.2 (0x…)`, and the
        // vDSO, which has no file.
        let target = match line.split_once(" => ") {
            Some((name, rest)) if rest.starts_with("not found") => {
                return Err(failed(format!("library {name} not found")));
            }
            Some((_, rest)) => rest,
            None => line,
        };
        let Some(path) = target.split(" (").next().filter(|p| p.starts_with('/')) else {
            continue;
        };
        let path = std::fs::canonicalize(path).map_err(|e| failed(format!("{path}: {e}")))?;
        if path != loader && !found.contains(&path) {
            found.push(path);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_needs_itself_its_loader_and_its_libraries() {
        let files = needed(Path::new("/bin/echo")).unwrap();
        let echo = &files[0];
        assert_eq!(echo.path, std::fs::canonicalize("/bin/echo").unwrap());
        assert!(echo.execute);
        let loader = files
            .iter()
            .find(|f| f.role.starts_with("the loader"))
            .unwrap();
        assert!(loader.execute, "{files:?}");
        assert!(
            files
                .iter()
                .any(|f| !f.execute && f.path.ends_with("libc.so.6")),
            "{files:?}"
        );
    }

    #[test]
    fn a_script_needs_itself_read_and_executed_and_its_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh -e\necho hi\n").unwrap();
        let files = needed(&script).unwrap();
        assert!(files[0].execute, "{files:?}");
        let real = std::fs::canonicalize(&script).unwrap();
        assert!(
            files.iter().any(|f| f.path == real && !f.execute),
            "the interpreter reads the script: {files:?}"
        );
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        assert!(files.iter().any(|f| f.path == sh && f.execute), "{files:?}");
        assert!(
            files.iter().any(|f| f.role.starts_with("a library")),
            "{files:?}"
        );
    }
}
