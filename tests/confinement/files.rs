//! File verbs against real files: confinement beneath roots, symlink refusal (including symlinks
//! swapped in by a racing thread), protected names, atomic replacement, modes, caps, listing.

use rustix::fs::RenameFlags;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use verbd::files::{self, DirEntryInfo, EntryKind, FileError, FileOp, FileVerbSpec, check_write};
use verbd::protected::ProtectedNames;

struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn sandbox() -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let root = base.join("root");
    let outside = base.join("outside");
    fs::create_dir(&root).unwrap();
    fs::create_dir(&outside).unwrap();
    Sandbox {
        _dir: dir,
        root,
        outside,
    }
}

fn spec(op: FileOp, root: &Path) -> FileVerbSpec {
    let spec = FileVerbSpec {
        op,
        roots: vec![root.to_path_buf()],
        max_size: 1024 * 1024,
        create_only: false,
        allowed_modes: vec![0o644, 0o600],
        protected: ProtectedNames::builtin(),
    };
    spec.validate().unwrap();
    spec
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn write_inside_root_creates_then_replaces_with_a_receipt() {
    let sb = sandbox();
    let spec = spec(FileOp::Write, &sb.root);
    fs::create_dir(sb.root.join("sub")).unwrap();
    let path = sb.root.join("sub/note.txt");

    let first = files::write_file(&spec, &path, b"hello", None).unwrap();
    assert_eq!(first.path, path);
    assert_eq!(first.size, 5);
    assert!(first.created);
    assert_eq!(
        first.sha256,
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    assert_eq!(fs::read(&path).unwrap(), b"hello");
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o644);

    let second = files::write_file(&spec, &path, b"bye", Some(0o600)).unwrap();
    assert!(!second.created);
    assert_eq!(fs::read(&path).unwrap(), b"bye");
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(
        dir_names(&sb.root.join("sub")),
        ["note.txt"],
        "no temp file is left behind"
    );
}

#[test]
fn a_reader_never_sees_a_partial_write() {
    let sb = sandbox();
    let spec = spec(FileOp::Write, &sb.root);
    let path = sb.root.join("shared.txt");
    let small = vec![b'a'; 4096];
    let large = vec![b'b'; 300_000];
    files::write_file(&spec, &path, &small, None).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (done, path, small, large) = (done.clone(), path.clone(), small.clone(), large.clone());
        thread::spawn(move || {
            let mut reads = 0u64;
            while !done.load(Ordering::Relaxed) {
                let seen = fs::read(&path).expect("the file always exists");
                assert!(
                    seen == small || seen == large,
                    "reader saw a mixed or partial file of {} bytes",
                    seen.len()
                );
                reads += 1;
            }
            reads
        })
    };
    for i in 0..300 {
        let content = if i % 2 == 0 { &large } else { &small };
        files::write_file(&spec, &path, content, None).unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0, "the reader must have polled");
    assert_eq!(dir_names(&sb.root), ["shared.txt"]);
}

#[test]
fn lexical_escapes_are_refused_before_touching_anything() {
    let sb = sandbox();
    let spec = spec(FileOp::Write, &sb.root);
    let dotdot = PathBuf::from(format!("{}/../outside/x", sb.root.display()));
    assert!(matches!(
        files::write_file(&spec, &dotdot, b"x", None),
        Err(FileError::NotNormalized { .. })
    ));
    let outside = sb.outside.join("x");
    let err = files::write_file(&spec, &outside, b"x", None).unwrap_err();
    assert!(matches!(err, FileError::NotUnderRoot { .. }), "{err}");
    assert!(err.to_string().contains(&sb.root.display().to_string()));
    assert!(matches!(
        files::write_file(&spec, Path::new("relative/x"), b"x", None),
        Err(FileError::NotAbsolute { .. })
    ));
    let sibling = PathBuf::from(format!("{}-sibling/x", sb.root.display()));
    assert!(matches!(
        files::write_file(&spec, &sibling, b"x", None),
        Err(FileError::NotUnderRoot { .. })
    ));
    assert!(dir_names(&sb.outside).is_empty());
    assert!(dir_names(&sb.root).is_empty());
}

