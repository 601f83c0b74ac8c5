//! Files a human's routine tools execute or obey are protected (issue 11, item 5), against a
//! hostile agent uid (61303) that writes through the file verbs, asks the hook's `check`, and
//! runs under `verbd exec`.
//!
//! The attack that started it: a `file.write` to `.git/modules/sub/config` setting
//! `core.fsmonitor` made the human's next `git status` in the submodule run the agent's command.
use crate::common;
use crate::hostile;

use common::policy::{Category, Policy, Sandbox, Secret, Verb};
use common::*;
use std::path::Path;
use std::process::Command;
use verbd::protocol::{Request, Response};

const AGENT: u32 = 61303;

/// `edit`, the agent's `file.write` beneath `repo`, without approval.
fn policy() -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .sandbox(
            "agent",
            Sandbox::new(&["/usr", "/lib", "/etc", "/bin"], &["@DIR@/repo"]),
        )
        .verb(
            "edit",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/repo"])
                .description("write a file in the repository")
                .without_approval()
                .roles(&["agent"]),
        )
        .render()
}

/// Paths (relative to the repository) whose writing makes a later human tool run or obey the
/// agent's content; every parent directory exists.
const EXECUTED_OR_OBEYED: &[&str] = &[
    ".git/modules/sub/config",
    ".git/modules/sub/hooks/post-checkout",
    ".git/commondir",
    ".git/config.worktree",
    ".git/rebase-merge/git-rebase-todo",
    ".gitconfig",
    ".config/git/config",
    ".gitattributes",
    ".bash_aliases",
    ".zlogout",
    ".inputrc",
    ".github/workflows/ci.yml",
    ".gitlab-ci.yml",
    ".pre-commit-config.yaml",
    ".vscode/tasks.json",
    ".idea/workspace.xml",
    ".exrc",
    ".nvimrc",
    ".dir-locals.el",
    ".windsurfrules",
    ".clinerules",
    "GEMINI.md",
    "sub/.git",
    "sub/deep/AGENTS.md",
    // Agent runtimes' user and workspace configuration (MCP servers are commands).
    ".claude.json",
    ".copilot/mcp-config.json",
    ".codeium/windsurf/mcp_config.json",
    ".config/amp/settings.json",
    ".amp/settings.json",
    ".config/goose/config.yaml",
    // Sessions, terminals and services that run commands at the human's next login or start.
    ".tmux.conf",
    ".config/tmux/tmux.conf",
    ".screenrc",
    ".config/autostart/agent.desktop",
    ".config/systemd/user/agent.service",
    ".config/environment.d/agent.conf",
    ".xprofile",
    ".pam_environment",
    // Interpreters and editors that run code from configuration.
    ".local/lib/python3.12/site-packages/agent.pth",
    "sitecustomize.py",
    ".config/Code/User/settings.json",
    ".config/helix/languages.toml",
    ".psqlrc",
    // Other version control and CI.
    ".hg/hgrc",
    ".githooks/pre-commit",
    ".gitpod.yml",
    ".devcontainer.json",
];

/// Spellings that name a protected entry on a case-insensitive or normalizing file system.
const SPELLED: &[&str] = &[
    ".\u{17f}sh/authorized_keys",                          // long s: `.ssh`
    ".\u{df}h/authorized_keys",                            // sharp s folds to `ss`: `.ssh`
    "\u{ff23}\u{ff2c}\u{ff21}\u{ff35}\u{ff24}\u{ff25}.md", // full-width CLAUDE.md
    "\u{1d402}LAUDE.md",                                   // mathematical bold C
    ".g\u{200c}it/hooks/pre-commit", // zero-width non-joiner (HFS+ ignores it)
    ".bash\u{ad}rc",                 // soft hyphen
    ".BASHRC",
    "Sub/.GIT/Config",
    ".Claude.JSON",                             // case
    "\u{ff0e}tmux.conf",                        // full-width full stop: `.tmux.conf`
    ".config/\u{17f}ystemd/user/agent.service", // long s: `.config/systemd`
    ".HG/HGRC",
    ".xprofile. ",                             // trailing dot and space (SMB, NTFS)
    ".config/Code/U\u{200d}ser/settings.json", // zero-width joiner
];

