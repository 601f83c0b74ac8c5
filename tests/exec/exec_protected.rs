//! `verbd exec` for an agent in its project: as an unprivileged uid, in a project with existing
//! protected entries (`CLAUDE.md`, `.git/hooks/pre-commit`, `.git/config`,
//! `.claude/settings.json`, `docs/CLAUDE.md`), in every mode:
//!
//! - **brokered** (the default): no namespace, new files and directories anywhere in the project;
//!   the create broker alone keeps the protected entries (neither modified, removed, renamed,
//!   replaced, re-moded nor given a second name); a directory that merely holds one (`docs`) can
//!   be moved, its protected entries keeping their protected names;
//! - **mount namespace** (`VERBD_EXEC_MOUNT_NAMESPACE`): the same, with read-only binds behind
//!   the broker, and the directories leading to protected entries pinned in place;
//! - **Landlock-only split** (`VERBD_EXEC_LANDLOCK_ONLY`): the same protected entries hold; the
//!   documented trade-off is that no new entry can be created at the top of the project;
//! - in **all**, the create broker refuses every *new* protected name (`AGENTS.md` at the top,
//!   `src/CLAUDE.md`, `.envrc` by rename, a protected symlink, a hard link, a hook in a nested
//!   `.git` (the `.git` directory itself may be made: git's working data is the agent's, its
//!   config and hooks are not, `exec_git_plants`), a
//!   create through a dangling symlink or an absolute symlink back into the project, a second
//!   name through `/proc/self/fd/N`), while the ordinary calls it performs keep working.
//!
//! The same script run without `verbd exec` is the positive control: every attempt succeeds.
use crate::common;
use common::policy::{Policy, Sandbox, write_exec_policy};
use common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const AGENT: u32 = 61766;
const PYTHON: &str = "/usr/bin/python3";

/// Every attempt an agent could make on the project (`attempts.py PROJECT [NAME]`: all, or only
/// NAME), `name 0` or `name errno`.
const ATTEMPTS: &str = r#"
import os, sys
os.chdir(sys.argv[1])
only = sys.argv[2] if len(sys.argv) > 2 else None
def attempt(name, op):
    if only is not None and name != only:
        return
    try:
        op()
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
def write(path, data="evil"):
    with open(path, "a") as f:
        f.write(data)
def replace(path):
    write(path + ".new")
    os.rename(path + ".new", path)
attempt("create-top", lambda: write("new.py", "print()"))
attempt("mkdir-top", lambda: os.mkdir("new-dir"))
attempt("create-index-lock", lambda: write(".git/index.lock", ""))
attempt("create-object", lambda: write(".git/objects/ab", "blob"))
attempt("create-in-src", lambda: write("src/new.rs", "fn f() {}"))
attempt("memory-modify", lambda: write("CLAUDE.md"))
attempt("memory-remove", lambda: os.unlink("CLAUDE.md"))
attempt("memory-rename", lambda: os.rename("CLAUDE.md", "moved.md"))
attempt("memory-replace", lambda: replace("CLAUDE.md"))
attempt("hook-modify", lambda: write(".git/hooks/pre-commit"))
attempt("hook-replace", lambda: replace(".git/hooks/pre-commit"))
attempt("hook-remove", lambda: os.unlink(".git/hooks/pre-commit"))
attempt("hook-create", lambda: write(".git/hooks/post-checkout"))
attempt("gitconfig-modify", lambda: write(".git/config"))
attempt("claude-settings-modify", lambda: write(".claude/settings.json"))
attempt("claude-create", lambda: write(".claude/settings.local.json"))
attempt("git-rename", lambda: os.rename(".git", "git-moved"))
attempt("docs-rename", lambda: os.rename("docs", "docs-moved"))
attempt("nested-memory-modify", lambda: write("docs/CLAUDE.md"))
attempt("via-parent-root", lambda: write(f"/proc/{os.getppid()}/root{os.getcwd()}/CLAUDE.md"))
def both(*ops):
    for op in ops:
        op()
