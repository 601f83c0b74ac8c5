//! After an agent session under `verbd exec` that tried every plant we could think of, the
//! human's `git status`, `git commit`, `git pull` and `git log -p` run nothing the agent chose
//! (real git, real uids; the human works as the same uid, as `verbd exec` runs as its caller).
//!
//! The plants: a hook (new, by hard link, by symlink, by replacing `hooks/`), `core.fsmonitor`
//! through `git config`, through `echo >> .git/config`, through a rename over the config,
//! `include.path` to a file the agent wrote (by `git config` and by rename), `core.hooksPath`,
//! `core.worktree`, a submodule's config under `.git/modules`, `.gitattributes` and
//! `info/attributes` with a filter, a second name for `.git/config`, a new repository it
//! initialised (its config and its hooks), a directory prepared elsewhere and renamed to
//! `.git`, and a paused rebase whose todo list runs a command.
//!
//! Control: the same plants made without `verbd exec` make the human's git run the agent's
//! programs.
use crate::common;
use common::policy::{Sandbox, write_exec_policy};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const AGENT: u32 = 63430;

/// `plants.sh EVIL`: run in the repository; every step may fail.
const PLANTS: &str = r#"
E="$1"
step() { "$@" 2>/dev/null || true; }
hook() { printf '#!/bin/sh\n"%s" "%s"\n' "$E/run.sh" "$1"; }
# Hooks.
step sh -c "$(printf 'printf %%s "$(hook hook-pre-commit)" > .git/hooks/pre-commit')"
step chmod +x .git/hooks/pre-commit
step cp "$E/hook-copy" .git/hooks/post-merge
step ln "$E/hook-link" .git/hooks/post-commit
step ln -s "$E/hook-symlink" .git/hooks/post-checkout
step mv .git/hooks .git/hooks-old
step ln -s "$E/hooks" .git/hooks
# fsmonitor and friends, three ways.
step git config core.fsmonitor "$E/fsmonitor-config"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-append' >> .git/config"
step sh -c "cp .git/config cfg.new && printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-rename' >> cfg.new && mv cfg.new .git/config"
step sh -c "cp .git/config .git/config.lock.x && printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-lock' >> .git/config.lock.x && mv .git/config.lock.x .git/config"
step git config core.hooksPath "$E/hooks"
step git config core.worktree "$E"
step git config alias.status "!$E/run.sh alias"
# include.path to a file the agent wrote.
printf '[core]\n\tfsmonitor = %s\n' "$E/fsmonitor-include" > inc.cfg
step git config include.path ../inc.cfg
step sh -c "cp .git/config cfg2.new && printf '[include]\n\tpath = %s\n' '$PWD/inc.cfg' >> cfg2.new && mv cfg2.new .git/config"
# A second name for the config, written through.
step ln .git/config cfg-link
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-link' >> cfg-link"
# Filters through attributes.
step sh -c "printf '* filter=evil diff=evil\n' > .gitattributes"
step sh -c "mkdir -p .git/info && printf '* filter=evil diff=evil\n' > .git/info/attributes"
step git config filter.evil.clean "$E/run.sh filter"
step git config diff.evil.textconv "$E/run.sh textconv"
# A submodule's git directory.
step mkdir -p .git/modules/lib
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-module' > .git/modules/lib/config"
# A new repository the agent initialised, with its own config and hooks.
step git init -q sub
step git -C sub config core.fsmonitor "$E/fsmonitor-sub"
step sh -c "$(printf 'printf %%s "$(hook hook-sub)" > sub/.git/hooks/pre-commit')"
step chmod +x sub/.git/hooks/pre-commit
step sh -c "cp sub/.git/hooks/pre-commit.sample x && mv x sub/.git/hooks/pre-commit"
step mv sub/.git/hooks/pre-commit.sample sub/.git/hooks/pre-commit
# A git directory prepared under another name, then renamed into place.
step mkdir -p stage/hooks stage/objects stage/refs sub2
step sh -c "printf 'ref: refs/heads/main\n' > stage/HEAD"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-stage' > stage/config"
step mv stage sub2/.git
# A paused rebase whose todo runs a command when continued.
step mkdir -p .git/rebase-merge
step sh -c "printf 'exec %s rebase\n' '$E/run.sh' > .git/rebase-merge/git-rebase-todo"
echo planted
"#;