fn start() -> Option<Daemon> {
    if !require_root("protected names") {
        return None;
    }
    let d = Daemon::start_with(&policy(), |dir| {
        let repo = dir.join("repo");
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(args)
                .env("HOME", dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        git(&["init", "-q", repo.to_str().unwrap()]);
        // A submodule whose git directory lives in the superproject's .git/modules.
        let sub = repo.join("sub");
        let sub_gitdir = repo.join(".git/modules/sub");
        std::fs::create_dir_all(repo.join(".git/modules")).unwrap();
        git(&[
            "init",
            "-q",
            "--separate-git-dir",
            sub_gitdir.to_str().unwrap(),
            sub.to_str().unwrap(),
        ]);
        for d in [
            ".git/rebase-merge",
            ".config/git",
            ".github/workflows",
            ".vscode",
            ".idea",
            "sub/deep",
            "src",
            ".copilot",
            ".codeium/windsurf",
            ".config/amp",
            ".amp",
            ".config/goose",
            ".config/tmux",
            ".config/autostart",
            ".config/systemd/user",
            ".config/environment.d",
            ".local/lib/python3.12/site-packages",
            ".config/Code/User",
            ".config/helix",
            ".hg",
            ".githooks",
            ".HG",
            ".config/\u{17f}ystemd/user",
            ".config/Code/U\u{200d}ser",
        ] {
            std::fs::create_dir_all(repo.join(d)).unwrap();
        }
        for f in [
            ".bash_aliases",
            ".zlogout",
            ".github/workflows/ci.yml",
            "src/main.rs",
            ".tmux.conf",
            ".psqlrc",
            ".config/systemd/user/agent.service",
            ".Tmux.Conf",
        ] {
            std::fs::write(repo.join(f), "original\n").unwrap();
        }
    });
    d.open_socket();
    Some(d)
}

fn repo(d: &Daemon) -> std::path::PathBuf {
    d.path("repo")
}

#[test]
fn the_submodule_fsmonitor_attack_runs_nothing() {
    let Some(d) = start() else { return };
    let marker = d.path("pwned");
    let config_path = repo(&d).join(".git/modules/sub/config");
    let original = std::fs::read_to_string(&config_path).unwrap();
    let poisoned = format!("{original}\tfsmonitor = \"touch {}\"\n", marker.display());
    let answers = hostile::requests_as(
        AGENT,
        &d.socket,
        &[hostile::call(
            "edit",
            &[
                ("path", config_path.to_str().unwrap()),
                ("content", &poisoned),
            ],
        )],
    );
    let answer = hostile::decode(&answers[0]);
    // The human's routine command in the submodule.
    let status = Command::new("git")
        .args(["status", "--short"])
        .current_dir(repo(&d).join("sub"))
        .env("HOME", d.path(""))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the agent's command ran in the human's `git status` (the write was answered {answer:?})"
    );
    assert!(status.status.success(), "{status:?}");
    match answer {
        Response::Denied { reason } => {
            assert!(
                reason.contains("protected name `.git/modules` (submodules' git directories"),
                "{reason}"
            )
        }
        other => panic!("the write was not refused: {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&config_path).unwrap(), original);
}

/// The file verb's and the hook's answers to every path, as the hostile uid.
fn answers_for(d: &Daemon, paths: &[&str]) -> Vec<(String, Response, Response)> {
    let mut requests = Vec::new();
    for rel in paths {
        let path = repo(d).join(rel).display().to_string();
        requests.push(hostile::call(
            "edit",
            &[("path", &path), ("content", "agent\n")],
        ));
        requests.push(Request::Check {
            path,
            tool: Some("Write".into()),
        });
    }
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    paths
        .iter()
        .zip(answers.chunks(2))
        .map(|(rel, pair)| {
            (
                rel.to_string(),
                hostile::decode(&pair[0]),
                hostile::decode(&pair[1]),
            )
        })
        .collect()
}

fn assert_all_refused(d: &Daemon, paths: &[&str]) {
    let mut accepted = Vec::new();
    for (rel, write, check) in answers_for(d, paths) {
        match &write {
            Response::Denied { reason } if reason.contains("protected") => {}
            other => accepted.push(format!("{rel:?}: file.write answered {other:?}")),
        }
        match &check {
            Response::Check {
                allowed: false,
                reason,
            } if reason.contains("protected") => {}
            other => accepted.push(format!("{rel:?}: check answered {other:?}")),
        }
    }
    assert!(accepted.is_empty(), "accepted:\n{}", accepted.join("\n"));
}

#[test]
fn file_verbs_and_the_hook_refuse_what_tools_execute_or_obey() {
    let Some(d) = start() else { return };
    assert_all_refused(&d, EXECUTED_OR_OBEYED);
    for rel in [".bash_aliases", ".zlogout", ".github/workflows/ci.yml"] {
        assert_eq!(
            std::fs::read_to_string(repo(&d).join(rel)).unwrap(),
            "original\n",
            "{rel} was changed"
        );
    }
    // Positive control: ordinary files are written and allowed.
    let answers = answers_for(&d, &["src/main.rs", "sub/deep/notes.md", ".gitignore"]);
    for (rel, write, check) in answers {
        assert!(matches!(write, Response::Ok { .. }), "{rel}: {write:?}");
        assert!(
            matches!(check, Response::Check { allowed: true, .. }),
            "{rel}: {check:?}"
        );
    }
}

#[test]
fn the_policy_file_and_the_operator_s_names_are_protected_from_file_verbs_and_the_hook() {
    if !require_root("protected names") {
        return;
    }
    // A file verb whose root holds the policy file itself and a directory the operator added to
    // the protected names: the agent must not rewrite the policy the daemon reloads, nor write
    // beneath a name the operator protected.
    let policy = Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .protected_names(&["deploy-keys"])
        .verb(
            "edit-anywhere",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@"])
                .description("write any file of the test directory")
                .without_approval()
                .roles(&["agent"]),
        )
        .render();
    let d = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir(dir.join("deploy-keys")).unwrap();
    });
    d.open_socket();
    let original = std::fs::read_to_string(&d.policy).unwrap();
    let attempt = |target: &Path| {
        let path = target.display().to_string();
        let answers = hostile::requests_as(
            AGENT,
            &d.socket,
            &[
                hostile::call(
                    "edit-anywhere",
                    &[("path", &path), ("content", "[verb.x]\n")],
                ),
                Request::Check {
                    path,
                    tool: Some("Write".into()),
                },
            ],
        );
        (hostile::decode(&answers[0]), hostile::decode(&answers[1]))
    };
    let mut accepted = Vec::new();
    for target in [d.policy.clone(), d.path("deploy-keys/id_ed25519")] {
        let (write, check) = attempt(&target);
        if !matches!(&write, Response::Denied { reason } if reason.contains("protected")) {
            accepted.push(format!(
                "{}: file.write answered {write:?}",
                target.display()
            ));
        }
        if !matches!(&check, Response::Check { allowed: false, reason } if reason.contains("protected"))
        {
            accepted.push(format!("{}: check answered {check:?}", target.display()));
        }
    }
    assert!(accepted.is_empty(), "accepted:\n{}", accepted.join("\n"));
    assert_eq!(
        std::fs::read_to_string(&d.policy).unwrap(),
        original,
        "the policy file was rewritten"
    );
    assert!(!d.path("deploy-keys/id_ed25519").exists());
    // Positive control: another file beneath the same root is written.
    let (write, check) = attempt(&d.path("notes.txt"));
    assert!(matches!(write, Response::Ok { .. }), "{write:?}");
    assert!(
        matches!(check, Response::Check { allowed: true, .. }),
        "{check:?}"
    );
}