def fifo_both_ends():
    import threading
    os.mkfifo("src/pipe-both")
    reader = {}
    t = threading.Thread(target=lambda: reader.setdefault("fd", os.open("src/pipe-both", os.O_RDONLY | os.O_CREAT)))
    t.start()
    w = os.open("src/pipe-both", os.O_WRONLY | os.O_CREAT)
    t.join()
    os.close(w)
    os.close(reader["fd"])
def link_via_descriptor(existing, new):
    fd = os.open(existing, os.O_RDONLY)
    here = os.open(".", os.O_RDONLY)
    try:
        os.link(f"/proc/self/fd/{fd}", new, src_dir_fd=here, follow_symlinks=True)
    finally:
        os.close(here)
        os.close(fd)
def link_followed(link, new):
    here = os.open(".", os.O_RDONLY)
    try:
        os.link(link, new, src_dir_fd=here, follow_symlinks=True)
    finally:
        os.close(here)
def tmpfile_linked():
    fd = os.open("src", os.O_TMPFILE | os.O_WRONLY, 0o600)
    os.write(fd, b"tmp")
    # With a directory fd, os.link calls linkat(AT_SYMLINK_FOLLOW), the O_TMPFILE idiom (the
    # absolute source ignores the directory).
    here = os.open(".", os.O_RDONLY)
    os.link(f"/proc/self/fd/{fd}", "src/from-tmpfile", src_dir_fd=here, follow_symlinks=True)
    os.close(here)
    os.close(fd)
attempt("new-memory-top", lambda: write("AGENTS.md"))
attempt("new-memory-in-src", lambda: write("src/CLAUDE.md"))
attempt("new-envrc-by-rename", lambda: replace(".envrc"))
attempt("new-symlink-protected", lambda: os.symlink("src", "GEMINI.md"))
attempt("new-hardlink-protected", lambda: both(lambda: write("src/plain.txt"), lambda: os.link("src/plain.txt", "src/.envrc")))
attempt("new-nested-git-hook", lambda: both(lambda: os.makedirs("src/vendored/.git/hooks", exist_ok=True), lambda: write("src/vendored/.git/hooks/pre-commit")))
attempt("new-through-dangling-symlink", lambda: both(lambda: os.symlink("AGENTS.md", "src/notes.md"), lambda: write("src/notes.md")))
attempt("new-git-by-directory-rename", lambda: both(lambda: os.makedirs("src/stage/hooks"), lambda: os.rename("src/stage", "src/.git")))
attempt("via-absolute-symlink-modify", lambda: both(lambda: os.symlink(os.getcwd(), "src/again"), lambda: write("src/again/CLAUDE.md")))
attempt("via-absolute-symlink-create", lambda: both(lambda: os.symlink(os.getcwd(), "src/back"), lambda: write("src/back/AGENTS.md")))
attempt("second-name-via-descriptor", lambda: link_via_descriptor("CLAUDE.md", "src/copy.md"))
attempt("deep-memory-modify", lambda: write("a/b/c/d/CLAUDE.md"))
attempt("deep-memory-remove", lambda: os.unlink("a/b/c/d/CLAUDE.md"))
attempt("hook-chmod", lambda: os.chmod(".git/hooks/pre-commit", 0o755))
attempt("memory-truncate", lambda: os.truncate("CLAUDE.md", 0))
attempt("via-proc-self-cwd", lambda: write("/proc/self/cwd/AGENTS.md"))
attempt("second-name-via-symlink", lambda: both(lambda: os.symlink(os.getcwd() + "/a/b/c/d/CLAUDE.md", "src/deep-link"), lambda: link_followed("src/deep-link", "src/deep-copy")))
attempt("plain-chmod-truncate-unlink-in-src", lambda: both(lambda: write("src/t.txt"), lambda: os.chmod("src/t.txt", 0o600), lambda: os.truncate("src/t.txt", 1), lambda: os.unlink("src/t.txt")))
attempt("plain-rename-in-src", lambda: both(lambda: write("src/a.txt"), lambda: os.rename("src/a.txt", "src/b.txt")))
attempt("plain-link-in-src", lambda: both(lambda: write("src/c.txt"), lambda: os.link("src/c.txt", "src/d.txt")))
attempt("plain-symlink-in-src", lambda: os.symlink("b.txt", "src/e.txt"))
attempt("plain-mkdir-in-src", lambda: os.makedirs("src/x/y"))
attempt("fifo-both-ends", fifo_both_ends)
attempt("tmpfile-linked", tmpfile_linked)
attempt("devnull-create-flag", lambda: write("/dev/null"))
attempt("existing-protected-mkdir-p", lambda: os.makedirs(".git", exist_ok=True))
attempt("existing-protected-read-with-create-flag", lambda: os.close(os.open(".git/config", os.O_RDONLY | os.O_CREAT)))
"#;

