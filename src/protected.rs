//! Protected names: files and directories that a human's routine tools execute or obey (git,
//! shells, editors, CI, package managers), the memory and settings of agent runtimes, keys —
//! and the broker's own files. Writing one changes what runs, or what an agent believes, the
//! next time someone works in that directory.
//!
//! One list ([`BUILTIN_RULES`], each entry with its reason) serves every enforcer: the file
//! verbs (refused at any depth), the Claude Code hook's `check`, and the Landlock split of write
//! roots for verb children and `verbd exec` (see `crate::sandbox::fs_rules`). A policy can add
//! names and absolute paths, never remove one.
//!
//! Matching (invariants):
//! - A rule is a sequence of path components matched against any run of consecutive components
//!   of a path, at any depth (`.git/hooks` matches `sub/.git/hooks/pre-commit`). A component
//!   pattern is a name or `*SUFFIX` (`*.code-workspace`).
//! - [`RuleScope::Subtree`] protects the entry and everything beneath it; [`RuleScope::Entry`]
//!   only the entry itself (`.git`: a gitlink file or a new repository may not be written, while
//!   `.git/objects` stays writable for git).
//! - Names are compared **folded** ([`fold`]): Unicode NFKC (full-width letters, ligatures,
//!   mathematical letters, `ſ` become their plain forms), default-ignorable code points removed
//!   (zero-width joiners, soft hyphens: HFS+ ignores some of them, which is how
//!   `.g\u{200c}it` once became `.git`), case folded (`ß` is `ss`), and trailing dots and spaces
//!   dropped (Windows and SMB servers ignore them). A name that folds to a protected one is
//!   protected, because case-insensitive and normalizing file systems (ext4 casefold, vfat,
//!   exfat, SMB, NTFS) would open the protected entry through it.
//! - Absolute paths (the policy file, secret sources) match themselves and everything beneath
//!   them.
//!
//! Not covered lexically (documented in docs/threat-model.md): a bare repository or a gitlink
//! created somewhere new under another name is found by git only through names this list
//! protects (`.git`, or `HEAD`+`objects`+`refs` in a directory git is run in: a human should
//! set `safe.bareRepository=explicit`); project source that tools run by design (`Makefile`,
//! `package.json` scripts, `build.rs`) is the agent's work product and is reviewed as such; and
//! 8.3 short names (`GIT~1`) on FAT/NTFS.
#![forbid(unsafe_code)]

use std::path::{Component, Path, PathBuf};

use unicode_normalization::UnicodeNormalization;

/// How much of the file tree a rule protects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleScope {
    /// The entry and everything beneath it.
    Subtree,
    /// Only the entry itself (creating, replacing or writing it).
    Entry,
}

/// One built-in rule: the pattern, its scope, and why it is protected.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinRule {
    pub pattern: &'static str,
    pub scope: RuleScope,
    pub reason: &'static str,
}

const fn subtree(pattern: &'static str, reason: &'static str) -> BuiltinRule {
    BuiltinRule {
        pattern,
        scope: RuleScope::Subtree,
        reason,
    }
}