#[test]
fn the_daemon_s_own_files_are_out_of_reach_of_file_verbs() {
    if !require_root("protected names") {
        return;
    }
    // File verbs run in the daemon itself, not in a sandboxed child: roots that hold the state
    // directory (journal, keys, witness) and a secret's source file must still not reach them.
    let policy = Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .secret("token", Secret::File("@DIR@/token.secret".into()))
        .verb(
            "read-anywhere",
            Verb::builtin(Category::ReadOnly, "file.read", &["@DIR@"])
                .description("read any file of the test directory")
                .roles(&["agent"]),
        )
        .verb(
            "write-anywhere",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@"])
                .description("write any file of the test directory")
                .without_approval()
                .roles(&["agent"]),
        )
        .render();
    let d = Daemon::start_with(&policy, |dir| {
        common::harness::write_secret(&dir.join("token.secret"), "s3cr3t-token-value-41");
    });
    d.open_socket();
    let journal = d.state.join("journal.jsonl");
    let mut requests = Vec::new();
    let private = [journal.clone(), d.path("token.secret")];
    for target in &private {
        let path = target.display().to_string();
        requests.push(hostile::call("read-anywhere", &[("path", &path)]));
        requests.push(hostile::call(
            "write-anywhere",
            &[("path", &path), ("content", "forged\n")],
        ));
    }
    let journal_before = std::fs::read(&journal).unwrap();
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    let mut reached = Vec::new();
    for (target, pair) in private.iter().zip(answers.chunks(2)) {
        for (op, answer) in ["file.read", "file.write"].iter().zip(pair) {
            match hostile::decode(answer) {
                Response::Denied { reason } if reason.contains("protected") => {}
                other => reached.push(format!("{op} {}: {other:?}", target.display())),
            }
        }
    }
    assert!(reached.is_empty(), "reached:\n{}", reached.join("\n"));
    let journal_after = std::fs::read(&journal).unwrap();
    assert!(
        journal_after.starts_with(&journal_before),
        "the journal was rewritten, not appended to"
    );
    assert_eq!(
        std::fs::read_to_string(d.path("token.secret")).unwrap(),
        "s3cr3t-token-value-41"
    );
    // Positive control: an ordinary file beside them is read.
    std::fs::write(d.path("notes.txt"), "ordinary\n").unwrap();
    let notes = d.path("notes.txt").display().to_string();
    let answer = hostile::requests_as(
        AGENT,
        &d.socket,
        &[hostile::call("read-anywhere", &[("path", &notes)])],
    );
    match hostile::decode(&answer[0]) {
        Response::Ok { result, .. } => assert!(result.stdout.contains("ordinary"), "{result:?}"),
        other => panic!("an ordinary file was not read: {other:?}"),
    }
}

#[test]
fn names_that_fold_to_a_protected_one_are_protected() {
    let Some(d) = start() else { return };
    assert_all_refused(&d, SPELLED);
}

#[test]
fn verbd_exec_cannot_write_them_either() {
    let Some(d) = start() else { return };
    let script = r#"
cd "$1"
for p in .git/modules/sub/config .git/modules/sub/hooks/pre-commit.sample .bash_aliases .zlogout .github/workflows/ci.yml .tmux.conf .Tmux.Conf .psqlrc .config/systemd/user/agent.service src/main.rs; do
  echo x >> "$p" 2>/dev/null && echo "WROTE $p"
done
echo done
"#;
    let out = Command::new(BIN)
        .args(["exec", "--policy"])
        .arg(&d.policy)
        .args(["--profile", "agent", "--", "/bin/sh", "-c", script, "agent"])
        .arg(repo(&d))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout, "WROTE src/main.rs\ndone\n",
        "only the ordinary file may be written: {stdout}"
    );
    assert!(
        Path::new(&repo(&d).join(".git/modules/sub/hooks/pre-commit.sample")).exists(),
        "the setup has the sample hook"
    );
}