/// Existing protected entries and their original content.
const PROTECTED: &[(&str, &str)] = &[
    ("CLAUDE.md", "memory of the operator"),
    (".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n"),
    (".git/config", "[core]\n"),
    (".claude/settings.json", "{}"),
    ("docs/CLAUDE.md", "nested memory"),
    // Deeper than the walk that binds existing entries read-only: kept by the broker alone.
    ("a/b/c/d/CLAUDE.md", "deep memory"),
];

/// A project owned by the agent, the attempts script beside it, and a policy whose `agent`
/// profile writes only the project.
fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = open_tempdir();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    std::fs::write(dir.path().join("tools/attempts.py"), ATTEMPTS).unwrap();
    let repo = dir.path().join("project");
    for sub in [
        ".git/hooks",
        ".git/objects",
        ".claude",
        "docs",
        "src",
        "a/b/c/d",
    ] {
        std::fs::create_dir_all(repo.join(sub)).unwrap();
    }
    for (file, content) in PROTECTED {
        std::fs::write(repo.join(file), content).unwrap();
    }
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&repo)
        .status()
        .unwrap();
    let policy = dir.path().join("policy.toml");
    let tools = dir.path().join("tools");
    write_exec_policy(
        &policy,
        Sandbox::new(
            &[
                "/usr",
                "/lib",
                "/lib64",
                "/bin",
                "/etc",
                "/proc",
                tools.to_str().unwrap(),
            ],
            &[repo.to_str().unwrap()],
        ),
    );
    (dir, repo, policy)
}

/// The isolation `verbd exec` is asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// The default: the create broker alone.
    Brokered,
    MountNamespace,
    LandlockOnly,
}

/// Runs the attempts (all, or `only` one) as the agent, from a shell of the agent's (so the
/// program's parent is the agent's too, as under `verbd exec`, whose launcher stays the parent),
/// under `verbd exec` (`Some(mode)`) or unconfined; (`name → errno` lines, stderr).
fn attempts(
    repo: &Path,
    policy: &Path,
    confined: Option<Mode>,
    only: Option<&str>,
) -> (Vec<(String, i32)>, String) {
    let script = policy.with_file_name("tools").join("attempts.py");
    let mut program = vec![
        PYTHON.to_string(),
        script.display().to_string(),
        repo.display().to_string(),
    ];
    program.extend(only.map(str::to_string));
    let mut cmd = match confined {
        Some(mode) => {
            let mut cmd = Command::new(BIN);
            cmd.args(["exec", "--print-status", "--policy"])
                .arg(policy)
                .args(["--profile", "agent", "--"])
                .args(&program);
            match mode {
                Mode::Brokered => {}
                Mode::MountNamespace => {
                    cmd.env(verbd::sandbox::MOUNT_NAMESPACE_ENV, "1");
                }
                Mode::LandlockOnly => {
                    cmd.env(verbd::sandbox::LANDLOCK_ONLY_ENV, "1");
                }
            }
            cmd
        }
        None => {
            let mut cmd = Command::new("/bin/sh");
            // `; exit $?` keeps the shell as the program's parent.
            cmd.args(["-c", "\"$@\"; exit $?", "sh"]).args(&program);
            cmd
        }
    };
    cmd.uid(AGENT).gid(AGENT).current_dir("/");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines = stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, errno)| (name.to_string(), errno.parse().unwrap()))
        .collect();
    (lines, stderr)
}