/// The built-in rules. A policy can add to this list, never remove from it.
pub const BUILTIN_RULES: &[BuiltinRule] = &[
    // Agent runtimes: memory and instruction files every session reads, settings that run
    // commands (hooks, MCP servers) or widen permissions.
    subtree("CLAUDE.md", "Claude Code memory, read into every session"),
    subtree("CLAUDE.local.md", "Claude Code personal memory"),
    subtree(
        ".claude",
        "Claude Code settings (hooks run commands, permission rules), commands, agents, skills",
    ),
    subtree(".mcp.json", "MCP servers: commands an agent runtime starts"),
    subtree(
        "AGENTS.md",
        "Codex, Amp, Cursor and others: agent instructions",
    ),
    subtree("AGENTS.override.md", "Codex instructions override"),
    subtree("AGENT.md", "Amp and others: agent instructions"),
    subtree(
        ".codex",
        "Codex configuration (MCP servers, sandbox and approval settings)",
    ),
    subtree(".agents", "Codex skills and agent metadata"),
    subtree("GEMINI.md", "Gemini CLI memory"),
    subtree(
        ".gemini",
        "Gemini CLI settings (MCP servers, tool permissions)",
    ),
    subtree(".cursor", "Cursor rules and MCP configuration"),
    subtree(".cursorrules", "Cursor rules (legacy file)"),
    subtree(".windsurf", "Windsurf rules and workflows"),
    subtree(".windsurfrules", "Windsurf rules (legacy file)"),
    subtree(".clinerules", "Cline rules and workflows"),
    subtree(".roo", "Roo Code rules and modes"),
    subtree(".roomodes", "Roo Code custom modes"),
    subtree(".continue", "Continue configuration and rules"),
    subtree(
        ".aider.conf.yml",
        "aider configuration (lint and test commands it runs)",
    ),
    subtree(".amazonq", "Amazon Q Developer rules and MCP configuration"),
    subtree(".junie", "JetBrains Junie guidelines"),
    subtree(".kiro", "Kiro steering, specs and hooks"),
    subtree(".opencode", "opencode agents, commands and plugins"),
    subtree(
        "opencode.json",
        "opencode configuration (MCP servers, permissions)",
    ),
    subtree("CRUSH.md", "Crush memory"),
    subtree("WARP.md", "Warp agent rules"),
    subtree(".goosehints", "Goose instructions"),
    subtree(".rules", "Zed agent rules"),
    // Git, at every depth of every repository (submodules and worktrees included).
    BuiltinRule {
        pattern: ".git",
        scope: RuleScope::Entry,
        reason: "a gitlink file (`gitdir: …`) or a new repository: git obeys the config and hooks of the directory it names",
    },
    subtree(
        ".git/hooks",
        "git hooks run on commit, checkout, merge, push",
    ),
    subtree(
        ".git/config",
        "git config: core.fsmonitor, core.hooksPath, core.sshCommand, aliases, filters run commands",
    ),
    subtree(
        ".git/config.worktree",
        "per-worktree git config (same powers as .git/config)",
    ),
    subtree(
        ".git/commondir",
        "points git at another directory's config, hooks and objects",
    ),
    subtree(
        ".git/info",
        "info/attributes selects filter and diff drivers; info/exclude hides files",
    ),
    subtree(
        ".git/modules",
        "submodules' git directories (config, hooks, commondir) at any depth",
    ),
    subtree(
        ".git/worktrees",
        "linked worktrees' git directories (commondir, gitdir, config.worktree)",
    ),
    subtree(
        ".git/rebase-merge",
        "a paused rebase's todo list (`exec` lines run on `git rebase --continue`)",
    ),
    subtree(".git/rebase-apply", "a paused `git am`/rebase's state"),
    subtree(
        ".git/sequencer",
        "a paused cherry-pick or revert's todo list and options",
    ),
    subtree(
        ".gitmodules",
        "submodule URLs and paths git fetches and checks out",
    ),
    subtree(
        ".gitattributes",
        "selects filter, diff and merge drivers (commands) for paths",
    ),
    subtree(
        ".gitconfig",
        "global git config (when the write root is a home directory)",
    ),
    subtree(".config/git", "XDG git config, attributes and ignore"),
    subtree(".git-credentials", "credentials git sends"),
    subtree(".lfsconfig", "git-lfs endpoints"),
    // Shells and terminals.
    subtree(".bashrc", "bash startup"),
    subtree(".bash_profile", "bash login startup"),
    subtree(".bash_login", "bash login startup"),
    subtree(".bash_logout", "bash logout"),
    subtree(".bash_aliases", "sourced by the default .bashrc"),
    subtree(".profile", "login shell startup"),
    subtree(".zshrc", "zsh startup"),
    subtree(".zprofile", "zsh login startup"),
    subtree(".zshenv", "zsh startup (every zsh)"),
    subtree(".zlogin", "zsh login"),
    subtree(".zlogout", "zsh logout"),
    subtree(".kshrc", "ksh startup"),
    subtree(".mkshrc", "mksh startup"),
    subtree(".cshrc", "csh startup"),
    subtree(".tcshrc", "tcsh startup"),
    subtree(".login", "csh login"),
    subtree(".logout", "csh logout"),
    subtree(".config/fish", "fish startup and functions"),
    subtree(
        ".inputrc",
        "readline key bindings (can type and run commands)",
    ),
    subtree(".envrc", "direnv: runs on cd"),
    subtree(".config/direnv", "direnv library, sourced by every .envrc"),
    subtree(".mise.toml", "mise: env and hooks run on cd, tasks"),
    subtree("mise.toml", "mise: env and hooks run on cd, tasks"),
    subtree(".config/mise", "mise global configuration"),
    subtree(
        ".local/bin",
        "early in PATH: a program dropped here shadows real ones",
    ),
    // Editors and IDEs.
    subtree(
        ".vscode",
        "VS Code tasks (run on folder open), settings, launch configurations",
    ),
    subtree("*.code-workspace", "VS Code workspace: settings and tasks"),
    subtree(
        ".devcontainer",
        "dev container: postCreateCommand and image run on open",
    ),
    subtree(
        ".idea",
        "JetBrains run configurations, external tools, startup tasks",
    ),
    subtree(".vimrc", "vim startup"),
    subtree(".gvimrc", "gvim startup"),
    subtree(".vim", "vim plugins and startup scripts"),
    subtree(".exrc", "vi/vim/neovim local startup (exrc)"),
    subtree(".nvimrc", "neovim local startup (exrc)"),
    subtree(".nvim.lua", "neovim local startup (exrc)"),
    subtree(".lvimrc", "localvimrc plugin"),
    subtree(".config/nvim", "neovim startup and plugins"),
    subtree(".emacs", "emacs startup"),
    subtree(".emacs.d", "emacs startup and packages"),
    subtree(".config/emacs", "emacs startup and packages"),
    subtree(".dir-locals.el", "emacs directory variables (eval forms)"),
    subtree(".dir-locals-2.el", "emacs directory variables (eval forms)"),
    subtree(".zed", "Zed settings and tasks"),
    subtree(".helix", "Helix language servers (commands)"),
    subtree("*.sublime-project", "Sublime Text build systems"),
    // CI and commit hooks: run with the repository's secrets on push, or on the human's commit.
    subtree(
        ".github",
        "GitHub Actions workflows and actions, Copilot instructions and prompts, CODEOWNERS",
    ),
    subtree(".gitlab-ci.yml", "GitLab CI pipeline"),
    subtree(".gitlab", "GitLab CI templates and settings"),
    subtree(".forgejo", "Forgejo Actions workflows"),
    subtree(".gitea", "Gitea Actions workflows"),
    subtree(".circleci", "CircleCI pipeline"),
    subtree(".travis.yml", "Travis CI pipeline"),
    subtree("Jenkinsfile", "Jenkins pipeline"),
    subtree("azure-pipelines.yml", "Azure Pipelines"),
    subtree(".azure-pipelines", "Azure Pipelines"),
    subtree(".buildkite", "Buildkite pipeline"),
    subtree("bitbucket-pipelines.yml", "Bitbucket Pipelines"),
    subtree(".drone.yml", "Drone CI pipeline"),
    subtree(".woodpecker", "Woodpecker CI pipelines"),
    subtree(".woodpecker.yml", "Woodpecker CI pipeline"),
    subtree("appveyor.yml", "AppVeyor pipeline"),
    subtree(".appveyor.yml", "AppVeyor pipeline"),
    subtree(".cirrus.yml", "Cirrus CI pipeline"),
    subtree(".semaphore", "Semaphore CI pipeline"),
    subtree(
        ".pre-commit-config.yaml",
        "pre-commit hooks run on every commit",
    ),
    subtree(".husky", "husky git hooks"),
    subtree("lefthook.yml", "lefthook git hooks"),
    subtree(".lefthook.yml", "lefthook git hooks"),
    subtree("lefthook-local.yml", "lefthook git hooks"),
    // Package managers and cloud tools whose config runs commands or holds credentials.
    subtree(
        ".npmrc",
        "npm config: script-shell, node-options, registry tokens",
    ),
    subtree(".yarnrc", "yarn config"),
    subtree(
        ".yarnrc.yml",
        "yarn config: yarnPath runs any script on every yarn command",
    ),
    subtree(".pnpmfile.cjs", "pnpm hooks run on install"),
    subtree(
        ".cargo",
        "cargo config: target runners, aliases, env; installed binaries",
    ),
    subtree(".pypirc", "package index credentials"),
    subtree(".config/pip", "pip index and options"),
    subtree(".netrc", "credentials for curl, git, ftp"),
    subtree(".docker", "docker config: credential helpers run commands"),
    subtree(".kube", "kubeconfig: exec credential plugins run commands"),
    subtree(
        ".aws",
        "AWS config: credential_process runs commands; credentials",
    ),
    // Keys.
    subtree(".ssh", "SSH keys, authorized_keys, config (ProxyCommand)"),
    subtree(".gnupg", "GnuPG keys and agent configuration"),
];