/// `worktree-plants.sh EVIL`, run in the repository: a linked worktree whose git directory
/// is made to take its config and hooks from elsewhere. `../fake` is a common directory of the
/// agent's own (its config runs an fsmonitor, its hook runs); every step may fail.
const WORKTREE_PLANTS: &str = r#"
E="$1"
R="$PWD"
step() { "$@" 2>/dev/null || true; }
step mkdir -p ../fake/hooks ../fake/objects ../fake/refs
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-commondir' > ../fake/config"
step cp "$E/hook-commondir" ../fake/hooks/pre-commit
step chmod +x ../fake/hooks/pre-commit
# A worktree git made, its commondir then replaced (written over; removed and rewritten).
step git worktree add -q ../wt
step sh -c "printf '%s\n' '$R/../fake' > .git/worktrees/wt/commondir"
step rm -f .git/worktrees/wt/commondir
step sh -c "printf '%s\n' '$R/../fake' > .git/worktrees/wt/commondir"
# A worktree git directory made by hand, naming the fake common directory.
step mkdir -p .git/worktrees/hand
step sh -c "printf 'ref: refs/heads/main\n' > .git/worktrees/hand/HEAD"
step sh -c "printf '%s\n' '$R/../fake' > .git/worktrees/hand/commondir"
step mkdir ../wt2
step sh -c "printf 'gitdir: %s\n' '$R/.git/worktrees/hand' > ../wt2/.git"
# A gitlink straight to the fake directory, and a relative one.
step mkdir ../wt3 ../wt5
step sh -c "printf 'gitdir: %s\n' '$R/../fake' > ../wt3/.git"
step sh -c "printf 'gitdir: ../fake\n' > ../wt5/.git"
# The worktree's git directory as a git directory of its own: its config and hooks.
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-wtconfig' > .git/worktrees/wt/config"
step mkdir -p .git/worktrees/wt/hooks
step cp "$E/hook-wt" .git/worktrees/wt/hooks/pre-commit
step chmod +x .git/worktrees/wt/hooks/pre-commit
# config.worktree with the extension that makes git read it.
step git config extensions.worktreeConfig true
step git -C ../wt config --worktree core.fsmonitor "$E/fsmonitor-configworktree"
step sh -c "printf '[core]\n\tfsmonitor = %s\n' '$E/fsmonitor-configworktree' > .git/worktrees/wt/config.worktree"
# A worktree git directory prepared under another name and renamed into place.
step mkdir -p stage
step sh -c "printf 'ref: refs/heads/main\n' > stage/HEAD"
step sh -c "printf '%s\n' '$R/../fake' > stage/commondir"
step mv stage .git/worktrees/staged
step mkdir ../wt4
step sh -c "printf 'gitdir: %s\n' '$R/.git/worktrees/staged' > ../wt4/.git"
echo planted
"#;

/// `submodule-plants.sh EVIL`, run in a repository with a submodule `lib` (checked out one
/// commit behind the recorded one): `.gitmodules` rewritten; an update command (`update =
/// !cmd`, which the human's `git submodule update` runs) through `git config` and a rename
/// over the config; the submodule's hooks, `core.hooksPath` and fsmonitor; its gitlink pointed at a
/// directory of the agent's; a second submodule added, and `git submodule update` run.
const SUBMODULE_PLANTS: &str = r#"
E="$1"
R="$PWD"
U="$(git config -f .gitmodules submodule.lib.url)"
step() { "$@" 2>/dev/null || true; }
step sh -c "printf '[submodule \"lib\"]\n\tpath = lib\n\turl = %s\n\tignore = all\n' '$U' > .gitmodules"
step git config submodule.lib.update "!$E/run.sh config-update"
step sh -c "cp .git/config c.new && git config -f c.new submodule.lib.update '!$E/run.sh rename-update' && mv c.new .git/config"
step cp "$E/hooks/post-checkout" .git/modules/lib/hooks/post-checkout
step chmod +x .git/modules/lib/hooks/post-checkout
step git -C lib config core.hooksPath "$E/hooks"
step git -C lib config core.fsmonitor "$E/fsmonitor-module"
step sh -c "printf '[core]\n\thooksPath = %s\n' '$E/hooks' >> .git/modules/lib/config"
step mkdir -p ../fake/hooks ../fake/objects ../fake/refs
step sh -c "printf 'ref: refs/heads/main\n' > ../fake/HEAD"
step sh -c "printf '[core]\n\thooksPath = %s\n' '$E/hooks' > ../fake/config"
step mkdir lib3
step sh -c "printf 'gitdir: %s\n' '$R/../fake' > lib3/.git"
step git -c protocol.file.allow=always submodule add -q "$U" lib2
step git -c protocol.file.allow=always submodule update -q --init
echo planted
"#;