fn errno_of(lines: &[(String, i32)], name: &str) -> i32 {
    lines
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, e)| *e)
        .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
}

/// Every protected entry still holds its original content and mode, and nothing moved.
fn protected_entries_untouched(repo: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let hook_mode = std::fs::metadata(repo.join(".git/hooks/pre-commit"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(hook_mode & 0o111, 0, "the hook was made executable");
    for (file, content) in PROTECTED {
        assert_eq!(
            std::fs::read_to_string(repo.join(file)).unwrap(),
            *content,
            "{file} changed"
        );
    }
    for gone in [
        "moved.md",
        "git-moved",
        "docs-moved",
        ".git/hooks/post-checkout",
        ".claude/settings.local.json",
        "AGENTS.md",
        "src/CLAUDE.md",
        ".envrc",
        "GEMINI.md",
        "src/.envrc",
        "src/vendored/.git/hooks/pre-commit",
        "src/AGENTS.md",
        "src/.git",
        "src/copy.md",
        "src/deep-copy",
    ] {
        assert!(!repo.join(gone).exists(), "{gone} exists");
    }
}

const REFUSED_IN_BOTH_MODES: &[&str] = &[
    "memory-modify",
    "memory-remove",
    "memory-rename",
    "memory-replace",
    "hook-modify",
    "hook-replace",
    "hook-remove",
    "hook-create",
    "gitconfig-modify",
    "claude-settings-modify",
    "claude-create",
    "git-rename",
    "docs-rename",
    "nested-memory-modify",
    "via-parent-root",
    "via-absolute-symlink-modify",
    "deep-memory-modify",
    "deep-memory-remove",
    "hook-chmod",
    "memory-truncate",
];

/// New protected names, refused in both modes by the create broker (`EACCES`), wherever the
/// write root would let a new entry be made.
const NEW_PROTECTED_NAMES: &[&str] = &[
    "new-memory-top",
    "new-memory-in-src",
    "new-envrc-by-rename",
    "new-symlink-protected",
    "new-hardlink-protected",
    "new-nested-git-hook",
    "new-through-dangling-symlink",
    "new-git-by-directory-rename",
    "via-absolute-symlink-create",
    "second-name-via-descriptor",
    "via-proc-self-cwd",
    "second-name-via-symlink",
];

/// What the broker performs for the program in both modes: ordinary creates, links, renames,
/// FIFOs opened from both ends, an `O_TMPFILE` linked through `/proc/self/fd`, `O_CREAT` on
/// `/dev/null` and on existing protected entries that are only read.
const BROKERED_IN_BOTH_MODES: &[&str] = &[
    "plain-chmod-truncate-unlink-in-src",
    "plain-rename-in-src",
    "plain-link-in-src",
    "plain-symlink-in-src",
    "plain-mkdir-in-src",
    "fifo-both-ends",
    "tmpfile-linked",
    "devnull-create-flag",
    "existing-protected-mkdir-p",
    "existing-protected-read-with-create-flag",
];

/// Both modes: every new protected name is refused (and said so on stderr), every ordinary
/// brokered call succeeds.
fn creates_are_brokered(lines: &[(String, i32)], stderr: &str) {
    for name in NEW_PROTECTED_NAMES {
        assert_eq!(errno_of(lines, name), libc::EACCES, "{name}: {lines:?}");
    }
    for name in BROKERED_IN_BOTH_MODES {
        assert_eq!(errno_of(lines, name), 0, "{name}: {lines:?}\n{stderr}");
    }
    assert!(
        stderr.contains("create broker: in every write root new protected names are refused"),
        "{stderr}"
    );
    assert!(
        stderr.contains("AGENTS.md is a protected name `agents.md`"),
        "the refusal says why: {stderr}"
    );
}

#[test]
fn the_unconfined_control_can_do_everything() {
    if !require_root("the_unconfined_control_can_do_everything") {
        return;
    }
    let names: Vec<&str> = ATTEMPTS
        .lines()
        .filter_map(|l| l.strip_prefix("attempt(\""))
        .filter_map(|l| l.split('"').next())
        .collect();
    assert_eq!(names.len(), 47, "{names:?}");
    // Each attempt in a fresh project: earlier ones would remove what later ones act on.
    for name in names {
        let (_dir, repo, policy) = project();
        let (lines, _) = attempts(&repo, &policy, None, Some(name));
        assert_eq!(
            lines,
            vec![(name.to_string(), 0)],
            "{name} failed without the sandbox"
        );
    }
}

#[test]
fn in_a_mount_namespace_new_entries_go_anywhere_and_protected_ones_hold() {
    if !require_root("in_a_mount_namespace_new_entries_go_anywhere_and_protected_ones_hold") {
        return;
    }
    let (_dir, repo, policy) = project();
    let (lines, stderr) = attempts(&repo, &policy, Some(Mode::MountNamespace), None);
    println!("mount namespace: {lines:?}\n{stderr}");
    assert!(
        stderr.contains("protected entries: user + mount namespace"),
        "the host must offer user namespaces here (under CI=true this is a failure): {stderr}"
    );
    for name in [
        "create-top",
        "mkdir-top",
        "create-index-lock",
        "create-object",
        "create-in-src",
    ] {
        assert_eq!(errno_of(&lines, name), 0, "{name}: {lines:?}");
    }
    for name in REFUSED_IN_BOTH_MODES {
        assert_ne!(errno_of(&lines, name), 0, "{name} was allowed: {lines:?}");
    }
    // Precise answers: the create broker (EACCES) for every write, removal, mode change or
    // rename of a protected entry, new protected names and the way around through the
    // launcher's /proc root (a magic link it never follows); a mount point (EBUSY) for a
    // pinned directory; Landlock (EACCES) too for the /proc root.
    for name in REFUSED_IN_BOTH_MODES {
        let errno = if *name == "docs-rename" {
            libc::EBUSY
        } else {
            libc::EACCES
        };
        assert_eq!(errno_of(&lines, name), errno, "{name}: {lines:?}");
    }
    creates_are_brokered(&lines, &stderr);
    assert!(repo.join("new.py").exists() && repo.join("new-dir").is_dir());
    assert_eq!(
        std::fs::read_to_string(repo.join("src/from-tmpfile")).unwrap(),
        "tmp"
    );
    protected_entries_untouched(&repo);

    // The offline self-test says which mode `verbd exec` gets on this host.
    let out = Command::new(BIN)
        .args(["selftest", "--policy"])
        .arg(&policy)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("--mount-namespace is available on this host too"),
        "{report}"
    );
}

#[test]
fn by_default_the_create_broker_keeps_protected_entries_and_new_entries_go_anywhere() {
    if !require_root(
        "by_default_the_create_broker_keeps_protected_entries_and_new_entries_go_anywhere",
    ) {
        return;
    }
    let (_dir, repo, policy) = project();
    let (lines, stderr) = attempts(&repo, &policy, Some(Mode::Brokered), None);
    println!("brokered: {lines:?}\n{stderr}");
    assert!(
        stderr.contains("protected entries: kept by the create broker at any depth; no namespace"),
        "{stderr}"
    );
    for name in [
        "create-top",
        "mkdir-top",
        "create-index-lock",
        "create-object",
        "create-in-src",
        // Without a mount namespace nothing pins a directory: its protected entries keep
        // their protected names wherever it goes.
        "docs-rename",
    ] {
        assert_eq!(errno_of(&lines, name), 0, "{name}: {lines:?}");
    }
    // (`docs` was moved away just before: its memory file is tried again below.)
    for name in REFUSED_IN_BOTH_MODES
        .iter()
        .filter(|n| !["docs-rename", "nested-memory-modify"].contains(*n))
    {
        assert_eq!(errno_of(&lines, name), libc::EACCES, "{name}: {lines:?}");
    }
    creates_are_brokered(&lines, &stderr);
    assert_eq!(
        std::fs::read_to_string(repo.join("docs-moved/CLAUDE.md")).unwrap(),
        "nested memory"
    );
    std::fs::rename(repo.join("docs-moved"), repo.join("docs")).unwrap();
    let (again, _) = attempts(
        &repo,
        &policy,
        Some(Mode::Brokered),
        Some("nested-memory-modify"),
    );
    assert_eq!(
        again,
        vec![("nested-memory-modify".to_string(), libc::EACCES)]
    );
    protected_entries_untouched(&repo);
}

#[test]
fn landlock_only_keeps_protected_entries_and_cannot_create_at_the_top() {
    if !require_root("landlock_only_keeps_protected_entries_and_cannot_create_at_the_top") {
        return;
    }
    let (_dir, repo, policy) = project();
    let (lines, stderr) = attempts(&repo, &policy, Some(Mode::LandlockOnly), None);
    println!("landlock only: {lines:?}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "protected entries: Landlock-only split (forced by {})",
            verbd::sandbox::LANDLOCK_ONLY_ENV
        )),
        "{stderr}"
    );
    for name in ["create-object", "create-in-src"] {
        assert_eq!(errno_of(&lines, name), 0, "{name}: {lines:?}");
    }
    for name in
        REFUSED_IN_BOTH_MODES
            .iter()
            .chain(&["create-top", "mkdir-top", "create-index-lock"])
    {
        assert_eq!(
            errno_of(&lines, name),
            libc::EACCES,
            "{name} must be refused by Landlock: {lines:?}"
        );
    }
    creates_are_brokered(&lines, &stderr);
    assert!(!repo.join("new.py").exists());
    protected_entries_untouched(&repo);
}