/// Why a protected entry was given to the policy badly.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProtectedError {
    #[error("protected name {0:?} is empty or contains `.`/`..` components")]
    BadName(String),
    #[error("protected path {0:?} must be absolute and normalized")]
    BadPath(PathBuf),
}

/// One component of a rule, folded.
#[derive(Debug, Clone, PartialEq)]
enum ComponentPattern {
    Name(String),
    /// `*SUFFIX`: any name ending in the suffix.
    Suffix(String),
}

impl ComponentPattern {
    fn new(component: &str) -> ComponentPattern {
        match component.strip_prefix('*') {
            Some(suffix) => ComponentPattern::Suffix(fold(suffix)),
            None => ComponentPattern::Name(fold(component)),
        }
    }

    fn matches(&self, folded: &str) -> bool {
        match self {
            ComponentPattern::Name(name) => name == folded,
            ComponentPattern::Suffix(suffix) => {
                folded.len() > suffix.len() && folded.ends_with(suffix.as_str())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    /// Lower-cased, for messages.
    shown: String,
    components: Vec<ComponentPattern>,
    scope: RuleScope,
    reason: &'static str,
}

impl Rule {
    fn new(pattern: &str, scope: RuleScope, reason: &'static str) -> Rule {
        Rule {
            shown: pattern.trim_matches('/').to_lowercase(),
            reason,
            components: pattern
                .trim_matches('/')
                .split('/')
                .map(ComponentPattern::new)
                .collect(),
            scope,
        }
    }

    /// Does the rule match `components[start..]` (for an entry rule: exactly to the end)?
    fn matches_at(&self, components: &[String], start: usize) -> bool {
        let end = start + self.components.len();
        end <= components.len()
            && (self.scope == RuleScope::Subtree || end == components.len())
            && self
                .components
                .iter()
                .zip(&components[start..end])
                .all(|(pattern, name)| pattern.matches(name))
    }
}

/// The set of protected names and paths in force.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtectedNames {
    rules: Vec<Rule>,
    /// Absolute paths protected with everything beneath them.
    paths: Vec<PathBuf>,
}

/// Which rule a path hit.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtectedMatch {
    /// The rule, lower-cased (`.git/hooks`, `claude.md`), or the protected absolute path.
    pub rule: String,
    /// Why it is protected.
    pub reason: &'static str,
}

impl std::fmt::Display for ProtectedMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "protected name `{}` ({})", self.rule, self.reason)
    }
}