#[test]
fn symlinks_are_never_followed_final_or_intermediate() {
    let sb = sandbox();
    let secret = sb.outside.join("secret");
    fs::write(&secret, b"original").unwrap();
    symlink(&secret, sb.root.join("link")).unwrap();
    symlink(&sb.outside, sb.root.join("dirlink")).unwrap();
    symlink("../outside", sb.root.join("rel_dirlink")).unwrap();

    let write = spec(FileOp::Write, &sb.root);
    let append = spec(FileOp::Append, &sb.root);
    let read = spec(FileOp::Read, &sb.root);
    let list = spec(FileOp::List, &sb.root);

    let final_link = sb.root.join("link");
    match files::write_file(&write, &final_link, b"pwned", None) {
        Err(FileError::Symlink { component }) => assert_eq!(component, final_link),
        other => panic!("expected Symlink, got {other:?}"),
    }
    assert!(matches!(
        files::append_file(&append, &final_link, b"pwned"),
        Err(FileError::Symlink { .. })
    ));
    assert!(matches!(
        files::read_file(&read, &final_link),
        Err(FileError::Symlink { .. })
    ));

    for dir in ["dirlink", "rel_dirlink"] {
        let through = sb.root.join(dir).join("new");
        match files::write_file(&write, &through, b"pwned", None) {
            Err(FileError::Symlink { component }) => assert_eq!(component, sb.root.join(dir)),
            other => panic!("expected Symlink for {dir}, got {other:?}"),
        }
        assert!(matches!(
            files::append_file(&append, &through, b"pwned"),
            Err(FileError::Symlink { .. })
        ));
        assert!(matches!(
            files::read_file(&read, &sb.root.join(dir).join("secret")),
            Err(FileError::Symlink { .. })
        ));
        assert!(matches!(
            files::list_dir(&list, &sb.root.join(dir)),
            Err(FileError::Symlink { .. })
        ));
    }
    assert_eq!(fs::read(&secret).unwrap(), b"original");
    assert_eq!(dir_names(&sb.outside), ["secret"]);
}

#[test]
fn a_root_that_goes_through_a_symlink_is_refused() {
    let sb = sandbox();
    let alias = sb.outside.join("alias");
    symlink(&sb.root, &alias).unwrap();
    let mut bad = spec(FileOp::Write, &sb.root);
    bad.roots = vec![alias.clone()];
    assert!(matches!(bad.validate(), Err(FileError::InvalidSpec(_))));
    // Even unvalidated, the root is opened without following symlinks.
    assert!(files::write_file(&bad, &alias.join("x"), b"x", None).is_err());
    assert!(dir_names(&sb.root).is_empty());
}

/// Swap `a` and `b` atomically in a tight loop until `stop` is set.
fn exchanger(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &a,
                rustix::fs::CWD,
                &b,
                RenameFlags::EXCHANGE,
            )
            .unwrap();
            swaps += 1;
        }
        swaps
    })
}

