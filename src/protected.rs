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
//! Under `verbd exec`, the create broker lets git write its own working data beneath `.git`
//! although these rules match it — a new `.git` directory, template samples, `info/exclude`,
//! rebase and sequencer state, a linked worktree's git directory (`.git/worktrees/NAME`) — and
//! lets a repository's `config` be replaced only with data keys (`crate::sandbox::git_config`),
//! a worktree's `commondir` be only `../..` and a gitlink file name only a worktree's or
//! submodule's git directory; hooks, `info/attributes`, `modules` stay protected there too.
//! The file verbs and the hook refuse all of them.
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
//! `package.json` scripts, `build.rs`, a project's `.venv`, `.env` files that tools load) is the
//! agent's work product and is reviewed as such; programs installed under a home directory
//! beyond the toolchains listed here (a home directory should not be a write root); and 8.3
//! short names (`GIT~1`) on FAT/NTFS. Names are not patterns where a pattern would refuse
//! ordinary work: Python runs `*.pth` files only from site directories, so `.local/lib` is
//! protected, not every `model.pth`.
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
    subtree(
        ".claude.json",
        "Claude Code user configuration: MCP servers (commands) per project, allowed tools",
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
    subtree(
        ".cursor",
        "Cursor rules and MCP configuration; its extensions (home)",
    ),
    subtree(".cursorrules", "Cursor rules (legacy file)"),
    subtree(
        ".windsurf",
        "Windsurf rules and workflows; its extensions (home)",
    ),
    subtree(".windsurfrules", "Windsurf rules (legacy file)"),
    subtree(
        ".codeium",
        "Windsurf/Codeium: windsurf/mcp_config.json (MCP server commands), memories",
    ),
    subtree(
        ".copilot",
        "GitHub Copilot CLI: mcp-config.json (MCP server commands), trusted folders, agents",
    ),
    subtree(".clinerules", "Cline rules and workflows"),
    subtree(".roo", "Roo Code rules and modes"),
    subtree(".roomodes", "Roo Code custom modes"),
    subtree(".continue", "Continue configuration and rules"),
    subtree(
        ".aider.conf.yml",
        "aider configuration (lint and test commands it runs)",
    ),
    subtree(
        ".aider.model.settings.yml",
        "aider model settings (API base URLs and extra request parameters)",
    ),
    subtree(
        ".aider.model.metadata.json",
        "aider model metadata (which provider and endpoint a model name means)",
    ),
    subtree(".amazonq", "Amazon Q Developer rules and MCP configuration"),
    subtree(".junie", "JetBrains Junie guidelines"),
    subtree(".kiro", "Kiro steering, specs and hooks"),
    subtree(".opencode", "opencode agents, commands and plugins"),
    subtree(
        "opencode.json",
        "opencode configuration (MCP servers, permissions)",
    ),
    subtree(
        ".config/opencode",
        "opencode global configuration, agents and plugins",
    ),
    subtree(
        ".amp",
        "Amp workspace settings (MCP servers, tool permissions)",
    ),
    subtree(
        ".config/amp",
        "Amp user settings (MCP servers, allowed commands) and AGENTS.md",
    ),
    subtree(
        ".config/goose",
        "Goose configuration: extensions are commands it starts; permissions",
    ),
    subtree(".kilocode", "Kilo Code rules and MCP servers"),
    subtree(".qwen", "Qwen Code settings (MCP servers) and memory"),
    subtree("CRUSH.md", "Crush memory"),
    subtree(
        "crush.json",
        "Crush configuration (MCP servers, language server commands)",
    ),
    subtree(
        ".crush.json",
        "Crush configuration (MCP servers, language server commands)",
    ),
    subtree(".config/crush", "Crush global configuration"),
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
    subtree(
        ".githooks",
        "the conventional core.hooksPath directory: hooks git runs once configured",
    ),
    // Other version control.
    subtree(
        ".hg/hgrc",
        "Mercurial repository config: hooks and extensions run on hg commands",
    ),
    subtree(
        ".hg/sharedpath",
        "points Mercurial at another repository's store and config",
    ),
    subtree(".hgrc", "Mercurial user config: hooks, extensions, aliases"),
    subtree(".config/hg", "Mercurial user config (XDG)"),
    subtree(
        ".jj/repo/config.toml",
        "Jujutsu repository config: aliases, fix tools and diff commands",
    ),
    subtree(".config/jj", "Jujutsu user config"),
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
    subtree(".bashrc.d", "sourced by the default .bashrc (Fedora, RHEL)"),
    subtree(".config/zsh", "zsh startup when ZDOTDIR points here"),
    subtree(
        ".oh-my-zsh",
        "oh-my-zsh, sourced by .zshrc: plugins, themes, custom scripts",
    ),
    subtree(
        ".nvm",
        "nvm.sh, sourced by .bashrc; the node binaries it selects",
    ),
    subtree(
        ".pyenv",
        "pyenv, run by the shell's startup (`pyenv init`); shims and versions",
    ),
    subtree(
        ".sdkman",
        "sdkman-init.sh, sourced by the shell's startup; its candidates",
    ),
    subtree(
        ".asdf",
        "asdf, sourced by the shell's startup; shims and plugins",
    ),
    subtree(
        ".rustup",
        "rustup toolchains and settings (overrides, linked toolchains) behind every cargo",
    ),
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
    subtree(
        ".local/lib",
        "Python user site-packages: `.pth` lines run at every Python start, usercustomize.py, the modules of the programs in .local/bin",
    ),
    subtree(
        "sitecustomize.py",
        "imported by Python at every start from any directory on its path (PYTHONPATH)",
    ),
    subtree(
        "usercustomize.py",
        "imported by Python at every start from the user site directory",
    ),
    subtree(
        ".ipython",
        "IPython profiles: startup scripts and config run at every start",
    ),
    subtree(
        ".jupyter",
        "Jupyter config files (Python) run at every start",
    ),
    subtree(
        ".Rprofile",
        "R runs it at every start (home and project directory)",
    ),
    subtree(".irbrc", "Ruby irb runs it at every start"),
    subtree(".pryrc", "Ruby pry runs it at every start"),
    subtree(
        ".psqlrc",
        "psql runs it at every start (`\\!` runs shell commands)",
    ),
    subtree(
        ".sqliterc",
        "sqlite3 runs it at every start (`.shell`, `.system`)",
    ),
    subtree(".gdbinit", "gdb runs it at start (shell commands, Python)"),
    subtree(
        ".lldbinit",
        "lldb runs it at start (shell commands, Python)",
    ),
    subtree(
        ".curlrc",
        "options for every curl: a proxy or output file redirects the human's downloads",
    ),
    subtree(
        ".wgetrc",
        "options for every wget: a proxy redirects the human's downloads",
    ),
    subtree(
        ".config/gh",
        "GitHub CLI: aliases run shell commands; hosts.yml holds the token",
    ),
    // Terminal multiplexers, terminals and prompts.
    subtree(
        ".tmux.conf",
        "tmux config: run-shell and if-shell run commands when the server starts",
    ),
    subtree(".config/tmux", "tmux config (XDG)"),
    subtree(
        ".screenrc",
        "GNU screen config: opens windows running commands",
    ),
    subtree(
        ".config/kitty",
        "kitty config: startup sessions and key mappings launch programs",
    ),
    subtree(
        ".wezterm.lua",
        "WezTerm config: Lua run at every start, can spawn programs",
    ),
    subtree(".config/wezterm", "WezTerm config (XDG)"),
    subtree(
        ".config/alacritty",
        "Alacritty config: key bindings run commands",
    ),
    subtree(
        ".config/starship.toml",
        "starship prompt: custom modules run commands at every prompt",
    ),
    // Desktop sessions and user services: run at the human's next login.
    subtree(".xprofile", "sourced by display managers at X login"),
    subtree(".xinitrc", "run by startx"),
    subtree(".xsession", "run as the X session by display managers"),
    subtree(".xsessionrc", "sourced by Debian's X session startup"),
    subtree(
        ".pam_environment",
        "environment set at login by pam_env where user files are enabled (LD_PRELOAD, PATH)",
    ),
    subtree(
        ".config/environment.d",
        "environment of the user's systemd services (LD_PRELOAD, PATH)",
    ),
    subtree(
        ".config/autostart",
        "XDG autostart: programs run at desktop login",
    ),
    subtree(
        ".config/systemd",
        "systemd user units and drop-ins: services, timers, ExecStart",
    ),
    subtree(".local/share/systemd", "systemd user units"),
    subtree(
        ".local/share/applications",
        "desktop entries: one named like an installed program replaces its launcher (Exec=)",
    ),
    subtree(".config/i3", "i3 config: exec lines run at login"),
    subtree(".config/sway", "sway config: exec lines run at login"),
    subtree(".config/hypr", "Hyprland config: exec lines run at login"),
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
        ".devcontainer.json",
        "dev container (single-file form): postCreateCommand and image run on open",
    ),
    subtree(".gitpod.yml", "Gitpod tasks run when a workspace starts"),
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
    subtree(
        ".config/zed",
        "Zed user settings, tasks and language servers",
    ),
    subtree(".helix", "Helix language servers (commands)"),
    subtree(
        ".config/helix",
        "Helix user config: language servers (commands)",
    ),
    subtree(
        ".local/share/nvim",
        "neovim site directory and plugin managers' plugins, run at every start",
    ),
    subtree(
        ".config/Code/User",
        "VS Code user settings (terminal profiles, tasks, MCP servers), keybindings",
    ),
    subtree(
        ".config/Code - OSS/User",
        "Code - OSS user settings (as VS Code's)",
    ),
    subtree(
        ".config/VSCodium/User",
        "VSCodium user settings (as VS Code's)",
    ),
    subtree(".config/Cursor/User", "Cursor user settings (as VS Code's)"),
    subtree(
        ".config/Windsurf/User",
        "Windsurf user settings (as VS Code's)",
    ),
    subtree(
        ".vscode-server",
        "VS Code remote server: extensions and machine settings",
    ),
    subtree(
        ".config/JetBrains",
        "JetBrains IDE options: external tools, run configurations, plugins",
    ),
    subtree(
        ".config/sublime-text",
        "Sublime Text packages (Python plugins) and build systems",
    ),
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
        "bunfig.toml",
        "bun: preload scripts run on `bun run` and `bun test`",
    ),
    subtree(
        ".tool-versions",
        "asdf/mise versions: a `path:` version runs programs from any directory",
    ),
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
            "/home/u/.claude.json",
            ".copilot/mcp-config.json",
            ".codeium/windsurf/mcp_config.json",
            ".config/amp/settings.json",
            ".amp/settings.json",
            ".config/goose/config.yaml",
            ".tmux.conf",
            ".config/tmux/tmux.conf",
            ".config/systemd/user/evil.service",
            ".config/autostart/evil.desktop",
            ".local/lib/python3.12/site-packages/evil.pth",
            "lib/sitecustomize.py",
            ".config/Code/User/settings.json",
            ".config/Code - OSS/User/tasks.json",
            "repo/.hg/hgrc",
            ".gitpod.yml",
            ".githooks/pre-commit",
            ".devcontainer.json",
            ".psqlrc",
            ".xprofile",
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
            "models/checkpoint.pth",
            ".claude.json.example",
            ".env",
            ".config/Code/logs/main.log",
            ".local/share/fonts/x.ttf",
            ".hg/store/data",
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
            ".Claude.JSON",
            "\u{ff0e}tmux.conf", // full-width full stop
            ".config/\u{17f}ystemd/user/x.service",
            ".HG/HGRC",
            ".xprofile. ",
            ".config/CODE/USER/settings.json",
            ".loc\u{200b}al/lib/python3/site-packages/x.pth",
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

    /// A policy name with an empty or `.` component compiles to a rule no path can match (paths
    /// are compared by their normal components only): the file the operator named would stay
    /// writable while the policy says it is protected. Refused at load, like `..`.
    #[test]
    fn a_policy_name_no_path_could_match_is_refused() {
        for name in [
            "deploy//keys",
            "./secrets.yaml",
            "deploy/./keys",
            ".",
            "..",
            "a/../b",
        ] {
            assert!(
                matches!(
                    ProtectedNames::with_additions(&[name.into()], &[]),
                    Err(ProtectedError::BadName(bad)) if bad == name
                ),
                "{name:?} was accepted as a protected name"
            );
        }
        let trimmed = ProtectedNames::with_additions(&["/deploy/keys/".into()], &[]).unwrap();
        assert!(trimmed.match_path(Path::new("deploy/keys/id")).is_some());
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
