//! `verbd exec`: any program (here a shell script standing in for an agent) confined by a policy's
//! sandbox profile — writes, protected names and syscalls — as root and as an unprivileged user.
use crate::common;
use common::policy::{Category, Policy, Sandbox, Verb, write_exec_policy};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

const SCRIPT: &str = r#"
cd "$1"
echo ok > src/main.rs && echo WROTE-INSIDE
echo x > CLAUDE.md 2>/dev/null && echo WROTE-CLAUDE
echo x > AGENTS.md 2>/dev/null && echo WROTE-AGENTS
echo x >> docs/CLAUDE.md 2>/dev/null && echo WROTE-NESTED-CLAUDE
echo x > .git/hooks/pre-commit 2>/dev/null && echo WROTE-HOOK
echo x >> .git/config 2>/dev/null && echo WROTE-GITCONFIG
echo x > "$2/escaped" 2>/dev/null && echo WROTE-OUTSIDE
/usr/bin/unshare -U /bin/true 2>/dev/null && echo UNSHARED
echo done
"#;

fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = open_tempdir();
    let repo = dir.path().join("repo");
    for sub in ["src", "docs", ".git/hooks"] {
        std::fs::create_dir_all(repo.join(sub)).unwrap();
    }
    std::fs::write(repo.join(".git/config"), "[core]\n").unwrap();
    // Existing protected files, at the top and deeper in the tree: the profile's walk finds them
    // (read-only binds in a mount namespace, excluded from the Landlock split otherwise). A
    // protected name that does not exist yet can be created under a mount namespace, and, in
    // either mode, inside a subdirectory granted whole — the documented trade-off
    // (`exec_protected` has both modes); the file verbs and the hook cover every depth.
    for top in ["CLAUDE.md", "AGENTS.md"] {
        std::fs::write(repo.join(top), "memory\n").unwrap();
    }
    std::fs::write(repo.join("docs/CLAUDE.md"), "memory\n").unwrap();
    std::fs::create_dir(dir.path().join("outside")).unwrap();
    let policy = dir.path().join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox::new(&["/usr", "/lib", "/etc", "/bin"], &[repo.to_str().unwrap()]),
    );
    (dir, policy)
}

fn run(dir: &std::path::Path, policy: &std::path::Path, uid: Option<u32>) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args(["exec", "--policy"])
        .arg(policy)
        .args(["--profile", "agent", "--", "/bin/sh", "-c", SCRIPT, "agent"])
        .arg(dir.join("repo"))
        .arg(dir.join("outside"));
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_confined(out: &str) {
    assert!(out.contains("WROTE-INSIDE"), "{out}");
    assert!(out.contains("done"), "{out}");
    for escape in [
        "WROTE-CLAUDE",
        "WROTE-AGENTS",
        "WROTE-NESTED-CLAUDE",
        "WROTE-HOOK",
        "WROTE-GITCONFIG",
        "WROTE-OUTSIDE",
        "UNSHARED",
    ] {
        assert!(!out.contains(escape), "{escape}: {out}");
    }
}

#[test]
fn exec_confines_a_script_as_root() {
    if !require_root("verbd exec") {
        return;
    }
    let (dir, policy) = setup();
    assert_confined(&run(dir.path(), &policy, None));
    assert!(!dir.path().join("outside/escaped").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("repo/CLAUDE.md")).unwrap(),
        "memory\n"
    );
    // Control: without verbd exec the same script does all of it (the test can fail).
    let out = Command::new("/bin/sh")
        .args(["-c", SCRIPT, "agent"])
        .arg(dir.path().join("repo"))
        .arg(dir.path().join("outside"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("WROTE-CLAUDE"));
}

#[test]
fn exec_needs_no_privileges() {
    if !require_root("verbd exec unprivileged") {
        return;
    }
    let (dir, policy) = setup();
    let repo = dir.path().join("repo");
    for path in [
        "",
        "src",
        "docs",
        "docs/CLAUDE.md",
        "CLAUDE.md",
        "AGENTS.md",
        ".git",
        ".git/hooks",
    ] {
        let p = repo.join(path);
        nix::unistd::chown(
            &p,
            Some(nix::unistd::Uid::from_raw(61300)),
            Some(nix::unistd::Gid::from_raw(61300)),
        )
        .unwrap();
    }
    let outside = dir.path().join("outside");
    nix::unistd::chown(&outside, Some(nix::unistd::Uid::from_raw(61300)), None).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).unwrap();
    nix::unistd::chown(
        &repo.join(".git/config"),
        Some(nix::unistd::Uid::from_raw(61300)),
        None,
    )
    .unwrap();
    let out = run(dir.path(), &policy, Some(61300));
    assert_confined(&out);
}

#[test]
fn print_status_reports_the_confinement() {
    if !require_root("verbd exec status") {
        return;
    }
    let (_dir, policy) = setup();
    let out = Command::new(BIN)
        .args(["exec", "--print-status", "--policy"])
        .arg(&policy)
        .args(["--profile", "agent", "--", "/bin/true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("landlock")
            && err.contains("seccomp: mode 2")
            && err.contains("no_new_privs: 1"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["exec", "--policy"])
        .arg(&policy)
        .args(["--profile", "nope", "--", "/bin/true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not defined"));
}

const NOREAD_UID: u32 = 61762;

/// A profile without `read` gets the documented default read roots: `/usr/bin/id` runs under it,
/// as a verb and under `verbd exec`, and the default roots still do not include the temp dir.
#[test]
fn a_profile_without_read_runs_programs_from_the_default_read_roots() {
    if !require_root("a_profile_without_read_runs_programs_from_the_default_read_roots") {
        return;
    }
    // No `read`: the profile takes the default read roots.
    let policy = Policy::new()
        .allow_root()
        .agents("agent", &[NOREAD_UID])
        .sandbox(
            "noread",
            Sandbox {
                write: Some(vec!["@DIR@/work".into()]),
                ..Sandbox::default()
            },
        )
        .verb(
            "whoami",
            Verb::command(Category::ReadOnly, "/usr/bin/id -u")
                .description("id")
                .roles(&["agent"])
                .sandbox("noread"),
        )
        .render();
    let daemon = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir(dir.join("work")).unwrap();
    });
    daemon.open_socket();
    let out = daemon.cli_as(NOREAD_UID, &["call", "--json", "whoami"]);
    println!("verb: {out:?}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit"]["code"], 0, "{v}");

    std::fs::write(daemon.path("secret-in-tmp"), "not in a default root").unwrap();
    let exec = |program: &[&str]| {
        let out = Command::new(BIN)
            .args(["exec", "--policy"])
            .arg(&daemon.policy)
            .args(["--profile", "noread", "--"])
            .args(program)
            .uid(NOREAD_UID)
            .gid(NOREAD_UID)
            .current_dir("/")
            .output()
            .unwrap();
        println!("{program:?}: {out:?}");
        out
    };
    let out = exec(&["/usr/bin/id", "-u"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        NOREAD_UID.to_string()
    );
    // Positive control for the boundary: a file outside the default roots stays unreadable.
    let out = exec(&["/bin/cat", daemon.path("secret-in-tmp").to_str().unwrap()]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{out:?}"
    );
}
