//! The git directories `verbd exec` follows out of a write root: a write root that is a linked
//! worktree (`git worktree add`) whose repository lies elsewhere has a `.git` *file*
//! (`gitdir: /home/h/proj/.git/worktrees/proj-agent`), and git keeps the worktree's index,
//! `HEAD`, logs and rebase state in that per-worktree directory, and its objects, refs and
//! reflogs in the repository's common directory (`commondir`). Without them git can edit files
//! there but never commit.
//!
//! What is followed, the way git follows it: the root's `.git` file (a regular file, never a
//! symlink) names a directory `…/worktrees/NAME`; its `commondir` names the directory two levels
//! up (`../..`, what git writes); its `gitdir` file names this root's `.git` back. The common
//! directory has `HEAD`, `objects` and `refs`; the per-worktree directory, the common directory
//! and the files that tie them together belong to the write root's owner; none lies in a write
//! root already, in a daemon's private path, or under a protected absolute path. Anything else
//! — a symlinked `.git`, a gitlink to the main git directory, to another worktree's directory,
//! to a directory that is no git directory, to another user's repository — is followed to
//! nowhere: nothing is granted, and `--print-status` says why.
//!
//! What is granted on a followed directory (module `fs_rules`), never execute: the per-worktree
//! directory, and the common directory's `objects`, `refs` and `logs`, with every other right;
//! the common directory itself read-only (git reads its config, `packed-refs`, `info/exclude`).
//! Never the whole common directory (its `config`, `hooks`, `info`, `packed-refs`, the other
//! worktrees' directories), never the main worktree's files. The create broker judges every
//! path in them as the same path in a `.git` of a write root (`.git/worktrees/NAME/…`,
//! `.git/objects/…`): `commondir`, `gitdir`, `config`, `config.worktree`, `hooks` and `info`
//! in the per-worktree directory are never written, as in a write root.
//!
//! Invariants: the `.git` file and the files it leads to are read once, when the profile is
//! prepared; the Landlock grants and the create broker's view of them come from that one
//! reading ([`GitLink`]), so they can never disagree.
#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::SandboxSpec;

/// The largest `.git`, `commondir` or `gitdir` file read: git's are one short line.
const MAX_LINK_BYTES: u64 = 4096;

/// The common directory's subdirectories a followed worktree may write: where git stores the
/// objects, the shared refs (branches, tags, `refs/stash`) and their reflogs.
pub const COMMON_DATA: &[&str] = &["objects", "refs", "logs"];

/// What the `.git` file of a write root led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitLink {
    /// The write root (canonical).
    pub write_root: PathBuf,
    /// The followed directories, or why nothing was followed.
    pub outcome: Result<FollowedGitDir, String>,
}

/// A linked worktree's git directories outside the write roots, validated as module docs say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedGitDir {
    /// The per-worktree directory, `COMMON/worktrees/NAME` (canonical).
    pub git_dir: PathBuf,
    /// The repository's common directory (canonical).
    pub common_dir: PathBuf,
}

/// A directory of a followed git directory the program may write, and the path the create
/// broker judges its entries as (relative, as in a write root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitArea {
    pub dir: PathBuf,
    pub as_in_root: PathBuf,
}

impl FollowedGitDir {
    /// The directories the program may write: the per-worktree directory and the common
    /// directory's [`COMMON_DATA`] that exist.
    pub fn areas(&self) -> Vec<GitArea> {
        let name = self.git_dir.file_name().unwrap_or_default();
        let mut areas = vec![GitArea {
            dir: self.git_dir.clone(),
            as_in_root: Path::new(".git/worktrees").join(name),
        }];
        for data in COMMON_DATA {
            let dir = self.common_dir.join(data);
            if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                areas.push(GitArea {
                    dir,
                    as_in_root: Path::new(".git").join(data),
                });
            }
        }
        areas
    }
}

impl GitLink {
    /// One line for `--print-status` and `verbd sandbox why --exec`.
    pub fn describe(&self) -> String {
        let gitlink = self.write_root.join(".git");
        match &self.outcome {
            Ok(followed) => {
                let writable: Vec<String> = followed
                    .areas()
                    .iter()
                    .map(|area| area.dir.display().to_string())
                    .collect();
                format!(
                    "git: followed {} (a linked worktree's gitlink) to its git directory {} and common directory {}: writable {} (commondir, gitdir, config, config.worktree, hooks, info kept by the create broker); the common directory otherwise read-only (config, hooks, info, packed-refs, other worktrees)",
                    gitlink.display(),
                    followed.git_dir.display(),
                    followed.common_dir.display(),
                    writable.join(", ")
                )
            }
            Err(reason) => format!(
                "git: not followed: {} {reason}; nothing outside the write root granted",
                gitlink.display()
            ),
        }
    }
}

/// Follows the `.git` file of each of `spec`'s directory write roots that has one (module
/// docs). A root whose `.git` is a directory, or absent, or a gitlink into a write root (kept
/// there as any git directory), gives nothing.
pub fn follow(spec: &SandboxSpec) -> Vec<GitLink> {
    let write_roots: Vec<PathBuf> = spec
        .write
        .iter()
        .filter_map(|root| std::fs::canonicalize(root).ok())
        .collect();
    write_roots
        .iter()
        .filter_map(|root| {
            let metadata = std::fs::symlink_metadata(root.join(".git")).ok()?;
            if metadata.is_dir() {
                return None;
            }
            let outcome = match follow_root(spec, &write_roots, root, &metadata) {
                Ok(None) => return None,
                Ok(Some(followed)) => Ok(followed),
                Err(reason) => Err(reason),
            };
            Some(GitLink {
                write_root: root.clone(),
                outcome,
            })
        })
        .collect()
}

