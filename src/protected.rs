//! Protected names: files and directories that change an agent's behaviour for every future
//! request (memory files, agent settings, git hooks, shell rc files) or the broker itself.
//!
//! One list serves three enforcers: the sandbox (Landlock write grants skip them), the file verbs
//! (refused at any depth) and the Claude Code hook check. Names match a path component
//! case-insensitively (`Claude.md` is `CLAUDE.md`); entries with a `/` match a sequence of
//! components anywhere in the path (`.git/hooks` matches `sub/.git/hooks/pre-commit`); absolute
//! paths (the policy file, the verbd binary) match themselves and everything beneath them.
#![forbid(unsafe_code)]

use std::path::{Component, Path, PathBuf};

/// Built-in protected names. A policy can add to this list, never remove from it.
pub const BUILTIN_PROTECTED: &[&str] = &[
    "CLAUDE.md",
    "CLAUDE.local.md",
    "AGENTS.md",
    "AGENTS.override.md",
    "GEMINI.md",
    ".claude",
    ".mcp.json",
    ".codex",
    ".cursor",
    ".cursorrules",
    ".gemini",
    ".vscode",
    ".idea",
    ".git/hooks",
    ".git/config",
    ".git/info",
    ".gitmodules",
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".ssh",
    ".gnupg",
];

/// Why a protected entry was given to the policy badly.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProtectedError {
    #[error("protected name {0:?} is empty or contains `.`/`..` components")]
    BadName(String),
    #[error("protected path {0:?} must be absolute and normalized")]
    BadPath(PathBuf),
}

/// The set of protected names and paths in force.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtectedNames {
    /// Each entry is a sequence of lower-cased components (`[".git", "hooks"]`).
    sequences: Vec<Vec<String>>,
    /// Absolute paths protected with everything beneath them.
    paths: Vec<PathBuf>,
}

/// Which rule a path hit.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtectedMatch {
    /// The rule as written (`.git/hooks`, `CLAUDE.md`, `/etc/verbd/policy.toml`).
    pub rule: String,
}

impl std::fmt::Display for ProtectedMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "protected name `{}`", self.rule)
    }
}

impl Default for ProtectedNames {
    fn default() -> Self {
        Self::builtin()
    }
}

impl ProtectedNames {
    /// The built-in list only.
    pub fn builtin() -> Self {
        ProtectedNames {
            sequences: BUILTIN_PROTECTED.iter().map(|n| split_lower(n)).collect(),
            paths: Vec::new(),
        }
    }

    /// The built-in list plus the policy's `names` (components or `a/b` sequences) and absolute
    /// `paths` (e.g. the policy file and the verbd binary).
    pub fn with_additions(names: &[String], paths: &[PathBuf]) -> Result<Self, ProtectedError> {
        let mut set = Self::builtin();
        for name in names {
            let seq = split_lower(name);
            if seq.is_empty() || seq.iter().any(|c| c.is_empty() || c == "." || c == "..") {
                return Err(ProtectedError::BadName(name.clone()));
            }
            if !set.sequences.contains(&seq) {
                set.sequences.push(seq);
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

    /// The component sequences (lower-cased), for enforcers that walk directory trees.
    pub fn sequences(&self) -> &[Vec<String>] {
        &self.sequences
    }

    /// The protected absolute paths.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Does `path` (absolute or relative to a root) name a protected entry or something
    /// beneath one? Lexical: callers resolve symlinks first where that matters.
    pub fn match_path(&self, path: &Path) -> Option<ProtectedMatch> {
        for protected in &self.paths {
            if path.starts_with(protected) {
                return Some(ProtectedMatch {
                    rule: protected.display().to_string(),
                });
            }
        }
        let components: Vec<String> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().to_lowercase()),
                _ => None,
            })
            .collect();
        for seq in &self.sequences {
            if components.windows(seq.len()).any(|w| w == seq.as_slice()) {
                return Some(ProtectedMatch {
                    rule: seq.join("/"),
                });
            }
        }
        None
    }

    /// Is this single directory entry name protected on its own (not only as part of a sequence)?
    pub fn is_protected_name(&self, name: &str) -> bool {
        let lower = name.to_lowercase();
        self.sequences
            .iter()
            .any(|seq| seq.len() == 1 && seq[0] == lower)
    }

    /// Is this entry name the first component of a multi-component rule (e.g. `.git`), so a
    /// walker must descend into it rather than grant or skip it whole?
    pub fn is_protected_prefix(&self, name: &str) -> bool {
        let lower = name.to_lowercase();
        self.sequences
            .iter()
            .any(|seq| seq.len() > 1 && seq[0] == lower)
    }

    /// The rules continuing below an entry named `name` (e.g. for `.git`: `hooks`, `config`).
    pub fn descend(&self, name: &str) -> ProtectedNames {
        let lower = name.to_lowercase();
        let mut below: Vec<Vec<String>> = self
            .sequences
            .iter()
            .filter(|seq| seq.len() > 1 && seq[0] == lower)
            .map(|seq| seq[1..].to_vec())
            .collect();
        // Single-component rules apply at every depth.
        below.extend(self.sequences.iter().filter(|s| s.len() == 1).cloned());
        ProtectedNames {
            sequences: below,
            paths: self.paths.clone(),
        }
    }
}

fn split_lower(name: &str) -> Vec<String> {
    name.trim_matches('/')
        .split('/')
        .map(|c| c.to_lowercase())
        .collect()
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
        ] {
            assert!(
                p.match_path(Path::new(path)).is_some(),
                "{path} should be protected"
            );
        }
        for path in ["README.md", ".git/objects/ab", "src/claude.rs", "gitconfig"] {
            assert!(
                p.match_path(Path::new(path)).is_none(),
                "{path} should not be protected"
            );
        }
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
        assert!(ProtectedNames::with_additions(&["../x".into()], &[]).is_err());
        assert!(ProtectedNames::with_additions(&[], &[PathBuf::from("rel")]).is_err());
    }

    #[test]
    fn walker_helpers() {
        let p = ProtectedNames::builtin();
        assert!(p.is_protected_name("AGENTS.md"));
        assert!(!p.is_protected_name(".git"));
        assert!(p.is_protected_prefix(".git"));
        let below = p.descend(".git");
        assert!(below.is_protected_name("hooks"));
        assert!(below.is_protected_name("CLAUDE.md"));
        assert!(!below.is_protected_name("objects"));
    }
}