impl Default for ProtectedNames {
    fn default() -> Self {
        Self::builtin()
    }
}

/// A name as a case-insensitive, normalizing file system would see it (see the module docs):
/// NFKC, default-ignorable code points removed, case folded, NFKC again, trailing dots and
/// spaces dropped.
pub fn fold(name: &str) -> String {
    let mut folded = String::with_capacity(name.len());
    for c in name.nfkc().filter(|&c| !is_default_ignorable(c)) {
        match c {
            // Full case folding differs from lower-casing here: both fold to "ss".
            '\u{df}' | '\u{1e9e}' => folded.push_str("ss"),
            c => folded.extend(c.to_lowercase()),
        }
    }
    let mut folded: String = folded.nfkc().collect();
    while folded.ends_with(['.', ' ']) && !folded.trim_end_matches(['.', ' ']).is_empty() {
        folded.pop();
    }
    folded
}

/// Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): characters that render
/// as nothing and that some file systems and tools skip when comparing names.
fn is_default_ignorable(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

/// The folded normal components of `path`.
fn folded_components(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(fold(&s.to_string_lossy())),
            _ => None,
        })
        .collect()
}

impl ProtectedNames {
    /// The built-in list only.
    pub fn builtin() -> Self {
        ProtectedNames {
            rules: BUILTIN_RULES
                .iter()
                .map(|rule| Rule::new(rule.pattern, rule.scope, rule.reason))
                .collect(),
            paths: Vec::new(),
        }
    }