#[test]
fn a_directory_symlink_swapped_in_during_the_call_never_leads_outside() {
    let sb = sandbox();
    let spec = spec(FileOp::Write, &sb.root);
    fs::create_dir(sb.root.join("sub")).unwrap();
    symlink(&sb.outside, sb.root.join("alt")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let racer = exchanger(sb.root.join("sub"), sb.root.join("alt"), stop.clone());

    let (mut written, mut refused) = (0u32, 0u32);
    for i in 0..20_000u32 {
        match files::write_file(&spec, &sb.root.join(format!("sub/f{i}")), b"data", None) {
            Ok(_) => written += 1,
            Err(FileError::Symlink { .. }) | Err(FileError::NotADirectory { .. }) => refused += 1,
            Err(other) => panic!("unexpected error: {other}"),
        }
        assert!(
            dir_names(&sb.outside).is_empty(),
            "a write escaped the root"
        );
        if i >= 2_000 && written > 0 && refused > 0 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    assert!(swaps > 0);
    assert!(
        written > 0 && refused > 0,
        "the race must have been exercised: {written} written, {refused} refused"
    );
    assert!(dir_names(&sb.outside).is_empty());
}

#[test]
fn a_file_symlink_swapped_in_during_the_call_is_never_written_through() {
    let sb = sandbox();
    let write = spec(FileOp::Write, &sb.root);
    let append = spec(FileOp::Append, &sb.root);
    let secret = sb.outside.join("secret");
    fs::write(&secret, b"original").unwrap();
    let target = sb.root.join("target");
    fs::write(&target, b"start").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (root, secret, stop) = (sb.root.clone(), secret.clone(), stop.clone());
        thread::spawn(move || {
            let mut swaps = 0u64;
            let (staged_link, staged_file) = (root.join("staged-link"), root.join("staged-file"));
            while !stop.load(Ordering::Relaxed) {
                // Atomically replace whatever `target` is with a symlink to the secret, then
                // with a regular file again, so both states keep recurring.
                symlink(&secret, &staged_link).unwrap();
                fs::rename(&staged_link, root.join("target")).unwrap();
                fs::write(&staged_file, b"decoy").unwrap();
                fs::rename(&staged_file, root.join("target")).unwrap();
                swaps += 1;
            }
            swaps
        })
    };

    let (mut written, mut refused) = (0u32, 0u32);
    for i in 0..20_000u32 {
        let outcome = if i % 2 == 0 {
            files::write_file(&write, &target, b"new", None).map(|_| ())
        } else {
            files::append_file(&append, &target, b"+").map(|_| ())
        };
        match outcome {
            Ok(()) => written += 1,
            Err(FileError::Symlink { .. }) | Err(FileError::HardLinked { .. }) => refused += 1,
            Err(other) => panic!("unexpected error: {other}"),
        }
        if i >= 2_000 && written > 0 && refused > 0 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(racer.join().unwrap() > 0);
    assert!(
        written > 0 && refused > 0,
        "the race must have been exercised: {written} written, {refused} refused"
    );
    assert_eq!(fs::read(&secret).unwrap(), b"original");
    assert_eq!(dir_names(&sb.outside), ["secret"]);
}

#[test]
fn protected_names_at_any_depth_are_refused_and_nothing_is_written() {
    let sb = sandbox();
    let write = spec(FileOp::Write, &sb.root);
    let append = spec(FileOp::Append, &sb.root);
    let read = spec(FileOp::Read, &sb.root);
    fs::create_dir_all(sb.root.join("sub/.git/hooks")).unwrap();
    fs::create_dir_all(sb.root.join("docs")).unwrap();
    fs::create_dir_all(sb.root.join(".claude")).unwrap();
    for (relative, rule) in [
        ("sub/.git/hooks/pre-commit", ".git/hooks"),
        ("sub/.git/config", ".git/config"),
        ("docs/CLAUDE.md", "claude.md"),
        ("Claude.md", "claude.md"),
        ("AGENTS.md", "agents.md"),
        (".claude/settings.json", ".claude"),
        (".mcp.json", ".mcp.json"),
        (".bashrc", ".bashrc"),
    ] {
        let path = sb.root.join(relative);
        match files::write_file(&write, &path, b"evil", None) {
            Err(FileError::Protected { rule: hit, .. }) => {
                assert!(hit.contains(rule), "{relative}: rule {hit}")
            }
            other => panic!("{relative}: expected Protected, got {other:?}"),
        }
        assert!(matches!(
            files::append_file(&append, &path, b"evil"),
            Err(FileError::Protected { .. })
        ));
        assert!(matches!(
            files::read_file(&read, &path),
            Err(FileError::Protected { .. })
        ));
        assert!(matches!(
            check_write(&write.roots, &write.protected, &path),
            Err(FileError::Protected { .. })
        ));
        assert!(!path.exists(), "{relative} must not have been written");
    }
    assert!(dir_names(&sb.root.join("sub/.git/hooks")).is_empty());
    assert!(dir_names(&sb.root.join(".claude")).is_empty());

    let policy_file = sb.root.join("policy.toml");
    let mut with_policy = spec(FileOp::Write, &sb.root);
    with_policy.protected = ProtectedNames::with_additions(
        &["secrets.yaml".into()],
        std::slice::from_ref(&policy_file),
    )
    .unwrap();
    for path in [policy_file.clone(), sb.root.join("docs/SECRETS.yaml")] {
        assert!(matches!(
            files::write_file(&with_policy, &path, b"x", None),
            Err(FileError::Protected { .. })
        ));
        assert!(!path.exists());
    }

    let mut inside_protected = spec(FileOp::Write, &sb.root);
    inside_protected.roots = vec![sb.root.join(".claude")];
    assert!(matches!(
        inside_protected.validate(),
        Err(FileError::InvalidSpec(_))
    ));
}

#[test]
fn create_only_never_replaces() {
    let sb = sandbox();
    let mut spec = spec(FileOp::Write, &sb.root);
    spec.create_only = true;
    let path = sb.root.join("once.txt");
    assert!(
        files::write_file(&spec, &path, b"first", None)
            .unwrap()
            .created
    );
    assert!(matches!(
        files::write_file(&spec, &path, b"second", None),
        Err(FileError::Exists { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), b"first");
    assert_eq!(dir_names(&sb.root), ["once.txt"], "no temp file is left");
}

#[test]
fn no_file_verb_ever_sets_or_keeps_an_executable_bit() {
    let sb = sandbox();
    let write = spec(FileOp::Write, &sb.root);
    let path = sb.root.join("script.sh");
    for mode in [0o755, 0o744, 0o4644, 0o2644, 0o1644, 0o700] {
        let refused = files::write_file(&write, &path, b"#!/bin/sh", Some(mode));
        assert!(
            matches!(refused, Err(FileError::ModeNotAllowed { .. })),
            "{refused:?}"
        );
        // The refusal says what would be accepted, so the caller can ask for it.
        let said = refused.unwrap_err().to_string();
        let allowed: Vec<String> = write
            .allowed_modes
            .iter()
            .map(|m| format!("{m:#o}"))
            .collect();
        assert!(
            said.ends_with(&format!("allowed modes are {}", allowed.join(", "))),
            "{said}"
        );
        assert!(!path.exists());
    }
    let mut bad = write.clone();
    bad.allowed_modes = vec![0o644, 0o755];
    assert!(matches!(bad.validate(), Err(FileError::InvalidSpec(_))));
    bad.allowed_modes = vec![0o4600];
    assert!(matches!(bad.validate(), Err(FileError::InvalidSpec(_))));

    // Replacing an existing executable gives a plain file.
    fs::write(&path, b"old").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    files::write_file(&write, &path, b"new", None).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o644);

    // Appending to an executable is refused: it would change code.
    let append = spec(FileOp::Append, &sb.root);
    let exe = sb.root.join("exe.sh");
    fs::write(&exe, b"#!/bin/sh\n").unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(matches!(
        files::append_file(&append, &exe, b"rm -rf /\n"),
        Err(FileError::ExecutableTarget { .. })
    ));
    assert_eq!(fs::read(&exe).unwrap(), b"#!/bin/sh\n");
}

#[test]
fn append_creates_extends_and_respects_the_cap() {
    let sb = sandbox();
    let mut spec = spec(FileOp::Append, &sb.root);
    spec.max_size = 10;
    let path = sb.root.join("log.txt");
    let first = files::append_file(&spec, &path, b"abc").unwrap();
    assert!(first.created);
    assert_eq!(first.size, 3);
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o644);
    let second = files::append_file(&spec, &path, b"def").unwrap();
    assert!(!second.created);
    assert_eq!(fs::read(&path).unwrap(), b"abcdef");
    match files::append_file(&spec, &path, b"ghijk") {
        Err(FileError::TooLarge { size, max }) => assert_eq!((size, max), (11, 10)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(fs::read(&path).unwrap(), b"abcdef");
    // The cap is the largest size allowed, not the first one refused.
    let full = files::append_file(&spec, &path, b"ghij").unwrap();
    assert_eq!(full.size, 4);
    assert_eq!(fs::read(&path).unwrap(), b"abcdefghij");
    assert!(matches!(
        files::append_file(&spec, &path, b"k"),
        Err(FileError::TooLarge { size: 11, max: 10 })
    ));

    // A hard link may be a file outside the root: refused.
    let outside = sb.outside.join("victim");
    fs::write(&outside, b"v").unwrap();
    fs::hard_link(&outside, sb.root.join("linked")).unwrap();
    assert!(matches!(
        files::append_file(&spec, &sb.root.join("linked"), b"x"),
        Err(FileError::HardLinked { links: 2, .. })
    ));
    assert_eq!(fs::read(&outside).unwrap(), b"v");
}

#[test]
fn read_is_capped_and_refuses_non_regular_files() {
    let sb = sandbox();
    let mut spec = spec(FileOp::Read, &sb.root);
    spec.max_size = 8;
    fs::write(sb.root.join("small"), b"12345678").unwrap();
    fs::write(sb.root.join("big"), b"123456789").unwrap();
    assert_eq!(
        files::read_file(&spec, &sb.root.join("small")).unwrap(),
        b"12345678"
    );
    assert!(matches!(
        files::read_file(&spec, &sb.root.join("big")),
        Err(FileError::TooLarge { size: 9, max: 8 })
    ));
    assert!(matches!(
        files::read_file(&spec, &sb.root.join("missing")),
        Err(FileError::NotFound { .. })
    ));
    fs::create_dir(sb.root.join("dir")).unwrap();
    assert!(matches!(
        files::read_file(&spec, &sb.root.join("dir")),
        Err(FileError::NotARegularFile { .. })
    ));
    // A FIFO must be refused, not block the daemon.
    nix::unistd::mkfifo(
        &sb.root.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    assert!(matches!(
        files::read_file(&spec, &sb.root.join("fifo")),
        Err(FileError::NotARegularFile { .. })
    ));
    assert!(matches!(
        files::write_file(&spec, &sb.root.join("x"), b"x", None),
        Err(FileError::WrongOp {
            actual: "file.read",
            requested: "file.write"
        })
    ));
}

#[test]
fn list_shows_entries_and_hides_protected_ones() {
    let sb = sandbox();
    let spec = spec(FileOp::List, &sb.root);
    fs::write(sb.root.join("b.txt"), b"12345").unwrap();
    fs::create_dir(sb.root.join("a-dir")).unwrap();
    fs::write(sb.root.join("CLAUDE.md"), b"memory").unwrap();
    fs::create_dir_all(sb.root.join(".git/hooks")).unwrap();
    fs::create_dir_all(sb.root.join(".git/objects")).unwrap();
    fs::write(sb.root.join(".git/config"), b"").unwrap();
    symlink(&sb.outside, sb.root.join("out")).unwrap();

    let entries = files::list_dir(&spec, &sb.root).unwrap();
    let expected = [
        (".git", EntryKind::Dir),
        ("a-dir", EntryKind::Dir),
        ("b.txt", EntryKind::File),
        ("out", EntryKind::Symlink),
    ];
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.name.as_str(), e.kind))
            .collect::<Vec<_>>(),
        expected
    );
    assert_eq!(
        entries.iter().find(|e| e.name == "b.txt"),
        Some(&DirEntryInfo {
            name: "b.txt".into(),
            kind: EntryKind::File,
            size: 5
        })
    );
    let git = files::list_dir(&spec, &sb.root.join(".git")).unwrap();
    assert_eq!(
        git.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["objects"]
    );
    assert!(matches!(
        files::list_dir(&spec, &sb.root.join(".git/hooks")),
        Err(FileError::Protected { .. })
    ));
    assert!(matches!(
        files::list_dir(&spec, &sb.root.join("b.txt")),
        Err(FileError::NotADirectory { .. })
    ));
}

#[test]
fn validate_refuses_unusable_roots() {
    let sb = sandbox();
    let mut bad = spec(FileOp::Write, &sb.root);
    for root in [
        PathBuf::from("relative"),
        sb.root.join("missing"),
        PathBuf::from(format!("{}/", sb.root.display())),
    ] {
        bad.roots = vec![root.clone()];
        assert!(bad.validate().is_err(), "{}", root.display());
    }
    fs::write(sb.root.join("file"), b"").unwrap();
    bad.roots = vec![sb.root.join("file")];
    assert!(bad.validate().is_err());
    bad.roots = vec![];
    assert!(bad.validate().is_err());
}