fn follow_root(
    spec: &SandboxSpec,
    write_roots: &[PathBuf],
    root: &Path,
    gitlink_metadata: &std::fs::Metadata,
) -> Result<Option<FollowedGitDir>, String> {
    if gitlink_metadata.file_type().is_symlink() {
        return Err("is a symlink (only a gitlink file is followed)".into());
    }
    if !gitlink_metadata.is_file() {
        return Err("is not a regular file".into());
    }
    let owner = std::fs::metadata(root)
        .map_err(|e| format!("cannot be checked: {e}"))?
        .uid();
    let gitlink = root.join(".git");
    let content = read_line(&gitlink)?;
    let target = content
        .strip_prefix("gitdir: ")
        .ok_or("does not start with `gitdir: `")?;
    let git_dir = std::fs::canonicalize(root.join(target))
        .map_err(|e| format!("names {target}, which cannot be resolved: {e}"))?;
    let shown = git_dir.display();
    if write_roots.iter().any(|r| git_dir.starts_with(r)) {
        return Ok(None);
    }
    check_owner(&git_dir, owner)?;
    if !git_dir.is_dir() {
        return Err(format!("names {shown}, which is not a directory"));
    }
    let (Some(worktrees), Some(common_dir)) = (
        git_dir.parent().map(Path::to_path_buf),
        git_dir
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf),
    ) else {
        return Err(format!(
            "names {shown}, which is no worktrees/NAME directory"
        ));
    };
    let common_dir = common_dir.as_path();
    if worktrees.file_name().is_none_or(|name| name != "worktrees") {
        return Err(format!(
            "names {shown}, which is not a linked worktree's git directory (COMMON/worktrees/NAME)"
        ));
    }
    let commondir_file = git_dir.join("commondir");
    check_owner(&commondir_file, owner)?;
    let common = read_line(&commondir_file)?;
    if std::fs::canonicalize(git_dir.join(&common)).ok().as_deref() != Some(common_dir) {
        return Err(format!(
            "names {shown}, whose commondir ({common}) is not the repository it lies in ({})",
            common_dir.display()
        ));
    }
    let gitdir_file = git_dir.join("gitdir");
    check_owner(&gitdir_file, owner)?;
    let back = read_line(&gitdir_file)?;
    if std::fs::canonicalize(git_dir.join(&back)).ok().as_deref() != Some(gitlink.as_path()) {
        return Err(format!(
            "names {shown}, the git directory of another worktree ({back}), not of this one"
        ));
    }
    check_owner(common_dir, owner)?;
    let is = |name: &str, dir: bool| {
        std::fs::symlink_metadata(common_dir.join(name))
            .is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
    };
    if !(is("HEAD", false) && is("objects", true) && is("refs", true)) {
        return Err(format!(
            "names {shown}, whose common directory {} is no git directory (HEAD, objects, refs)",
            common_dir.display()
        ));
    }
    for dir in [&git_dir, &common_dir.to_path_buf()] {
        if let Some(private) = spec
            .private
            .iter()
            .find(|p| dir.starts_with(p) || p.starts_with(dir))
        {
            return Err(format!(
                "leads to {}, which holds the daemon's private path {}",
                dir.display(),
                private.display()
            ));
        }
        if let Some(path) = spec
            .protected
            .paths()
            .iter()
            .find(|p| dir.starts_with(p) || p.starts_with(dir))
        {
            return Err(format!(
                "leads to {}, which holds the protected path {}",
                dir.display(),
                path.display()
            ));
        }
    }
    Ok(Some(FollowedGitDir {
        git_dir,
        common_dir: common_dir.to_path_buf(),
    }))
}

/// The first line of a small regular file (not a symlink), without its line end.
fn read_line(path: &Path) -> Result<String, String> {
    let metadata = std::fs::symlink_metadata(path)
        .map_err(|e| format!("leads to {}, which cannot be read: {e}", path.display()))?;
    if !metadata.is_file() || metadata.len() > MAX_LINK_BYTES {
        return Err(format!(
            "leads to {}, which is no small regular file",
            path.display()
        ));
    }
    let content = std::fs::read_to_string(path)
        .map_err(|e| format!("leads to {}, which cannot be read: {e}", path.display()))?;
    Ok(content.lines().next().unwrap_or_default().to_string())
}

/// `path` (not followed if a symlink) belongs to `owner`, the write root's.
fn check_owner(path: &Path, owner: u32) -> Result<(), String> {
    let metadata = std::fs::symlink_metadata(path)
        .map_err(|e| format!("leads to {}, which cannot be read: {e}", path.display()))?;
    if metadata.uid() != owner {
        return Err(format!(
            "leads to {}, owned by uid {}, not by the write root's owner (uid {owner})",
            path.display(),
            metadata.uid()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_map_to_a_git_directory_in_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join("proj/.git");
        std::fs::create_dir_all(common.join("worktrees/side")).unwrap();
        std::fs::create_dir_all(common.join("objects")).unwrap();
        std::fs::create_dir_all(common.join("refs")).unwrap();
        let followed = FollowedGitDir {
            git_dir: common.join("worktrees/side"),
            common_dir: common.clone(),
        };
        let areas: Vec<(PathBuf, PathBuf)> = followed
            .areas()
            .into_iter()
            .map(|a| (a.dir, a.as_in_root))
            .collect();
        assert_eq!(
            areas,
            vec![
                (
                    common.join("worktrees/side"),
                    PathBuf::from(".git/worktrees/side")
                ),
                (common.join("objects"), PathBuf::from(".git/objects")),
                (common.join("refs"), PathBuf::from(".git/refs")),
            ]
        );
    }
}