#[test]
fn a_protected_absolute_path_in_a_write_root_keeps_new_entries_out_under_verbd_exec() {
    if !require_root(
        "a_protected_absolute_path_in_a_write_root_keeps_new_entries_out_under_verbd_exec",
    ) {
        return;
    }
    // `[protected] paths` names a directory inside the profile's write root: a program under
    // `verbd exec` (the create broker, the default) may create beside it, never beneath it.
    let (dir, repo, _) = project();
    let vault = repo.join("vault");
    std::fs::create_dir(&vault).unwrap();
    Command::new("chown")
        .arg(format!("{AGENT}:{AGENT}"))
        .arg(&vault)
        .status()
        .unwrap();
    let policy = dir.path().join("policy-vault.toml");
    std::fs::write(
        &policy,
        Policy::new()
            .protected_paths(&[vault.to_str().unwrap()])
            .sandbox(
                "agent",
                Sandbox::new(
                    &["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc"],
                    &[repo.to_str().unwrap()],
                ),
            )
            .render(),
    )
    .unwrap();
    let create = "import os, sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'x').close()\n        print(path, 0)\n    except OSError as e:\n        print(path, e.errno)\n";
    let beneath = vault.join("planted");
    let beside = repo.join("src/new.rs");
    let out = Command::new(BIN)
        .args(["exec", "--policy"])
        .arg(&policy)
        .args(["--profile", "agent", "--", PYTHON, "-c", create])
        .arg(&beneath)
        .arg(&beside)
        .uid(AGENT)
        .gid(AGENT)
        .current_dir("/")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(&format!("{} {}", beneath.display(), libc::EACCES)),
        "a new entry beneath the protected path was not refused:\n{stdout}"
    );
    assert!(!beneath.exists(), "{} was created", beneath.display());
    // Positive control: beside it, in the same write root.
    assert!(
        stdout.contains(&format!("{} 0", beside.display())),
        "{stdout}"
    );
}