struct Setup {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    evil: PathBuf,
    markers: PathBuf,
    policy: PathBuf,
}

fn run_as_agent(cmd: &mut Command) -> std::process::Output {
    cmd.uid(AGENT)
        .gid(AGENT)
        .env("GIT_AUTHOR_NAME", "Human")
        .env("GIT_AUTHOR_EMAIL", "human@example.org")
        .env("GIT_COMMITTER_NAME", "Human")
        .env("GIT_COMMITTER_EMAIL", "human@example.org")
        .env_remove("VERBD_EXEC_MOUNT_NAMESPACE")
        .env_remove("VERBD_EXEC_LANDLOCK_ONLY")
        .output()
        .unwrap()
}

fn git(cwd: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new("/usr/bin/git");
    cmd.args(args).current_dir(cwd);
    let out = run_as_agent(&mut cmd);
    println!(
        "git {args:?} in {}: {}{}",
        cwd.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The human's repository (a clone with an upstream that has one more commit), the agent's
/// programs and the directory they leave their marks in.
fn setup() -> Setup {
    let dir = open_tempdir();
    let work = dir.path().join("work");
    let evil = dir.path().join("evil");
    let markers = dir.path().join("markers");
    for d in [&work, &evil, &markers] {
        std::fs::create_dir_all(d).unwrap();
    }
    let run = evil.join("run.sh");
    std::fs::write(
        &run,
        format!("#!/bin/sh\ntouch \"{}/$1\"\nexit 1\n", markers.display()),
    )
    .unwrap();
    std::fs::create_dir(evil.join("hooks")).unwrap();
    let scripts = [
        "hook-copy",
        "hook-link",
        "hook-symlink",
        "hooks/pre-commit",
        "hooks/post-merge",
        "fsmonitor-config",
        "fsmonitor-append",
        "fsmonitor-rename",
        "fsmonitor-lock",
        "fsmonitor-include",
        "fsmonitor-link",
        "fsmonitor-module",
        "fsmonitor-sub",
        "fsmonitor-stage",
        "fsmonitor-commondir",
        "fsmonitor-wtconfig",
        "fsmonitor-configworktree",
        "hook-commondir",
        "hook-wt",
        "hooks/post-checkout",
    ];
    for name in scripts {
        let marker = name.replace('/', "-");
        std::fs::write(
            evil.join(name),
            format!("#!/bin/sh\n\"{}\" {marker}\n", run.display()),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("plants.sh"), PLANTS).unwrap();
    std::fs::write(dir.path().join("worktree-plants.sh"), WORKTREE_PLANTS).unwrap();
    std::fs::write(dir.path().join("submodule-plants.sh"), SUBMODULE_PLANTS).unwrap();
    Command::new("chmod")
        .args(["-R", "a+rx"])
        .arg(&evil)
        .status()
        .unwrap();
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&work)
        .arg(&markers)
        .status()
        .unwrap();
    std::fs::set_permissions(&markers, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The human's repositories.
    assert!(
        git(
            &work,
            &["init", "-q", "--bare", "-b", "main", "upstream.git"]
        )
        .status
        .success()
    );
    assert!(
        git(&work, &["clone", "-q", "upstream.git", "repo"])
            .status
            .success()
    );
    let repo = work.join("repo");
    let other = work.join("other");
    let commit = |clone: &Path, file: &str| {
        std::fs::write(clone.join(file), "text\n").unwrap();
        std::os::unix::fs::chown(clone.join(file), Some(AGENT), Some(AGENT)).unwrap();
        assert!(git(clone, &["add", file]).status.success());
        assert!(git(clone, &["commit", "-qm", file]).status.success());
        assert!(
            git(clone, &["push", "-q", "origin", "HEAD:main"])
                .status
                .success()
        );
    };
    commit(&repo, "a.txt");
    assert!(
        git(&work, &["clone", "-q", "upstream.git", "other"])
            .status
            .success()
    );
    commit(&other, "b.txt");
    let policy = dir.path().join("policy.toml");
    let scripts =
        ["plants.sh", "worktree-plants.sh", "submodule-plants.sh"].map(|s| dir.path().join(s));
    let mut read = vec![
        "/usr",
        "/lib",
        "/lib64",
        "/bin",
        "/etc",
        evil.to_str().unwrap(),
    ];
    read.extend(scripts.iter().map(|s| s.to_str().unwrap()));
    write_exec_policy(&policy, Sandbox::new(&read, &[work.to_str().unwrap()]));
    Setup {
        _dir: dir,
        repo,
        evil,
        markers,
        policy,
    }
}

impl Setup {
    fn plant(&self, confined: bool) {
        self.run_plants("plants.sh", confined);
    }

    fn run_plants(&self, script: &str, confined: bool) {
        let script = self.policy.with_file_name(script);
        let mut cmd = if confined {
            let mut cmd = Command::new(BIN);
            cmd.args(["exec", "--policy"]).arg(&self.policy).args([
                "--profile",
                "agent",
                "--",
                "/bin/sh",
            ]);
            cmd
        } else {
            Command::new("/bin/sh")
        };
        cmd.arg(&script).arg(&self.evil).current_dir(&self.repo);
        let out = run_as_agent(&mut cmd);
        println!(
            "plants (confined: {confined}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("planted"));
    }

    /// The human's routine: status, commit, pull, log -p, in the repository and in what the
    /// agent made inside it.
    fn human_works(&self) {
        let repo = &self.repo;
        std::fs::write(repo.join("a.txt"), "changed by the human\n").unwrap();
        std::os::unix::fs::chown(repo.join("a.txt"), Some(AGENT), Some(AGENT)).unwrap();
        git(repo, &["status"]);
        git(repo, &["commit", "-qam", "human"]);
        git(repo, &["pull", "-q", "--no-rebase", "--no-edit"]);
        git(repo, &["log", "-p", "-3"]);
        for sub in ["sub", "sub2"] {
            let dir = repo.join(sub);
            if dir.is_dir() {
                git(&dir, &["status"]);
                git(&dir, &["commit", "-q", "--allow-empty", "-m", "human"]);
                git(&dir, &["log", "-p"]);
            }
        }
    }

    /// The human's routine in the repository and in every linked worktree the plants made.
    fn human_works_in_worktrees(&self) {
        git(&self.repo, &["status"]);
        git(&self.repo, &["worktree", "list"]);
        let work = self.repo.parent().unwrap();
        for name in ["wt", "wt2", "wt3", "wt4", "wt5"] {
            let dir = work.join(name);
            if dir.join(".git").exists() {
                git(&dir, &["status"]);
                git(&dir, &["commit", "-q", "--allow-empty", "-m", "human"]);
                git(&dir, &["log", "-p", "-1"]);
            }
        }
    }

    /// Gives the human's repository a submodule `lib` (a repository with two commits), checked
    /// out one commit behind the one recorded, as after a `git pull` that moved it.
    fn add_submodule(&self) {
        let work = self.repo.parent().unwrap();
        let lib = work.join("libsrc");
        std::fs::create_dir(&lib).unwrap();
        std::os::unix::fs::chown(&lib, Some(AGENT), Some(AGENT)).unwrap();
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["commit", "-q", "--allow-empty", "-m", "lib one"],
            &["commit", "-q", "--allow-empty", "-m", "lib two"],
        ] {
            assert!(git(&lib, args).status.success());
        }
        let url = lib.to_str().unwrap();
        for args in [
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                url,
                "lib",
            ][..],
            &["commit", "-qm", "submodule"],
        ] {
            assert!(git(&self.repo, args).status.success());
        }
        assert!(
            git(&self.repo.join("lib"), &["checkout", "-q", "HEAD~1"])
                .status
                .success()
        );
    }

    /// The human's routine with submodules: update, status, a checkout in the submodule.
    fn human_works_with_submodules(&self) {
        let repo = &self.repo;
        git(
            repo,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "update",
                "--init",
            ],
        );
        git(repo, &["status"]);
        git(repo, &["commit", "-q", "--allow-empty", "-m", "human"]);
        for sub in ["lib", "lib2", "lib3"] {
            let dir = repo.join(sub);
            if dir.join(".git").exists() {
                git(&dir, &["status"]);
                git(&dir, &["checkout", "-q", "-b", "human"]);
                git(&dir, &["commit", "-q", "--allow-empty", "-m", "human"]);
            }
        }
    }

    fn marks(&self) -> Vec<String> {
        let mut marks: Vec<String> = std::fs::read_dir(&self.markers)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        marks.sort();
        marks
    }
}

#[test]
fn planted_without_verbd_exec_the_humans_git_runs_the_agents_programs() {
    if !require_root("planted_without_verbd_exec_the_humans_git_runs_the_agents_programs") {
        return;
    }
    let setup = setup();
    setup.plant(false);
    setup.human_works();
    let marks = setup.marks();
    println!("ran: {marks:?}");
    // Later plants override earlier ones (core.hooksPath wins over `.git/hooks`, the last
    // fsmonitor over the others): these are the ones left standing.
    for expected in [
        "hooks-pre-commit",
        "textconv",
        "fsmonitor-sub",
        "fsmonitor-stage",
    ] {
        assert!(marks.iter().any(|m| m == expected), "{expected}: {marks:?}");
    }
}

#[test]
fn after_every_plant_under_verbd_exec_the_humans_git_runs_nothing_the_agent_chose() {
    if !require_root(
        "after_every_plant_under_verbd_exec_the_humans_git_runs_nothing_the_agent_chose",
    ) {
        return;
    }
    let setup = setup();
    let config_before = std::fs::read(setup.repo.join(".git/config")).unwrap();
    setup.plant(true);
    assert_eq!(
        std::fs::read(setup.repo.join(".git/config")).unwrap(),
        config_before,
        "the human's config is as it was"
    );
    let hooks: Vec<String> = std::fs::read_dir(setup.repo.join(".git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(hooks.iter().all(|h| h.ends_with(".sample")), "{hooks:?}");
    assert!(!setup.repo.join(".git/modules").exists());
    assert!(!setup.repo.join(".gitattributes").exists());
    assert!(!setup.repo.join(".git/info/attributes").exists());
    assert!(!setup.repo.join("sub2/.git").exists());
    // The repository the agent made: its config holds data keys only, its hooks are samples.
    let sub_config = std::fs::read_to_string(setup.repo.join("sub/.git/config")).unwrap();
    assert!(!sub_config.contains("fsmonitor"), "{sub_config}");
    let sub_hooks: Vec<String> = std::fs::read_dir(setup.repo.join("sub/.git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        sub_hooks.iter().all(|h| h.ends_with(".sample")),
        "{sub_hooks:?}"
    );
    setup.human_works();
    assert_eq!(
        setup.marks(),
        Vec::<String>::new(),
        "the human's git ran these"
    );
}

#[test]
fn worktree_plants_without_verbd_exec_make_the_humans_git_run_the_agents_programs() {
    if !require_root(
        "worktree_plants_without_verbd_exec_make_the_humans_git_run_the_agents_programs",
    ) {
        return;
    }
    let setup = setup();
    setup.run_plants("worktree-plants.sh", false);
    setup.human_works_in_worktrees();
    let marks = setup.marks();
    println!("ran: {marks:?}");
    // The commondir made the human's commit run the fake common directory's hook; the
    // worktree's own config ran its fsmonitor.
    for expected in ["hook-commondir", "fsmonitor-configworktree"] {
        assert!(marks.iter().any(|m| m == expected), "{expected}: {marks:?}");
    }
}

#[test]
fn after_worktree_plants_under_verbd_exec_the_humans_git_runs_nothing_the_agent_chose() {
    if !require_root(
        "after_worktree_plants_under_verbd_exec_the_humans_git_runs_nothing_the_agent_chose",
    ) {
        return;
    }
    let setup = setup();
    let config_before = std::fs::read(setup.repo.join(".git/config")).unwrap();
    setup.run_plants("worktree-plants.sh", true);
    let work = setup.repo.parent().unwrap();
    let admin = setup.repo.join(".git/worktrees");
    // The linked worktree git made works, and its git directory names the repository.
    assert_eq!(
        std::fs::read_to_string(admin.join("wt/commondir")).unwrap(),
        "../..\n"
    );
    assert!(
        work.join("wt/a.txt").exists(),
        "git worktree add checked out"
    );
    assert_eq!(
        std::fs::read_to_string(admin.join("hand/commondir")).unwrap(),
        "../..\n"
    );
    // No gitlink to anything but a worktree's git directory; nothing renamed into place.
    assert!(!work.join("wt3/.git").exists());
    assert!(!work.join("wt5/.git").exists());
    assert!(!admin.join("staged").exists());
    for planted in ["wt/config", "wt/hooks", "wt/config.worktree"] {
        assert!(!admin.join(planted).exists(), "{planted}");
    }
    // Only the data key `extensions.worktreeConfig` was added to the human's config.
    let config = std::fs::read_to_string(setup.repo.join(".git/config")).unwrap();
    assert!(
        config.starts_with(std::str::from_utf8(&config_before).unwrap())
            && !config.contains(setup.evil.to_str().unwrap()),
        "{config}"
    );
    setup.human_works_in_worktrees();
    assert_eq!(
        setup.marks(),
        Vec::<String>::new(),
        "the human's git ran these"
    );
}

#[test]
fn submodule_plants_without_verbd_exec_make_the_humans_git_run_the_agents_programs() {
    if !require_root(
        "submodule_plants_without_verbd_exec_make_the_humans_git_run_the_agents_programs",
    ) {
        return;
    }
    let setup = setup();
    setup.add_submodule();
    setup.run_plants("submodule-plants.sh", false);
    setup.human_works_with_submodules();
    let marks = setup.marks();
    println!("ran: {marks:?}");
    // The update command ran on `git submodule update`; the submodule's hook, hooksPath and
    // fsmonitor ran on checkout, commit and status.
    for expected in [
        "rename-update",
        "hooks-pre-commit",
        "hooks-post-checkout",
        "fsmonitor-module",
    ] {
        assert!(marks.iter().any(|m| m == expected), "{expected}: {marks:?}");
    }
}

#[test]
fn after_submodule_plants_under_verbd_exec_the_humans_git_runs_nothing_the_agent_chose() {
    if !require_root(
        "after_submodule_plants_under_verbd_exec_the_humans_git_runs_nothing_the_agent_chose",
    ) {
        return;
    }
    let setup = setup();
    setup.add_submodule();
    let gitmodules = std::fs::read(setup.repo.join(".gitmodules")).unwrap();
    let module_config = std::fs::read(setup.repo.join(".git/modules/lib/config")).unwrap();
    setup.run_plants("submodule-plants.sh", true);
    assert_eq!(
        std::fs::read(setup.repo.join(".gitmodules")).unwrap(),
        gitmodules
    );
    assert_eq!(
        std::fs::read(setup.repo.join(".git/modules/lib/config")).unwrap(),
        module_config
    );
    let config = std::fs::read_to_string(setup.repo.join(".git/config")).unwrap();
    assert!(!config.contains(setup.evil.to_str().unwrap()), "{config}");
    assert!(
        !setup
            .repo
            .join(".git/modules/lib/hooks/post-checkout")
            .exists()
    );
    assert!(!setup.repo.join(".git/modules/lib2").exists());
    assert!(
        !setup.repo.join("lib3/.git").exists(),
        "no gitlink to the agent's directory"
    );
    setup.human_works_with_submodules();
    assert_eq!(
        setup.marks(),
        Vec::<String>::new(),
        "the human's git ran these"
    );
}
