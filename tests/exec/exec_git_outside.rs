//! A write root that is a linked worktree whose repository lies outside the write roots: the
//! human has `home/proj` (the repository) and ran `git worktree add ../proj-agent`; the agent's
//! profile writes only `home/proj-agent`. Under `verbd exec` (default mode, real git, real
//! uids) the agent adds and commits there: `verbd exec` follows the worktree's `.git` file to
//! its git directory (`proj/.git/worktrees/proj-agent`) and the common directory's `objects`,
//! `refs` and `logs`, and `--print-status` says so. A `.git` that is a symlink, or a gitlink to
//! the main git directory, to `~/.ssh`, to another worktree's git directory or to another user's
//! repository, grants nothing. After the agent tried every plant in the followed directories,
//! the human's git, in the repository and in the worktree, runs nothing the agent chose (and
//! the same plants made without `verbd exec` do make it run the agent's programs).
use crate::common;
use common::policy::{Sandbox, write_exec_policy};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const AGENT: u32 = 63450;
const VICTIM: u32 = 63451;

/// `outside-plants.sh EVIL GITDIR COMMON`, run in the worktree: plants in its git directory,
/// in the repository's common directory and in the worktree; every step may fail.
const OUTSIDE_PLANTS: &str = r#"
E="$1"
G="$2"
C="$3"
step() { "$@" 2>/dev/null || true; }
# A common directory of the agent's own, with a config that runs and a hook.
step mkdir -p fake/hooks fake/objects fake/refs
step sh -c "printf 'ref: refs/heads/main\n' > fake/HEAD"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-fake' > fake/config"
step cp "$E/hook-fake" fake/hooks/pre-commit
step chmod +x fake/hooks/pre-commit
# The repository's hooks: new, copied, linked, the directory replaced.
step cp "$E/hook-common" "$C/hooks/pre-commit"
step chmod +x "$C/hooks/pre-commit"
step ln -s "$E/hook-symlink" "$C/hooks/post-commit"
step ln "$E/hook-link" "$C/objects/hook-link"
step mv "$C/objects/hook-link" "$C/hooks/post-checkout"
step mv "$C/hooks" "$C/objects/hooks-old"
step ln -s "$E/hooks" "$C/hooks"
# The repository's config: git config, append, a rename over it from a writable directory,
# a hard link into a writable directory written through.
step git config core.fsmonitor "$E/fsmonitor-config"
step git config core.hooksPath "$E/hooks"
step git config alias.status "!$E/run.sh alias"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-append' >> '$C/config'"
step sh -c "cp '$C/config' '$G/cfg.new' && printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-rename' >> '$G/cfg.new' && mv '$G/cfg.new' '$C/config'"
step ln "$C/config" "$C/objects/cfg-link"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-link' >> '$C/objects/cfg-link'"
# The worktree's commondir pointed at the fake one: written over, removed and rewritten,
# renamed over, linked over.
step sh -c "printf '%s\n' '$PWD/fake' > '$G/commondir'"
step rm -f "$G/commondir"
step sh -c "printf '%s\n' '$PWD/fake' > '$G/commondir'"
step sh -c "printf '%s\n' '$PWD/fake' > '$G/cd.new' && mv '$G/cd.new' '$G/commondir'"
step ln -s "$PWD/fake" "$G/commondir"
# The worktree's gitdir, its own config and hooks, config.worktree with its extension.
step sh -c "printf '%s\n' '$PWD/fake/.git' > '$G/gitdir'"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-wtconfig' > '$G/config'"
step mkdir -p "$G/hooks"
step cp "$E/hook-wt" "$G/hooks/pre-commit"
step chmod +x "$G/hooks/pre-commit"
step git config extensions.worktreeConfig true
step git config --worktree core.fsmonitor "$E/fsmonitor-configworktree"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-configworktree' > '$G/config.worktree'"
# Attributes with a filter, in the repository's info and in the worktree.
step mkdir -p "$C/info"
step sh -c "printf '* filter=evil diff=evil\n' > '$C/info/attributes'"
step sh -c "printf '* filter=evil diff=evil\n' > .gitattributes"
step git config filter.evil.clean "$E/run.sh filter"
step git config diff.evil.textconv "$E/run.sh textconv"
# The worktree's gitlink pointed at the fake common directory; another worktree's directory.
step sh -c "printf 'gitdir: %s\n' '$PWD/fake' > .git"
step mkdir -p "$C/worktrees/evil"
step sh -c "printf '%s\n' '$PWD/fake' > '$C/worktrees/evil/commondir'"
# A submodule's git directory in the repository.
step mkdir -p "$C/modules/lib"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-module' > '$C/modules/lib/config'"
# A paused rebase in the worktree whose todo runs a command when continued.
step mkdir -p "$G/rebase-merge"
step sh -c "printf 'exec %s rebase\n' '$E/run.sh' > '$G/rebase-merge/git-rebase-todo'"
echo planted
"#;

