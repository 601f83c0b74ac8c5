//! A coding agent commits under `verbd exec` (default mode): as an unprivileged uid whose
//! profile reads `/usr /lib /lib64 /bin /etc` and its home and writes only its project, real git
//! can `init` a repository, `clone` one from a local path, `add`, `commit`, `branch`, `merge`,
//! `rebase`, `stash`, `remote add`, `branch --set-upstream-to`, `config user.name` and use a
//! linked worktree (`worktree add`, commit in it, `worktree remove`) — one test
//! per operation, each checking git's own view of the result afterwards. What git obeys stays
//! the human's: `tests/exec/exec_git_plants.rs`.
use crate::common;
use common::policy::{Sandbox, write_exec_policy};
use common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const AGENT: u32 = 63420;

struct Project {
    _dir: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    policy: PathBuf,
}

fn project() -> Project {
    let dir = open_tempdir();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let policy = dir.path().join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox::new(
            &[
                "/usr",
                "/lib",
                "/lib64",
                "/bin",
                "/etc",
                home.to_str().unwrap(),
            ],
            &[work.to_str().unwrap()],
        ),
    );
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&home)
        .arg(&work)
        .status()
        .unwrap();
    Project {
        _dir: dir,
        home,
        work,
        policy,
    }
}

impl Project {
    /// `git ARGS` in `cwd` as the agent: under `verbd exec` when `confined`.
    fn git_as_agent(&self, confined: bool, cwd: &Path, args: &[&str]) -> Output {
        let mut cmd = if confined {
            let mut cmd = Command::new(BIN);
            cmd.args(["exec", "--policy"]).arg(&self.policy).args([
                "--profile",
                "agent",
                "--",
                "/usr/bin/git",
            ]);
            cmd
        } else {
            Command::new("/usr/bin/git")
        };
        cmd.args(args)
            .current_dir(cwd)
            .uid(AGENT)
            .gid(AGENT)
            .env("HOME", &self.home)
            .env("GIT_AUTHOR_NAME", "Agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.org")
            .env("GIT_COMMITTER_NAME", "Agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.org")
            .env_remove("VERBD_EXEC_MOUNT_NAMESPACE")
            .env_remove("VERBD_EXEC_LANDLOCK_ONLY");
        cmd.output().unwrap()
    }

