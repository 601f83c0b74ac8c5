use super::paths::own_descriptor;
use super::*;

#[test]
fn own_descriptors_are_recognised_and_nothing_else() {
    assert_eq!(own_descriptor(b"/dev/stdout"), Some(1));
    assert_eq!(own_descriptor(b"/dev/stderr"), Some(2));
    assert_eq!(own_descriptor(b"/dev/fd/63"), Some(63));
    assert_eq!(own_descriptor(b"/proc/self/fd/3"), Some(3));
    assert_eq!(own_descriptor(b"/proc/thread-self/fd/4"), Some(4));
    for other in [
        &b"/dev/fd/"[..],
        b"/dev/fd/3/x",
        b"/proc/self/fd/3x",
        b"/proc/self/root/CLAUDE.md",
        b"/dev/null",
        b"dev/stdout",
    ] {
        assert_eq!(own_descriptor(other), None, "{other:?}");
    }
}

#[test]
fn protected_names_are_matched_inside_write_roots_only() {
    let policy = CreatePolicy {
        write_roots: vec![PathBuf::from("/work/project")],
        protected: ProtectedNames::builtin(),
        mount_points: Vec::new(),
        git_areas: Vec::new(),
    };
    for hit in [
        "/work/project/AGENTS.md",
        "/work/project/src/CLAUDE.md",
        "/work/project/.envrc",
        "/work/project/sub/.git",
        "/work/project/.git/hooks/post-checkout",
    ] {
        assert!(policy.protected(Path::new(hit)).is_some(), "{hit}");
    }
    for miss in [
        "/work/project/new.py",
        "/work/project/.git/index.lock",
        "/work/project/src/lib.rs",
        // Above the root: the root's own path never makes its entries protected.
        "/work/project",
    ] {
        assert!(policy.protected(Path::new(miss)).is_none(), "{miss}");
    }
    assert!(policy.leads_to_protected(Path::new("/work/project/sub/.git")));
    assert!(!policy.leads_to_protected(Path::new("/work/project/src")));
}

#[test]
fn a_followed_git_directory_is_judged_as_in_a_write_root() {
    let area = |dir: &str, as_in_root: &str| GitArea {
        dir: PathBuf::from(dir),
        as_in_root: PathBuf::from(as_in_root),
    };
    let policy = CreatePolicy {
        write_roots: vec![PathBuf::from("/h/proj-agent")],
        protected: ProtectedNames::builtin(),
        mount_points: Vec::new(),
        git_areas: vec![
            area("/h/proj/.git/worktrees/a", ".git/worktrees/a"),
            area("/h/proj/.git/objects", ".git/objects"),
            area("/h/proj/.git/refs", ".git/refs"),
        ],
    };
    for data in [
        "/h/proj/.git/worktrees/a/index.lock",
        "/h/proj/.git/worktrees/a/HEAD",
        "/h/proj/.git/worktrees/a/logs/HEAD",
        "/h/proj/.git/worktrees/a/rebase-merge/git-rebase-todo",
        "/h/proj/.git/objects/ab/cdef",
        "/h/proj/.git/refs/heads/side.lock",
    ] {
        assert!(policy.in_write_root(Path::new(data)), "{data}");
        assert!(policy.protected(Path::new(data)).is_none(), "{data}");
    }
    for obeyed in [
        "/h/proj/.git/worktrees/a/commondir",
        "/h/proj/.git/worktrees/a/gitdir",
        "/h/proj/.git/worktrees/a/config.worktree",
        "/h/proj/.git/worktrees/a/config",
        "/h/proj/.git/worktrees/a/hooks/pre-commit",
        "/h/proj/.git/objects/x/.git/hooks/pre-commit",
    ] {
        assert!(policy.protected(Path::new(obeyed)).is_some(), "{obeyed}");
    }
    // The rest of the common directory is in no write root.
    for outside in [
        "/h/proj/.git/config",
        "/h/proj/.git/hooks/pre-commit",
        "/h/proj/a.txt",
    ] {
        assert!(!policy.in_write_root(Path::new(outside)), "{outside}");
    }
}

#[test]
fn a_linked_worktrees_git_directory_is_data_but_what_git_obeys() {
    let policy = CreatePolicy {
        write_roots: vec![PathBuf::from("/w")],
        protected: ProtectedNames::builtin(),
        mount_points: Vec::new(),
        git_areas: Vec::new(),
    };
    let place = |p: &str| policy.git_place(Path::new(p));
    assert_eq!(
        place("/w/r/.git/worktrees"),
        Some(GitPlace::WorktreesDirectory)
    );
    assert_eq!(
        place("/w/r/.git/worktrees/x"),
        Some(GitPlace::WorktreeDirectory)
    );
    assert_eq!(
        place("/w/r/.git/worktrees/x/commondir"),
        Some(GitPlace::CommonDir)
    );
    assert_eq!(
        place("/w/r/.git/worktrees/x/gitdir"),
        Some(GitPlace::WorktreeLocation)
    );
    assert_eq!(
        place("/w/r/.git/worktrees/x/config.worktree"),
        Some(GitPlace::Config)
    );
    for data in [
        "/w/r/.git/worktrees/x/HEAD",
        "/w/r/.git/worktrees/x/index.lock",
        "/w/r/.git/worktrees/x/logs/HEAD",
        "/w/r/.git/worktrees/x/refs/bisect/bad",
        "/w/r/.git/worktrees/x/rebase-merge/done",
    ] {
        assert!(policy.protected(Path::new(data)).is_none(), "{data}");
    }
    for kept in [
        "/w/r/.git/worktrees/x/commondir",
        "/w/r/.git/worktrees/x/gitdir",
        "/w/r/.git/worktrees/x/config",
        "/w/r/.git/worktrees/x/config.worktree",
        "/w/r/.git/worktrees/x/hooks/pre-commit",
        "/w/r/.git/worktrees/x/info/attributes",
        "/w/r/.git/worktrees/x/modules/m/config",
        "/w/r/.git/modules/m/hooks/post-checkout",
    ] {
        assert!(policy.protected(Path::new(kept)).is_some(), "{kept}");
    }
    for target in ["/w/r/.git/worktrees/x", "/w/r/.git/modules/lib/deep"] {
        assert!(policy.is_gitlink_target(Path::new(target)), "{target}");
    }
    for other in [
        "/w/fake",
        "/w/r/.git",
        "/w/r/.git/worktrees",
        "/w/r/.git/modules",
        "/elsewhere/r/.git/worktrees/x",
    ] {
        assert!(!policy.is_gitlink_target(Path::new(other)), "{other}");
    }
}