/// The agent's programs, each touching a marker named after itself when run.
const EVIL: &[&str] = &[
    "hook-fake",
    "hook-common",
    "hook-symlink",
    "hook-link",
    "hook-wt",
    "hooks/pre-commit",
    "hooks/post-checkout",
    "hooks/post-commit",
    "fsmonitor-fake",
    "fsmonitor-config",
    "fsmonitor-append",
    "fsmonitor-rename",
    "fsmonitor-link",
    "fsmonitor-wtconfig",
    "fsmonitor-configworktree",
    "fsmonitor-module",
];

struct Setup {
    dir: tempfile::TempDir,
    home: PathBuf,
    /// The human's repository (main worktree).
    proj: PathBuf,
    /// The linked worktree, the agent's write root.
    agent_wt: PathBuf,
    /// `proj/.git/worktrees/proj-agent` and `proj/.git`, canonical.
    git_dir: PathBuf,
    common_dir: PathBuf,
    evil: PathBuf,
    markers: PathBuf,
    /// `verbd exec`'s isolation: the variable choosing one, or the default (brokered).
    mode: Option<&'static str>,
}

fn run_as(uid: u32, cmd: &mut Command) -> Output {
    cmd.uid(uid)
        .gid(uid)
        .env("GIT_AUTHOR_NAME", "Someone")
        .env("GIT_AUTHOR_EMAIL", "someone@example.org")
        .env("GIT_COMMITTER_NAME", "Someone")
        .env("GIT_COMMITTER_EMAIL", "someone@example.org");
    let out = cmd.output().unwrap();
    println!(
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The human's git, unconfined.
fn human_git(uid: u32, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new("/usr/bin/git");
    cmd.args(args).current_dir(cwd).env("HOME", cwd);
    run_as(uid, &mut cmd)
}

fn must(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn setup() -> Setup {
    let dir = open_tempdir();
    let home = dir.path().join("home");
    let evil = dir.path().join("evil");
    let markers = dir.path().join("markers");
    for d in [&home, &evil, &evil.join("hooks"), &markers] {
        std::fs::create_dir_all(d).unwrap();
    }
    let run = evil.join("run.sh");
    std::fs::write(
        &run,
        format!("#!/bin/sh\ntouch \"{}/$1\"\nexit 1\n", markers.display()),
    )
    .unwrap();
    for name in EVIL {
        std::fs::write(
            evil.join(name),
            format!(
                "#!/bin/sh\n\"{}\" {}\n",
                run.display(),
                name.replace('/', "-")
            ),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("outside-plants.sh"), OUTSIDE_PLANTS).unwrap();
    Command::new("chmod")
        .args(["-R", "a+rx"])
        .arg(&evil)
        .status()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&home)
        .status()
        .unwrap();
    std::fs::set_permissions(&markers, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The human's repository and its linked worktree for the agent.
    must(human_git(
        AGENT,
        &home,
        &["init", "-q", "-b", "main", "proj"],
    ));
    let proj = home.join("proj");
    std::fs::write(proj.join("a.txt"), "one\n").unwrap();
    std::os::unix::fs::chown(proj.join("a.txt"), Some(AGENT), Some(AGENT)).unwrap();
    must(human_git(AGENT, &proj, &["add", "a.txt"]));
    must(human_git(AGENT, &proj, &["commit", "-qm", "one"]));
    must(human_git(
        AGENT,
        &proj,
        &["worktree", "add", "-q", "-b", "agent", "../proj-agent"],
    ));
    let common_dir = std::fs::canonicalize(proj.join(".git")).unwrap();
    Setup {
        git_dir: common_dir.join("worktrees/proj-agent"),
        common_dir,
        agent_wt: home.join("proj-agent"),
        proj,
        home,
        evil,
        markers,
        dir,
        mode: None,
    }
}

impl Setup {
    /// `verbd exec` in the isolation `self.mode` says.
    fn verbd_exec(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env_remove("VERBD_EXEC_MOUNT_NAMESPACE")
            .env_remove("VERBD_EXEC_LANDLOCK_ONLY");
        if let Some(mode) = self.mode {
            cmd.env(mode, "1");
        }
        cmd
    }

    /// A profile reading the system and the home, writing only `write`.
    fn policy(&self, write: &Path) -> PathBuf {
        let policy = self.dir.path().join(format!(
            "policy-{}.toml",
            write.file_name().unwrap().to_str().unwrap()
        ));
        let plants = self.dir.path().join("outside-plants.sh");
        write_exec_policy(
            &policy,
            Sandbox::new(
                &[
                    "/usr",
                    "/lib",
                    "/lib64",
                    "/bin",
                    "/etc",
                    self.home.to_str().unwrap(),
                    self.evil.to_str().unwrap(),
                    plants.to_str().unwrap(),
                ],
                &[write.to_str().unwrap()],
            ),
        );
        policy
    }

    /// `PROGRAM ARGS` in `cwd` as the agent under `verbd exec`, writing only `write`.
    fn exec(&self, write: &Path, cwd: &Path, program: &str, args: &[&str]) -> Output {
        let mut cmd = self.verbd_exec();
        cmd.args(["exec", "--policy"])
            .arg(self.policy(write))
            .args(["--profile", "agent", "--", program])
            .args(args)
            .current_dir(cwd)
            .env("HOME", &self.home);
        run_as(AGENT, &mut cmd)
    }

    /// The `--print-status` report of a profile writing only `write`, run in `cwd`.
    fn status(&self, write: &Path, cwd: &Path) -> String {
        let mut cmd = self.verbd_exec();
        cmd.args(["exec", "--print-status", "--policy"])
            .arg(self.policy(write))
            .args(["--profile", "agent", "--", "/bin/true"])
            .current_dir(cwd);
        String::from_utf8_lossy(&run_as(AGENT, &mut cmd).stderr).into_owned()
    }

    /// The agent's git in the worktree under `verbd exec`; must succeed, nothing refused.
    fn agent_git(&self, args: &[&str]) -> String {
        let out = self.exec(&self.agent_wt, &self.agent_wt, "/usr/bin/git", args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "git {args:?}: {stderr}");
        assert!(!stderr.contains("refused"), "git {args:?}: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn agent_write(&self, path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::os::unix::fs::chown(path, Some(AGENT), Some(AGENT)).unwrap();
    }

    fn plant(&self, confined: bool) {
        let script = self.dir.path().join("outside-plants.sh");
        let args = [
            script.to_str().unwrap(),
            self.evil.to_str().unwrap(),
            self.git_dir.to_str().unwrap(),
            self.common_dir.to_str().unwrap(),
        ];
        let out = if confined {
            self.exec(&self.agent_wt, &self.agent_wt, "/bin/sh", &args)
        } else {
            let mut cmd = Command::new("/bin/sh");
            cmd.args(args)
                .current_dir(&self.agent_wt)
                .env("HOME", &self.home);
            run_as(AGENT, &mut cmd)
        };
        assert!(String::from_utf8_lossy(&out.stdout).contains("planted"));
    }

    /// The human's routine in the repository and in the worktree.
    fn human_works(&self) {
        for (dir, file) in [(&self.proj, "a.txt"), (&self.agent_wt, "w.txt")] {
            self.agent_write(&dir.join(file), "changed by the human\n");
            human_git(AGENT, dir, &["status"]);
            human_git(AGENT, dir, &["add", file]);
            human_git(AGENT, dir, &["commit", "-qm", "human"]);
            human_git(AGENT, dir, &["log", "-p", "-2"]);
            human_git(AGENT, dir, &["diff", "HEAD~1"]);
        }
    }

    fn markers(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.markers)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

#[test]
fn commit_in_a_worktree_whose_repository_lies_outside_the_write_roots() {
    if !require_root("commit_in_a_worktree_whose_repository_lies_outside_the_write_roots") {
        return;
    }
    for mode in [
        None,
        Some("VERBD_EXEC_MOUNT_NAMESPACE"),
        Some("VERBD_EXEC_LANDLOCK_ONLY"),
    ] {
        println!("isolation: {mode:?}");
        commit_in_the_worktree(Setup { mode, ..setup() });
    }
}

fn commit_in_the_worktree(s: Setup) {
    let status = s.status(&s.agent_wt, &s.agent_wt);
    assert!(
        status.contains(&format!(
            "git: followed {}/.git (a linked worktree's gitlink) to its git directory {} and common directory {}: writable {}, {}/objects, {}/refs, {}/logs (",
            s.agent_wt.display(),
            s.git_dir.display(),
            s.common_dir.display(),
            s.git_dir.display(),
            s.common_dir.display(),
            s.common_dir.display(),
            s.common_dir.display(),
        )),
        "{status}"
    );
    assert!(
        status.contains(&format!(
            "common directory (commondir) {} (outside the write roots, followed from the worktree's `.git` file",
            s.common_dir.display()
        )),
        "{status}"
    );
    s.agent_write(&s.agent_wt.join("b.txt"), "two\n");
    s.agent_git(&["add", "b.txt"]);
    s.agent_git(&["commit", "-qm", "two"]);
    s.agent_git(&["branch", "agent-topic"]);
    s.agent_write(&s.agent_wt.join("b.txt"), "three\n");
    // Landlock-only: nothing is removed directly in a split write root (`b.txt` when stashing).
    if s.mode != Some("VERBD_EXEC_LANDLOCK_ONLY") {
        s.agent_git(&["stash", "-q"]);
        s.agent_git(&["stash", "apply", "-q"]);
    }
    s.agent_git(&["commit", "-qam", "three"]);
    // Deleting a ref locks `packed-refs`, at the top of the common directory, which stays
    // read-only: refused, the branch kept.
    let out = s.exec(
        &s.agent_wt,
        &s.agent_wt,
        "/usr/bin/git",
        &["branch", "-D", "agent-topic"],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("packed-refs.lock"),
        "{out:?}"
    );
    assert_eq!(
        must(human_git(AGENT, &s.proj, &["log", "--format=%s", "agent"])),
        "three\ntwo\none\n"
    );
    assert_eq!(
        must(human_git(
            AGENT,
            &s.proj,
            &["log", "--format=%s", "agent-topic"]
        )),
        "two\none\n"
    );
    assert_eq!(
        must(human_git(AGENT, &s.agent_wt, &["status", "--porcelain"])),
        ""
    );
    assert_eq!(
        must(human_git(AGENT, &s.proj, &["status", "--porcelain"])),
        ""
    );
    // What the human's git obeys in the repository stays out of reach.
    let config = std::fs::read(s.common_dir.join("config")).unwrap();
    let out = s.exec(
        &s.agent_wt,
        &s.agent_wt,
        "/usr/bin/git",
        &["config", "core.fsmonitor", "/bin/true"],
    );
    assert!(!out.status.success());
    assert_eq!(std::fs::read(s.common_dir.join("config")).unwrap(), config);
    let out = s.exec(
        &s.agent_wt,
        &s.agent_wt,
        "/bin/sh",
        &[
            "-c",
            "echo x > ../proj/a.txt || echo x > ../proj/.git/description",
        ],
    );
    assert!(!out.status.success());
    assert_eq!(
        std::fs::read_to_string(s.proj.join("a.txt")).unwrap(),
        "one\n"
    );
}

/// A write root `name` in the home, owned by the agent, whose `.git` is made by `make`.
fn forged_root(s: &Setup, name: &str, make: impl FnOnce(&Path)) -> PathBuf {
    let root = s.home.join(name);
    std::fs::create_dir(&root).unwrap();
    make(&root);
    Command::new("chown")
        .args(["-h", "-R", &format!("{AGENT}:{AGENT}")])
        .arg(&root)
        .status()
        .unwrap();
    root
}

/// Under `verbd exec` writing only `root`: `--print-status` says the `.git` was not followed
/// and why, and the agent can write none of `targets`.
fn grants_nothing(s: &Setup, root: &Path, reason: &str, targets: &[PathBuf]) {
    let status = s.status(root, root);
    assert!(
        status.contains(&format!(
            "git: not followed: {}/.git {reason}",
            root.display()
        )),
        "{status}"
    );
    assert!(
        status.contains("nothing outside the write root granted"),
        "{status}"
    );
    for target in targets {
        let file = target.join("planted-by-agent");
        let out = s.exec(
            root,
            root,
            "/bin/sh",
            &["-c", &format!("echo x > '{}'", file.display())],
        );
        assert!(!out.status.success(), "wrote {}", file.display());
        assert!(!file.exists(), "{}", file.display());
    }
}

#[test]
fn a_gitlink_anywhere_else_grants_nothing() {
    if !require_root("a_gitlink_anywhere_else_grants_nothing") {
        return;
    }
    let s = setup();
    let common = s.common_dir.clone();
    let everything = [
        common.clone(),
        common.join("objects"),
        common.join("refs"),
        common.join("hooks"),
        s.git_dir.clone(),
        s.proj.clone(),
    ];
    // A symlinked `.git` to the main git directory: git would take it as the git directory.
    let root = forged_root(&s, "symlinked", |root| {
        std::os::unix::fs::symlink(&common, root.join(".git")).unwrap();
    });
    grants_nothing(
        &s,
        &root,
        "is a symlink (only a gitlink file is followed)",
        &everything,
    );
    // A gitlink to the main git directory.
    let root = forged_root(&s, "main-gitdir", |root| {
        std::fs::write(root.join(".git"), format!("gitdir: {}\n", common.display())).unwrap();
    });
    grants_nothing(
        &s,
        &root,
        &format!(
            "names {}, which is not a linked worktree's git directory",
            common.display()
        ),
        &everything,
    );
    // A gitlink to ~/.ssh.
    let ssh = s.home.join(".ssh");
    std::fs::create_dir(&ssh).unwrap();
    std::os::unix::fs::chown(&ssh, Some(AGENT), Some(AGENT)).unwrap();
    let root = forged_root(&s, "ssh", |root| {
        std::fs::write(root.join(".git"), format!("gitdir: {}\n", ssh.display())).unwrap();
    });
    grants_nothing(
        &s,
        &root,
        &format!(
            "names {}, which is not a linked worktree's git directory",
            ssh.display()
        ),
        std::slice::from_ref(&ssh),
    );
    // A gitlink to the git directory of another worktree of the same repository (the one
    // the human made for the agent elsewhere): its `gitdir` names that worktree, not this one.
    let root = forged_root(&s, "other-worktree", |root| {
        std::fs::write(
            root.join(".git"),
            format!("gitdir: {}\n", s.git_dir.display()),
        )
        .unwrap();
    });
    grants_nothing(
        &s,
        &root,
        &format!(
            "names {}, the git directory of another worktree ({}/.git), not of this one",
            s.git_dir.display(),
            s.agent_wt.display()
        ),
        &everything,
    );
    // Another user's repository with a worktree in a directory the agent owns: the git
    // directories are not the write root's owner's.
    let victim_home = s.dir.path().join("victim");
    std::fs::create_dir(&victim_home).unwrap();
    std::os::unix::fs::chown(&victim_home, Some(VICTIM), Some(VICTIM)).unwrap();
    must(human_git(
        VICTIM,
        &victim_home,
        &["init", "-q", "-b", "main", "repo"],
    ));
    let victim = victim_home.join("repo");
    must(human_git(
        VICTIM,
        &victim,
        &["commit", "-q", "--allow-empty", "-m", "victim"],
    ));
    must(human_git(
        VICTIM,
        &victim,
        &["worktree", "add", "-q", "-b", "w", "../wt"],
    ));
    let victim_wt = victim_home.join("wt");
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&victim_wt)
        .status()
        .unwrap();
    let victim_git = std::fs::canonicalize(victim.join(".git/worktrees/wt")).unwrap();
    grants_nothing(
        &s,
        &victim_wt,
        &format!(
            "leads to {}, owned by uid {VICTIM}, not by the write root's owner (uid {AGENT})",
            victim_git.display()
        ),
        &[victim_git.clone(), victim.join(".git/objects")],
    );
}

#[test]
fn plants_in_the_followed_git_directories_run_nothing_in_the_humans_git() {
    if !require_root("plants_in_the_followed_git_directories_run_nothing_in_the_humans_git") {
        return;
    }
    let s = setup();
    // The agent commits, then tries every plant.
    s.agent_write(&s.agent_wt.join("b.txt"), "two\n");
    s.agent_git(&["add", "b.txt"]);
    s.agent_git(&["commit", "-qm", "two"]);
    s.plant(true);
    assert!(
        !s.agent_wt.join("fake/.git").exists() && s.agent_wt.join(".git").is_file(),
        "the worktree's gitlink is the human's"
    );
    assert_eq!(
        std::fs::read_to_string(s.git_dir.join("commondir")).unwrap(),
        "../..\n"
    );
    s.human_works();
    assert_eq!(
        s.markers(),
        Vec::<String>::new(),
        "the human's git ran the agent's programs"
    );
    assert_eq!(
        must(human_git(AGENT, &s.proj, &["log", "--format=%s", "agent"])),
        "human\ntwo\none\n"
    );
}

#[test]
fn the_same_plants_without_verbd_exec_run_the_agents_programs() {
    if !require_root("the_same_plants_without_verbd_exec_run_the_agents_programs") {
        return;
    }
    let s = setup();
    s.plant(false);
    s.human_works();
    assert!(!s.markers().is_empty(), "the plants bite unconfined");
}