    /// The built-in list plus the policy's `names` (components or `a/b` sequences, protected
    /// with everything beneath them) and absolute `paths` (e.g. the policy file).
    pub fn with_additions(names: &[String], paths: &[PathBuf]) -> Result<Self, ProtectedError> {
        let mut set = Self::builtin();
        for name in names {
            let parts: Vec<&str> = name.trim_matches('/').split('/').collect();
            if parts
                .iter()
                .any(|c| c.is_empty() || *c == "." || *c == "..")
            {
                return Err(ProtectedError::BadName(name.clone()));
            }
            let rule = Rule::new(name, RuleScope::Subtree, "added by the policy");
            if !set
                .rules
                .iter()
                .any(|known| known.components == rule.components)
            {
                set.rules.push(rule);
            }
        }
        for path in paths {
            let normalized = path.is_absolute()
                && path
                    .components()
                    .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            if !normalized {
                return Err(ProtectedError::BadPath(path.clone()));
            }
            if !set.paths.contains(path) {
                set.paths.push(path.clone());
            }
        }
        Ok(set)
    }

    /// The same set plus more absolute paths (e.g. the policy file once its location is known).
    pub fn with_paths(mut self, paths: &[PathBuf]) -> Result<Self, ProtectedError> {
        let extra = ProtectedNames::with_additions(&[], paths)?;
        for path in extra.paths {
            if !self.paths.contains(&path) {
                self.paths.push(path);
            }
        }
        Ok(self)
    }

    /// The protected absolute paths.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Does `path` (absolute or relative to a root) name a protected entry or something
    /// beneath a protected subtree? Lexical: callers resolve symlinks first where that matters.
    /// This is the check for writers (file verbs, the hook).
    pub fn match_path(&self, path: &Path) -> Option<ProtectedMatch> {
        self.find(path, true)
    }

    /// Like [`match_path`](Self::match_path) but without entry-only rules: what a directory
    /// walk must leave read-only *with everything beneath it*. (An entry-only name is kept by
    /// keeping its parent from being rewritten, see [`keeps_read_only`](Self::keeps_read_only).)
    pub fn match_subtree(&self, path: &Path) -> Option<ProtectedMatch> {
        self.find(path, false)
    }

    /// For a walk over existing entries: must this entry get no write access of its own? A
    /// protected subtree, or an entry-only name that is not a directory (a gitlink `.git`
    /// file). An entry-only directory (`.git`) is split instead, like any prefix of a rule.
    pub fn keeps_read_only(&self, path: &Path, is_dir: bool) -> bool {
        self.match_subtree(path).is_some() || (!is_dir && self.match_path(path).is_some())
    }

    fn find(&self, path: &Path, entry_rules: bool) -> Option<ProtectedMatch> {
        for protected in &self.paths {
            if path.starts_with(protected) {
                return Some(ProtectedMatch {
                    rule: protected.display().to_string(),
                    reason: "a file of the broker itself or one the policy names",
                });
            }
        }
        let components = folded_components(path);
        self.rules
            .iter()
            .filter(|rule| entry_rules || rule.scope == RuleScope::Subtree)
            .find(|rule| (0..components.len()).any(|start| rule.matches_at(&components, start)))
            .map(|rule| ProtectedMatch {
                rule: rule.shown.clone(),
                reason: rule.reason,
            })
    }