    /// Under `verbd exec`; must succeed with nothing refused on stderr.
    fn git(&self, cwd: &Path, args: &[&str]) -> String {
        let out = self.git_as_agent(true, cwd, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "git {args:?}: {stderr}");
        assert!(!stderr.contains("refused"), "git {args:?}: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Unconfined: how the human's git sees the result.
    fn human(&self, cwd: &Path, args: &[&str]) -> String {
        let out = self.git_as_agent(false, cwd, args);
        assert!(
            out.status.success(),
            "human git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A repository the agent initialised, with one commit of `a.txt`.
    fn repo(&self) -> PathBuf {
        let repo = self.work.join("repo");
        self.git(&self.work, &["init", "-q", "-b", "main", "repo"]);
        self.write(&repo.join("a.txt"), "one\n");
        self.git(&repo, &["add", "a.txt"]);
        self.git(&repo, &["commit", "-qm", "one"]);
        repo
    }

    /// Writes a file as the agent would (owned by it).
    fn write(&self, path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::os::unix::fs::chown(path, Some(AGENT), Some(AGENT)).unwrap();
    }
}

#[test]
fn init_makes_a_repository_git_can_use() {
    if !require_root("init_makes_a_repository_git_can_use") {
        return;
    }
    let p = project();
    p.git(&p.work, &["init", "-q", "fresh"]);
    let repo = p.work.join("fresh");
    assert_eq!(
        p.human(&repo, &["rev-parse", "--is-inside-work-tree"]),
        "true\n"
    );
    // The config git wrote through the broker, and git's own probe kept the executable bit.
    assert_eq!(
        p.human(&repo, &["config", "core.filemode"]),
        "true\n",
        "git's chmod probe on its config worked"
    );
    assert!(repo.join(".git/hooks").is_dir() && repo.join(".git/info/exclude").is_file());
    let hooks: Vec<String> = std::fs::read_dir(repo.join(".git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !hooks.is_empty() && hooks.iter().all(|h| h.ends_with(".sample")),
        "{hooks:?}"
    );
}

#[test]
fn add_and_commit() {
    if !require_root("add_and_commit") {
        return;
    }
    let p = project();
    let repo = p.repo();
    p.write(&repo.join("b.txt"), "two\n");
    p.git(&repo, &["add", "b.txt"]);
    p.git(&repo, &["commit", "-qm", "two"]);
    assert_eq!(p.human(&repo, &["log", "--format=%s"]), "two\none\n");
    assert_eq!(p.human(&repo, &["status", "--porcelain"]), "");
}

#[test]
fn clone_from_a_local_path() {
    if !require_root("clone_from_a_local_path") {
        return;
    }
    let p = project();
    let repo = p.repo();
    p.git(&p.work, &["clone", "-q", repo.to_str().unwrap(), "copy"]);
    let copy = p.work.join("copy");
    assert_eq!(p.human(&copy, &["log", "--format=%s"]), "one\n");
    assert_eq!(
        p.human(&copy, &["config", "remote.origin.url"]),
        format!("{}\n", repo.display())
    );
    assert_eq!(
        p.human(&copy, &["config", "branch.main.remote"]),
        "origin\n"
    );
}

#[test]
fn branch_and_merge() {
    if !require_root("branch_and_merge") {
        return;
    }
    let p = project();
    let repo = p.repo();
    p.git(&repo, &["branch", "feature"]);
    p.git(&repo, &["checkout", "-q", "feature"]);
    p.write(&repo.join("f.txt"), "feature\n");
    p.git(&repo, &["add", "f.txt"]);
    p.git(&repo, &["commit", "-qm", "feature"]);
    p.git(&repo, &["checkout", "-q", "main"]);
    p.write(&repo.join("m.txt"), "main\n");
    p.git(&repo, &["add", "m.txt"]);
    p.git(&repo, &["commit", "-qm", "main"]);
    p.git(&repo, &["merge", "-q", "--no-edit", "feature"]);
    assert_eq!(
        p.human(&repo, &["branch", "--format=%(refname:short)"]),
        "feature\nmain\n"
    );
    assert_eq!(
        p.human(&repo, &["log", "-1", "--format=%P"])
            .split_whitespace()
            .count(),
        2,
        "a merge commit"
    );
    assert!(repo.join("f.txt").exists() && repo.join("m.txt").exists());
}

#[test]
fn rebase() {
    if !require_root("rebase") {
        return;
    }
    let p = project();
    let repo = p.repo();
    p.git(&repo, &["checkout", "-q", "-b", "topic"]);
    p.write(&repo.join("t.txt"), "topic\n");
    p.git(&repo, &["add", "t.txt"]);
    p.git(&repo, &["commit", "-qm", "topic"]);
    p.git(&repo, &["checkout", "-q", "main"]);
    p.write(&repo.join("m.txt"), "main\n");
    p.git(&repo, &["add", "m.txt"]);
    p.git(&repo, &["commit", "-qm", "main"]);
    p.git(&repo, &["checkout", "-q", "topic"]);
    p.git(&repo, &["rebase", "-q", "main"]);
    assert_eq!(
        p.human(&repo, &["log", "--format=%s"]),
        "topic\nmain\none\n"
    );
    assert!(!repo.join(".git/rebase-merge").exists(), "git cleaned up");
}

#[test]
fn stash_and_pop() {
    if !require_root("stash_and_pop") {
        return;
    }
    let p = project();
    let repo = p.repo();
    p.write(&repo.join("a.txt"), "changed\n");
    p.git(&repo, &["stash", "-q"]);
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(p.human(&repo, &["stash", "list"]).lines().count(), 1);
    p.git(&repo, &["stash", "pop", "-q"]);
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "changed\n"
    );
}

#[test]
fn remote_upstream_and_user_config() {
    if !require_root("remote_upstream_and_user_config") {
        return;
    }
    let p = project();
    let repo = p.repo();
    let upstream = p.work.join("upstream.git");
    p.git(&p.work, &["init", "-q", "--bare", "upstream.git"]);
    p.git(
        &repo,
        &["remote", "add", "origin", upstream.to_str().unwrap()],
    );
    p.git(&repo, &["push", "-q", "origin", "main"]);
    p.git(&repo, &["branch", "--set-upstream-to=origin/main"]);
    p.git(&repo, &["config", "user.name", "Agent Smith"]);
    p.git(&repo, &["config", "pull.rebase", "false"]);
    assert_eq!(p.human(&repo, &["config", "user.name"]), "Agent Smith\n");
    assert_eq!(
        p.human(&repo, &["config", "branch.main.merge"]),
        "refs/heads/main\n"
    );
    assert_eq!(
        p.human(&repo, &["rev-parse", "@{u}"]),
        p.human(&repo, &["rev-parse", "HEAD"])
    );
    // A key that runs a command is refused, naming it, and the config is as it was.
    let before = std::fs::read(repo.join(".git/config")).unwrap();
    let out = p.git_as_agent(true, &repo, &["config", "core.fsmonitor", "/bin/true"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("git config key `core.fsmonitor` is not a data key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), before);
}

#[test]
fn linked_worktree_add_commit_and_remove() {
    if !require_root("linked_worktree_add_commit_and_remove") {
        return;
    }
    let p = project();
    let repo = p.repo();
    p.git(&repo, &["worktree", "add", "-q", "-b", "side", "../side"]);
    let side = p.work.join("side");
    assert_eq!(
        std::fs::read_to_string(side.join(".git")).unwrap(),
        format!("gitdir: {}\n", repo.join(".git/worktrees/side").display())
    );
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/worktrees/side/commondir")).unwrap(),
        "../..\n"
    );
    // `--print-status` says where git takes the worktree's data from.
    let status = Command::new(BIN)
        .args(["exec", "--print-status", "--policy"])
        .arg(&p.policy)
        .args(["--profile", "agent", "--", "/bin/true"])
        .current_dir(&side)
        .uid(AGENT)
        .gid(AGENT)
        .env_remove("VERBD_EXEC_MOUNT_NAMESPACE")
        .env_remove("VERBD_EXEC_LANDLOCK_ONLY")
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stderr);
    let common = std::fs::canonicalize(repo.join(".git")).unwrap();
    assert!(
        status.contains(&format!(
            "common directory (commondir) {} (in a write root",
            common.display()
        )),
        "{status}"
    );
    p.write(&side.join("s.txt"), "side\n");
    p.git(&side, &["add", "s.txt"]);
    p.git(&side, &["commit", "-qm", "side"]);
    assert_eq!(
        p.human(&repo, &["log", "--format=%s", "side"]),
        "side\none\n"
    );
    assert_eq!(p.human(&side, &["status", "--porcelain"]), "");
    assert_eq!(p.human(&repo, &["worktree", "list"]).lines().count(), 2);
    p.git(&repo, &["worktree", "remove", "../side"]);
    assert!(!side.exists() && !repo.join(".git/worktrees/side").exists());
    assert_eq!(p.human(&repo, &["worktree", "list"]).lines().count(), 1);
}