    /// Is `path` a proper prefix of a protected rule — it ends with the first components of a
    /// multi-component rule (`…/.git` for `.git/hooks`) — or an ancestor of a protected absolute
    /// path? Then a walk must split it: granting it whole would let the protected entry be
    /// created or replaced.
    pub fn leads_to(&self, path: &Path) -> bool {
        let components = folded_components(path);
        let by_name = self.rules.iter().any(|rule| {
            (1..rule.components.len()).any(|k| {
                components.len() >= k && {
                    let start = components.len() - k;
                    rule.components[..k]
                        .iter()
                        .zip(&components[start..])
                        .all(|(pattern, name)| pattern.matches(name))
                }
            })
        });
        by_name
            || self
                .paths
                .iter()
                .any(|p| p.starts_with(path) && p.as_path() != path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_names_at_any_depth_case_insensitively() {
        let p = ProtectedNames::builtin();
        for path in [
            "CLAUDE.md",
            "docs/CLAUDE.md",
            "docs/Claude.md",
            "sub/.git/hooks/pre-commit",
            ".git/config",
            "/srv/repo/.claude/settings.json",
            "a/.mcp.json",
            ".git/modules/lib/foo/modules/bar/config",
            "x/.git",
            "my.code-workspace",
            ".github/workflows/ci.yml",
        ] {
            assert!(
                p.match_path(Path::new(path)).is_some(),
                "{path} should be protected"
            );
        }
        for path in [
            "README.md",
            ".git/objects/ab",
            "src/claude.rs",
            "gitconfig",
            ".code-workspace.md",
            "src/git",
        ] {
            assert!(
                p.match_path(Path::new(path)).is_none(),
                "{path} should not be protected"
            );
        }
    }

    #[test]
    fn names_are_folded_like_case_insensitive_file_systems() {
        assert_eq!(fold(".\u{17f}sh"), ".ssh");
        assert_eq!(fold(".\u{df}h"), ".ssh");
        assert_eq!(
            fold("\u{ff23}\u{ff2c}\u{ff21}\u{ff35}\u{ff24}\u{ff25}.md"),
            "claude.md"
        );
        assert_eq!(fold("\u{1d402}LAUDE.md"), "claude.md");
        assert_eq!(fold(".g\u{200c}it"), ".git");
        assert_eq!(fold(".bash\u{ad}rc"), ".bashrc");
        assert_eq!(fold("\u{212a}ube"), "kube");
        assert_eq!(fold(".git. "), ".git");
        assert_eq!(fold("..."), "...", "a name of dots only stays");
        let p = ProtectedNames::builtin();
        for path in [
            ".\u{17f}sh/id",
            "\u{ff23}LAUDE.md",
            ".g\u{200c}it/hooks/x",
            ".BASHRC",
            ".git./config",
        ] {
            assert!(p.match_path(Path::new(path)).is_some(), "{path:?}");
        }
    }

    #[test]
    fn entry_rules_protect_only_the_entry() {
        let p = ProtectedNames::builtin();
        assert!(p.match_path(Path::new("sub/.git")).is_some());
        assert!(p.match_path(Path::new("sub/.git/objects/ab")).is_none());
        assert!(p.match_subtree(Path::new("sub/.git")).is_none());
        assert!(
            p.keeps_read_only(Path::new("sub/.git"), false),
            "a gitlink file"
        );
        assert!(
            !p.keeps_read_only(Path::new("sub/.git"), true),
            "a git directory is split"
        );
        assert!(p.keeps_read_only(Path::new("sub/.git/hooks"), true));
        assert!(p.leads_to(Path::new("/r/sub/.git")));
        assert!(p.leads_to(Path::new("/r/.config")));
        assert!(
            !p.leads_to(Path::new("/r/.git/objects")),
            "git must write objects"
        );
        assert!(!p.leads_to(Path::new("/r/src")));
    }

    #[test]
    fn additions_extend_and_paths_cover_subtrees() {
        let p = ProtectedNames::with_additions(
            &["secrets.yaml".into(), "deploy/keys".into()],
            &[PathBuf::from("/etc/verbd/policy.toml")],
        )
        .unwrap();
        assert!(p.match_path(Path::new("x/SECRETS.yaml")).is_some());
        assert!(p.match_path(Path::new("deploy/keys/id")).is_some());
        assert!(p.match_path(Path::new("/etc/verbd/policy.toml")).is_some());
        assert!(
            p.match_path(Path::new("CLAUDE.md")).is_some(),
            "built-ins stay"
        );
        assert!(p.leads_to(Path::new("/etc/verbd")));
        assert!(ProtectedNames::with_additions(&["../x".into()], &[]).is_err());
        assert!(ProtectedNames::with_additions(&[], &[PathBuf::from("rel")]).is_err());
    }

    #[test]
    fn every_builtin_rule_has_a_reason_and_a_unique_pattern() {
        for (index, rule) in BUILTIN_RULES.iter().enumerate() {
            assert!(!rule.reason.is_empty(), "{}", rule.pattern);
            assert!(
                BUILTIN_RULES[..index]
                    .iter()
                    .all(|other| fold(other.pattern) != fold(rule.pattern)),
                "{} is listed twice",
                rule.pattern
            );
        }
    }
}
