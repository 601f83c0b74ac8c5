//! Library-level tests for secret sources, permission checks, private secret files and output
//! scrubbing, against real files, real permissions, real uids and real processes.
use crate::common::skip;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use verbd::scrub::{ScrubError, ScrubPattern, Scrubber};
use verbd::secrets::{
    PermissionProblemKind, SecretCopy, SecretError, SecretSource, SecretStore, SecretValue,
    check_source,
};

const AGENT_UID: u32 = 61000;
const FOREIGN_UID: u32 = 62000;

/// The tests run as the daemon would: the files they create are owned by this uid.
fn daemon_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Returns false (after saying so loudly) when the test cannot run without root; under CI a
/// missing precondition fails instead.
fn have_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test} needs root (CI=true: failing instead of skipping)");
    }
    skip::announce(&format!("SKIPPED {test}: needs root"));
    false
}

/// A private (0700) scratch directory.
fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn write_file(path: &Path, content: &[u8], mode: u32) {
    fs::write(path, content).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn sources(pairs: &[(&str, SecretSource)]) -> BTreeMap<String, SecretSource> {
    pairs
        .iter()
        .map(|(name, source)| ((*name).to_owned(), source.clone()))
        .collect()
}

fn store_of(pairs: &[(&str, &[u8])]) -> SecretStore {
    SecretStore::from_values(
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), SecretValue::new(value.to_vec())))
            .collect(),
    )
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

// ---------------------------------------------------------------------------------------------
// Loading

#[test]
fn file_source_loads_with_one_trailing_newline_stripped() {
    let dir = private_dir();
    let plain = dir.path().join("plain");
    let crlf = dir.path().join("crlf");
    let two = dir.path().join("two");
    write_file(&plain, b"pg-password-123\n", 0o600);
    write_file(&crlf, b"windows-secret-1\r\n", 0o600);
    write_file(&two, b"line one\nline two\n\n", 0o600);
    let store = SecretStore::load(&sources(&[
        ("plain", SecretSource::File(plain)),
        ("crlf", SecretSource::File(crlf)),
        ("two", SecretSource::File(two)),
    ]))
    .unwrap();
    assert_eq!(store.get("plain").unwrap().expose(), b"pg-password-123");
    assert_eq!(store.get("crlf").unwrap().expose(), b"windows-secret-1");
    assert_eq!(store.get("two").unwrap().expose(), b"line one\nline two\n");
    assert_eq!(store.names().collect::<Vec<_>>(), ["crlf", "plain", "two"]);
    assert!(store.get("missing").is_none());
    assert!(store.warnings().is_empty(), "{:?}", store.warnings());
}

#[test]
fn load_errors_name_the_source_and_never_the_value() {
    let dir = private_dir();
    let secret = b"VERY-SECRET-VALUE-0451";
    let target = dir.path().join("target");
    write_file(&target, secret, 0o600);
    let link = dir.path().join("link");
    symlink(&target, &link).unwrap();
    let empty = dir.path().join("empty");
    write_file(&empty, b"\n", 0o600);
    let huge = dir.path().join("huge");
    write_file(&huge, &secret.repeat(60_000), 0o600);

    type IsExpected = fn(&SecretError) -> bool;
    let cases: Vec<(SecretSource, IsExpected)> = vec![
        (SecretSource::File(link.clone()), |e| {
            matches!(e, SecretError::Read { .. })
        }),
        (SecretSource::File(dir.path().to_path_buf()), |e| {
            matches!(e, SecretError::NotRegularFile { .. })
        }),
        (SecretSource::File(empty.clone()), |e| {
            matches!(e, SecretError::Empty { .. })
        }),
        (SecretSource::File(huge.clone()), |e| {
            matches!(e, SecretError::TooLarge { .. })
        }),
        (SecretSource::File(dir.path().join("absent")), |e| {
            matches!(e, SecretError::Read { .. })
        }),
        (
            SecretSource::Env("VERBD_TEST_DEFINITELY_UNSET_VARIABLE".to_owned()),
            |e| matches!(e, SecretError::EnvMissing { .. }),
        ),
    ];
    for (source, expected) in cases {
        let error = SecretStore::load(&sources(&[("db", source.clone())])).unwrap_err();
        assert!(expected(&error), "{source}: unexpected {error:?}");
        let shown = format!("{error} {error:?}");
        assert!(
            shown.contains("`db`") || shown.contains("\"db\""),
            "{shown}"
        );
        assert!(!contains(shown.as_bytes(), secret), "{shown}");
        assert!(!contains(shown.as_bytes(), b"SECRET-VALUE"), "{shown}");
    }
    // The symlink is refused, not followed: the error is ELOOP from O_NOFOLLOW.
    let error = SecretStore::load(&sources(&[("db", SecretSource::File(link))])).unwrap_err();
    assert!(error.to_string().contains("link"), "{error}");
    match error {
        SecretError::Read { error, .. } => assert_eq!(error.raw_os_error(), Some(libc::ELOOP)),
        other => panic!("unexpected {other:?}"),
    }
}

/// Credential and env sources need the daemon's environment. Setting variables in a running
/// multi-threaded test binary is unsound, so the test re-runs itself as a child process with the
/// environment prepared, and the child does the loading.
#[test]
fn credential_and_env_sources_load() {
    const CHILD_MODE: &str = "VERBD_SECRETS_TEST_CHILD";
    match std::env::var(CHILD_MODE).as_deref() {
        Ok("absolute") => {
            let store = SecretStore::load(&sources(&[
                ("pg", SecretSource::Credential("pg".to_owned())),
                ("token", SecretSource::Env("VERBD_TEST_TOKEN".to_owned())),
            ]))
            .unwrap();
            assert_eq!(store.get("pg").unwrap().expose(), b"credential-value-77");
            assert_eq!(store.get("token").unwrap().expose(), b"env-token-value-88");
            let warnings = store.warnings();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].contains("`token`") && warnings[0].contains("discouraged"));
            assert!(!warnings[0].contains("env-token-value"));
            let absent = SecretStore::load(&sources(&[(
                "pg",
                SecretSource::Credential("absent".to_owned()),
            )]))
            .unwrap_err();
            assert!(matches!(absent, SecretError::Read { .. }), "{absent:?}");
            // The self-test check resolves the credential the same way.
            check_source(
                "pg",
                &SecretSource::Credential("pg".to_owned()),
                daemon_uid(),
                &[AGENT_UID],
            )
            .unwrap();
            return;
        }
        Ok("relative") => {
            let error = SecretStore::load(&sources(&[(
                "pg",
                SecretSource::Credential("pg".to_owned()),
            )]))
            .unwrap_err();
            assert!(
                matches!(error, SecretError::CredentialsDirectoryNotAbsolute { .. }),
                "{error:?}"
            );
            let problem = check_source(
                "pg",
                &SecretSource::Credential("pg".to_owned()),
                daemon_uid(),
                &[],
            )
            .unwrap_err();
            assert_eq!(
                problem.kind,
                PermissionProblemKind::CredentialsDirectoryNotAbsolute
            );
            return;
        }
        Ok(other) => panic!("unknown child mode {other}"),
        Err(_) => {}
    }

    let credentials = private_dir();
    write_file(
        &credentials.path().join("pg"),
        b"credential-value-77\n",
        0o400,
    );
    for (mode, dir) in [
        ("absolute", credentials.path().as_os_str().to_owned()),
        ("relative", "relative/credentials".into()),
    ] {
        let output = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "secrets::credential_and_env_sources_load",
                "--test-threads=1",
            ])
            .env(CHILD_MODE, mode)
            .env("CREDENTIALS_DIRECTORY", &dir)
            .env("VERBD_TEST_TOKEN", "env-token-value-88")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child ({mode}) failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    if std::env::var_os("CREDENTIALS_DIRECTORY").is_none() {
        let error = SecretStore::load(&sources(&[(
            "pg",
            SecretSource::Credential("pg".to_owned()),
        )]))
        .unwrap_err();
        assert!(
            matches!(error, SecretError::NoCredentialsDirectory { .. }),
            "{error:?}"
        );
    }
    let error = SecretStore::load(&sources(&[(
        "pg",
        SecretSource::Credential("../etc/shadow".to_owned()),
    )]))
    .unwrap_err();
    assert!(
        matches!(error, SecretError::InvalidCredentialName { .. }),
        "{error:?}"
    );
}

#[test]
fn secret_values_never_show_in_formatting() {
    let store = store_of(&[("k", b"formatting-secret-999")]);
    let value = store.get("k").unwrap();
    for shown in [
        format!("{value}"),
        format!("{value:?}"),
        format!("{store:?}"),
    ] {
        assert!(!shown.contains("formatting-secret"), "{shown}");
    }
    assert_eq!(format!("{value}"), "[secret]");
    let scrubber = Scrubber::new(&store, &[], true).unwrap();
    let shown = format!("{scrubber:?} {:?}", scrubber.stream());
    assert!(!shown.contains("formatting-secret"), "{shown}");
    assert!(
        !shown.contains(&STANDARD.encode("formatting-secret-999")),
        "{shown}"
    );
}

// ---------------------------------------------------------------------------------------------
// Permission checks (self-test)

#[test]
fn check_source_accepts_root_owned_0600() {
    let dir = private_dir();
    let path = dir.path().join("pg");
    write_file(&path, b"value-for-check", 0o600);
    check_source(
        "pg",
        &SecretSource::File(path.clone()),
        daemon_uid(),
        &[AGENT_UID],
    )
    .unwrap();
    write_file(&path, b"value-for-check", 0o400);
    check_source("pg", &SecretSource::File(path), daemon_uid(), &[AGENT_UID]).unwrap();
    check_source(
        "pg",
        &SecretSource::Env("PGPASSWORD".to_owned()),
        daemon_uid(),
        &[AGENT_UID],
    )
    .unwrap();
}

#[test]
fn check_source_refuses_group_and_world_access_with_the_fix() {
    let dir = private_dir();
    let path = dir.path().join("pg");
    for mode in [0o644, 0o640, 0o604, 0o660, 0o610] {
        write_file(&path, b"value-for-check", mode);
        let problem = check_source(
            "pg",
            &SecretSource::File(path.clone()),
            daemon_uid(),
            &[AGENT_UID],
        )
        .unwrap_err();
        assert_eq!(
            problem.kind,
            PermissionProblemKind::GroupOrOtherAccess { mode },
            "{problem}"
        );
        assert_eq!(problem.fix, format!("chmod 0600 {}", path.display()));
        let shown = problem.to_string();
        assert!(shown.contains("secret `pg`"), "{shown}");
        assert!(
            shown.contains(&format!("chmod 0600 {}", path.display())),
            "{shown}"
        );
        assert!(!shown.contains("value-for-check"), "{shown}");
    }
}

#[test]
fn check_source_refuses_agent_and_foreign_owners() {
    if !have_root("check_source_refuses_agent_and_foreign_owners") {
        return;
    }
    let dir = private_dir();
    let path = dir.path().join("kubeconfig");
    write_file(&path, b"value-for-check", 0o600);
    std::os::unix::fs::chown(&path, Some(AGENT_UID), Some(AGENT_UID)).unwrap();
    let problem = check_source(
        "kubeconfig",
        &SecretSource::File(path.clone()),
        daemon_uid(),
        &[AGENT_UID],
    )
    .unwrap_err();
    assert_eq!(
        problem.kind,
        PermissionProblemKind::OwnedByAgent { uid: AGENT_UID }
    );
    assert_eq!(problem.fix, format!("chown root:root {}", path.display()));

    std::os::unix::fs::chown(&path, Some(FOREIGN_UID), Some(FOREIGN_UID)).unwrap();
    let problem = check_source(
        "kubeconfig",
        &SecretSource::File(path.clone()),
        daemon_uid(),
        &[AGENT_UID],
    )
    .unwrap_err();
    assert_eq!(
        problem.kind,
        PermissionProblemKind::ForeignOwner {
            uid: FOREIGN_UID,
            daemon_uid: daemon_uid()
        }
    );
    // Owned by the daemon user (not root) is fine.
    check_source(
        "kubeconfig",
        &SecretSource::File(path.clone()),
        FOREIGN_UID,
        &[AGENT_UID],
    )
    .unwrap();

    // A directory owned by an agent lets the agent swap the file.
    std::os::unix::fs::chown(&path, Some(0), Some(0)).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(AGENT_UID), Some(AGENT_UID)).unwrap();
    let problem = check_source(
        "kubeconfig",
        &SecretSource::File(path.clone()),
        daemon_uid(),
        &[AGENT_UID],
    )
    .unwrap_err();
    assert!(
        matches!(
            problem.kind,
            PermissionProblemKind::DirectoryOwnedByAgent { uid: AGENT_UID, .. }
        ),
        "{problem}"
    );
    std::os::unix::fs::chown(dir.path(), Some(0), Some(0)).unwrap();
}

#[test]
fn check_source_refuses_missing_symlink_special_acl_and_open_directory() {
    let dir = private_dir();
    let missing = dir.path().join("missing");
    let problem = check_source(
        "pg",
        &SecretSource::File(missing.clone()),
        daemon_uid(),
        &[],
    )
    .unwrap_err();
    assert_eq!(problem.kind, PermissionProblemKind::Missing);
    assert!(problem.fix.contains(&missing.display().to_string()));

    let target = dir.path().join("target");
    write_file(&target, b"value-for-check", 0o600);
    let link = dir.path().join("link");
    symlink(&target, &link).unwrap();
    let problem = check_source("pg", &SecretSource::File(link), daemon_uid(), &[]).unwrap_err();
    assert_eq!(problem.kind, PermissionProblemKind::Symlink);

    let problem = check_source(
        "pg",
        &SecretSource::File(dir.path().to_path_buf()),
        daemon_uid(),
        &[],
    )
    .unwrap_err();
    assert_eq!(problem.kind, PermissionProblemKind::NotRegularFile);

    // A POSIX ACL naming the agent uid (mask --- so the mode bits stay 0600): still refused.
    let with_acl = dir.path().join("acl");
    write_file(&with_acl, b"value-for-check", 0o600);
    set_access_acl(&with_acl, AGENT_UID);
    assert_eq!(
        fs::metadata(&with_acl).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let problem = check_source(
        "pg",
        &SecretSource::File(with_acl.clone()),
        daemon_uid(),
        &[AGENT_UID],
    )
    .unwrap_err();
    assert_eq!(problem.kind, PermissionProblemKind::PosixAcl);
    assert_eq!(problem.fix, format!("setfacl -b {}", with_acl.display()));

    // A directory anyone can write (without the sticky bit) lets anyone swap the file.
    let open_dir = dir.path().join("open");
    fs::create_dir(&open_dir).unwrap();
    let inside = open_dir.join("pg");
    write_file(&inside, b"value-for-check", 0o600);
    fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let problem =
        check_source("pg", &SecretSource::File(inside.clone()), daemon_uid(), &[]).unwrap_err();
    assert!(
        matches!(
            problem.kind,
            PermissionProblemKind::DirectoryWritableByOthers { mode: 0o777, .. }
        ),
        "{problem}"
    );
    fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o1777)).unwrap();
    check_source("pg", &SecretSource::File(inside), daemon_uid(), &[]).unwrap();
}

/// Writes a POSIX access ACL (user::rw-, user:UID:r--, group::---, mask::---, other::---) as the
/// raw `system.posix_acl_access` xattr, the way setfacl does.
fn set_access_acl(path: &Path, uid: u32) {
    const UNDEFINED_ID: u32 = u32::MAX;
    let entries: [(u16, u16, u32); 5] = [
        (0x01, 6, UNDEFINED_ID), // ACL_USER_OBJ rw
        (0x02, 4, uid),          // ACL_USER r
        (0x04, 0, UNDEFINED_ID), // ACL_GROUP_OBJ ---
        (0x10, 0, UNDEFINED_ID), // ACL_MASK ---
        (0x20, 0, UNDEFINED_ID), // ACL_OTHER ---
    ];
    let mut blob = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        blob.extend_from_slice(&tag.to_le_bytes());
        blob.extend_from_slice(&perm.to_le_bytes());
        blob.extend_from_slice(&id.to_le_bytes());
    }
    rustix::fs::lsetxattr(
        path,
        "system.posix_acl_access",
        &blob,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Private secret files

#[test]
fn secret_copy_is_sealed_nameless_and_holds_the_value() {
    let value = SecretValue::new(b"apiVersion: v1\nkind: Config\ntoken: kube-secret-42\n".to_vec());
    let copy = SecretCopy::create("kubeconfig", &value).unwrap();
    let path = PathBuf::from(copy.argv_text());
    assert_eq!(
        path,
        PathBuf::from(format!("/proc/self/fd/{}", copy.raw_fd()))
    );
    // No name in any file system: the magic link points into the memfd file system.
    let target = fs::read_link(&path).unwrap();
    assert!(
        target.to_string_lossy().starts_with("/memfd:verbd-secret"),
        "{target:?}"
    );
    assert_eq!(fs::read(&path).unwrap(), value.expose());
    // Sealed: the child cannot change what a later reader of the same copy sees.
    let writer = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let err = std::io::Write::write_all(&mut &writer, b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    assert!(writer.set_len(0).is_err());
    let seals = rustix::fs::fcntl_get_seals(&writer).unwrap();
    for seal in [
        rustix::fs::SealFlags::WRITE,
        rustix::fs::SealFlags::GROW,
        rustix::fs::SealFlags::SHRINK,
        rustix::fs::SealFlags::SEAL,
    ] {
        assert!(seals.contains(seal), "{seals:?} lacks {seal:?}");
    }
    // Close-on-exec in the daemon: no other child inherits it.
    let fdinfo = fs::read_to_string(format!("/proc/self/fdinfo/{}", copy.raw_fd())).unwrap();
    let flags = fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
        .unwrap();
    assert_ne!(flags & libc::O_CLOEXEC as u32, 0, "{fdinfo}");
}

#[test]
fn concurrent_secret_copies_are_distinct() {
    let value = SecretValue::new(b"shared-secret-value".to_vec());
    let copies: Vec<SecretCopy> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| SecretCopy::create("pg", &value).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut inodes: Vec<u64> = copies
        .iter()
        .map(|c| fs::metadata(c.argv_text()).unwrap().ino())
        .collect();
    inodes.sort();
    inodes.dedup();
    assert_eq!(inodes.len(), 8, "two calls shared a copy");
    for copy in &copies {
        assert_eq!(fs::read(copy.argv_text()).unwrap(), b"shared-secret-value");
    }
}

// ---------------------------------------------------------------------------------------------
// Scrubbing

const PG: &[u8] = b"p@ss w0rd/with+specials?&=";
const API: &[u8] = b"Zq7vP2xmK9wLr4Tn8Yb3";

fn secret_scrubber() -> Scrubber {
    Scrubber::new(&store_of(&[("pg", PG), ("api", API)]), &[], true).unwrap()
}

fn percent(value: &[u8]) -> Vec<u8> {
    percent_with(value, |b| format!("%{b:02X}"))
}

fn percent_lower(value: &[u8]) -> Vec<u8> {
    percent_with(value, |b| format!("%{b:02x}"))
}

fn percent_with(value: &[u8], escape: impl Fn(u8) -> String) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(escape(b).as_bytes());
        }
    }
    out
}

#[test]
fn secret_and_its_encodings_are_redacted() {
    let scrubber = secret_scrubber();
    let hex_lower: String = PG.iter().map(|b| format!("{b:02x}")).collect();
    let hex_upper = hex_lower.to_uppercase();
    let json = serde_json::to_string(std::str::from_utf8(PG).unwrap()).unwrap();
    let forms: Vec<Vec<u8>> = vec![
        PG.to_vec(),
        STANDARD.encode(PG).into_bytes(),
        STANDARD_NO_PAD.encode(PG).into_bytes(),
        base64::engine::general_purpose::URL_SAFE
            .encode(PG)
            .into_bytes(),
        URL_SAFE_NO_PAD.encode(PG).into_bytes(),
        hex_lower.into_bytes(),
        hex_upper.into_bytes(),
        percent(PG),
        percent_lower(PG),
        json.as_bytes()[1..json.len() - 1].to_vec(),
    ];
    for form in forms {
        let mut input = b"before ".to_vec();
        input.extend_from_slice(&form);
        input.extend_from_slice(b" after\n");
        let out = scrubber.scrub(&input);
        assert_eq!(
            out,
            b"before [REDACTED:pg] after\n",
            "form {:?}",
            String::from_utf8_lossy(&form)
        );
    }
}

#[test]
fn secret_inside_a_longer_base64_blob_is_redacted_at_every_alignment() {
    let scrubber = secret_scrubber();
    for prefix_len in 0..6 {
        let mut blob = b"{\"user\":\"x".to_vec();
        blob.extend(std::iter::repeat_n(b'.', prefix_len));
        blob.extend_from_slice(API);
        blob.extend_from_slice(b"\",\"more\":1}");
        let encoded = STANDARD.encode(&blob);
        let out = scrubber.scrub(encoded.as_bytes());
        assert!(
            contains(&out, b"[REDACTED:api]"),
            "alignment {prefix_len}: {}",
            String::from_utf8_lossy(&out)
        );
        // Nothing that still decodes to the secret is left, at any alignment: the interior of the
        // secret's encoding after 0, 1 or 2 leading bytes.
        for shift in 0..3 {
            let mut shifted = vec![0u8; shift];
            shifted.extend_from_slice(API);
            let encoded = STANDARD_NO_PAD.encode(&shifted);
            let interior = &encoded.as_bytes()[4..encoded.len() - 4];
            assert!(
                !contains(&out, interior),
                "alignment {prefix_len}, shift {shift}: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}

fn github_token() -> String {
    format!("ghp_{}", "aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5")
}

fn private_key_block() -> String {
    let mut pem = String::from("-----BEGIN RSA PRIVATE KEY-----\n");
    for line in 0..12 {
        pem.push_str(&format!(
            "MIIEowIBAAKCAQEAu{line:02}3Xk8Zq7vP2xmK9wLr4Tn8Yb3Qf6Hs1Dj5Ga0Ce2Wm7Ui4Oy9Kt\n"
        ));
    }
    pem.push_str("-----END RSA PRIVATE KEY-----\n");
    pem
}

/// (input, expected output, secret bytes that must not survive)
fn token_samples() -> Vec<(String, String, Vec<String>)> {
    let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
    let fine_grained = "github_pat_11ABCDEFG0123456789abc_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVW";
    let gcp_key = "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\\nZq7vP2xmK9wLr4Tn8Yb3\\n-----END PRIVATE KEY-----\\n";
    vec![
        (
            "key id AKIAIOSFODNN7EXAMPLE in use\n".into(),
            "key id [REDACTED:aws-access-key] in use\n".into(),
            vec!["IOSFODNN7EXAMPLE".into()],
        ),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n".into(),
            "aws_secret_access_key = [REDACTED:aws-secret-key]\n".into(),
            vec!["wJalrXUtnFEMI".into()],
        ),
        (
            "{\"AccessKeyId\": \"ASIAY34FZKBOKMUTVV7A\", \"SecretAccessKey\": \"9drTJvcXLB89EXAMPLELB8923FB892xMFI\", \"SessionToken\": \"AQoXdzELDDY//////////wEaoAK1wvxJY12r2IrDFT2IvAzTCn3zHoZ7\"}\n".into(),
            "{\"AccessKeyId\": \"[REDACTED:aws-access-key]\", \"SecretAccessKey\": \"[REDACTED:aws-secret-key]\", \"SessionToken\": \"[REDACTED:aws-secret-key]\"}\n".into(),
            vec!["9drTJvcXLB89".into(), "AQoXdzELDDY".into(), "Y34FZKBOKMU".into()],
        ),
        (
            format!("{{\"type\": \"service_account\", \"private_key\": \"{gcp_key}\", \"client_email\": \"bot@p.iam.gserviceaccount.com\"}}\n"),
            // The PEM block inside the JSON string is caught first, as a private key.
            "{\"type\": \"service_account\", \"private_key\": \"[REDACTED:private-key]\\n\", \"client_email\": \"bot@p.iam.gserviceaccount.com\"}\n".into(),
            vec!["MIIEvQIBADANBgkq".into(), "Zq7vP2xmK9wLr4Tn".into()],
        ),
        (
            "{\"private_key\": \"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\"}\n".into(),
            "{\"private_key\": \"[REDACTED:gcp-private-key]\"}\n".into(),
            vec!["MIIEvQIBADANBgkq".into()],
        ),
        (
            format!("remote: token {} accepted\n", github_token()),
            "remote: token [REDACTED:github-token] accepted\n".into(),
            vec!["aB3dE5fG7hI9jK1lM3nO5".into()],
        ),
        (
            format!("GITHUB_TOKEN={fine_grained}\n"),
            "GITHUB_TOKEN=[REDACTED:github-token]\n".into(),
            vec!["0123456789abc_abcdefgh".into()],
        ),
        (
            "gh auth: gho_16C7e42F292c6912E7710c838347Ae178B4a and ghs_16C7e42F292c6912E7710c838347Ae178B4a\n".into(),
            "gh auth: [REDACTED:github-token] and [REDACTED:github-token]\n".into(),
            vec!["16C7e42F292c6912E771".into()],
        ),
        (
            "export GITLAB_TOKEN=glpat-xK9vR2mQ7wL4nT8pZ3sY\n".into(),
            "export GITLAB_TOKEN=[REDACTED:gitlab-token]\n".into(),
            vec!["xK9vR2mQ7wL4nT8pZ3sY".into()],
        ),
        (
            "slack: xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx\n".into(),
            "slack: [REDACTED:slack-token]\n".into(),
            vec!["AbCdEfGhIjKlMnOp".into(), "1234567890123".into()],
        ),
        (
            format!("Authorization: Bearer {jwt}\n"),
            "Authorization: Bearer [REDACTED:jwt]\n".into(),
            vec!["SflKxwRJSMeKKF2QT4fw".into(), "eyJzdWIiOiIxMjM0".into()],
        ),
        (
            "curl -H 'Authorization: Basic dXNlcjpodW50ZXIyaHVudGVyMg==' https://api\n".into(),
            "curl -H 'Authorization: Basic [REDACTED:authorization]' https://api\n".into(),
            vec!["dXNlcjpodW50ZXIy".into()],
        ),
        (
            "key: sk-ant-api03-Zq7vP2xmK9wLr4Tn8Yb3Qf6Hs1Dj5Ga0Ce2Wm7Ui4Oy9Kt-AAAA\n".into(),
            "key: [REDACTED:api-key]\n".into(),
            vec!["Zq7vP2xmK9wLr4Tn8Yb3".into()],
        ),
        (
            format!("before\n{}after\n", private_key_block()),
            "before\n[REDACTED:private-key]\nafter\n".into(),
            vec!["MIIEowIBAAKCAQEA".into(), "Zq7vP2xmK9wLr4Tn8Yb3".into()],
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n".into(),
            "[REDACTED:private-key]\n".into(),
            vec!["b3BlbnNzaC1rZXktdjEA".into()],
        ),
        (
            "PGPASSWORD=Tr0ub4dor&3x psql -h db\n".into(),
            "PGPASSWORD=[REDACTED:credential-assignment] psql -h db\n".into(),
            vec!["Tr0ub4dor".into(), "&3x".into()],
        ),
        (
            "{\"password\": \"correct horse battery\", \"user\": \"app\"}\n".into(),
            "{\"password\": \"[REDACTED:credential-assignment]\", \"user\": \"app\"}\n".into(),
            vec!["correct horse".into()],
        ),
        (
            "db.passwd: s3cr3tvalue\nclient_secret='abc def ghi'\n".into(),
            "db.passwd: [REDACTED:credential-assignment]\nclient_secret='[REDACTED:credential-assignment]'\n".into(),
            vec!["s3cr3tvalue".into(), "abc def".into()],
        ),
        (
            "connecting to postgres://app:S3cr3tP%40ss@db.internal:5432/app ok\n".into(),
            "connecting to postgres://app:[REDACTED:url-credentials]@db.internal:5432/app ok\n".into(),
            vec!["S3cr3tP".into()],
        ),
    ]
}

#[test]
fn builtin_token_formats_are_redacted() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    for (input, expected, leaks) in token_samples() {
        let out = scrubber.scrub(input.as_bytes());
        assert_eq!(String::from_utf8_lossy(&out), expected, "input {input:?}");
        for leak in leaks {
            assert!(
                !contains(&out, leak.as_bytes()),
                "{leak} leaked from {input:?}"
            );
        }
    }
    // Without the built-in set the same text passes through.
    let plain = Scrubber::new(&SecretStore::empty(), &[], false).unwrap();
    let token_line = format!("remote: token {} accepted\n", github_token());
    assert_eq!(plain.scrub(token_line.as_bytes()), token_line.as_bytes());
}

#[test]
fn loaded_secret_takes_its_own_name_inside_a_credential_assignment() {
    let scrubber = secret_scrubber();
    let mut input = b"PGPASSWORD=".to_vec();
    input.extend_from_slice(API);
    input.extend_from_slice(b" psql\n");
    assert_eq!(scrubber.scrub(&input), b"PGPASSWORD=[REDACTED:api] psql\n");
}

#[test]
fn unterminated_private_key_is_redacted_to_the_end() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    let pem = private_key_block();
    let cut = &pem[..pem.len() / 2];
    let input = format!("key follows:\n{cut}");
    let out = scrubber.scrub(input.as_bytes());
    assert_eq!(out, b"key follows:\n[REDACTED:private-key]");
}

#[test]
fn unterminated_private_key_block_is_capped_the_same_way_in_every_chunking() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    let mut input = b"before\n-----BEGIN EC PRIVATE KEY-----\n".to_vec();
    let body_line = b"MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oExTANBgkqhkiG9w0BAQEF\n";
    while input.len() < 100_000 {
        input.extend_from_slice(body_line);
    }
    input.extend_from_slice(b"after the block\n");
    let whole = scrubber.scrub(&input);
    assert!(whole.starts_with(b"before\n[REDACTED:private-key]"));
    assert!(whole.ends_with(b"after the block\n"));
    // The first 64 KiB after the marker are swallowed, the rest is output again.
    let body_start = b"before\n-----BEGIN EC PRIVATE KEY-----".len();
    let resumed = input.len() - body_start - 64 * 1024;
    assert_eq!(
        whole.len(),
        b"before\n[REDACTED:private-key]".len() + resumed
    );
    for chunk_size in [1000usize, 4096, 65_536, 99_999] {
        let mut stream = scrubber.stream();
        let mut out = Vec::new();
        for chunk in input.chunks(chunk_size) {
            out.extend(stream.push(chunk));
        }
        out.extend(stream.finish());
        assert!(out == whole, "chunk size {chunk_size} differs");
    }
}

/// A split at every position of the input gives the one-shot result and leaks nothing.
fn assert_split_everywhere(scrubber: &Scrubber, input: &[u8], secret: &[u8], context: &str) {
    let whole = scrubber.scrub(input);
    assert!(!contains(&whole, secret), "{context}: one-shot leaked");
    for split in 0..=input.len() {
        let mut stream = scrubber.stream();
        let mut out = stream.push(&input[..split]);
        out.extend(stream.push(&input[split..]));
        out.extend(stream.finish());
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&whole),
            "{context}: split at {split}"
        );
    }
}

#[test]
fn secret_split_across_chunks_is_caught_at_every_position() {
    let scrubber = secret_scrubber();
    for form in [
        PG.to_vec(),
        STANDARD.encode(PG).into_bytes(),
        percent(PG),
        API.to_vec(),
    ] {
        let mut input = b"line one\nvalue=".to_vec();
        input.extend_from_slice(&form);
        input.extend_from_slice(b" tail\nline three\n");
        assert_split_everywhere(&scrubber, &input, &form, &String::from_utf8_lossy(&form));
    }
    // A multi-line secret (a kubeconfig) split anywhere.
    let kubeconfig = b"apiVersion: v1\nclusters:\n- cluster:\n    server: https://k8s:6443\nusers:\n- user:\n    token: kube-secret-token-42";
    let scrubber = Scrubber::new(&store_of(&[("kubeconfig", kubeconfig)]), &[], false).unwrap();
    let mut input = b"$ cat config\n".to_vec();
    input.extend_from_slice(kubeconfig);
    input.extend_from_slice(b"\n$ done\n");
    assert_split_everywhere(&scrubber, &input, kubeconfig, "kubeconfig");
    assert_eq!(
        scrubber.scrub(&input),
        b"$ cat config\n[REDACTED:kubeconfig]\n$ done\n"
    );
    // `base64 kubeconfig` wraps at 76 columns, `openssl base64` at 64.
    let encoded = STANDARD.encode(kubeconfig);
    for width in [76, 64] {
        let wrapped: Vec<String> = encoded
            .as_bytes()
            .chunks(width)
            .map(|line| String::from_utf8(line.to_vec()).unwrap())
            .collect();
        let input = format!("$ base64 config\n{}\n$ done\n", wrapped.join("\n"));
        assert_eq!(
            String::from_utf8(scrubber.scrub(input.as_bytes())).unwrap(),
            "$ base64 config\n[REDACTED:kubeconfig]\n$ done\n",
            "width {width}"
        );
    }
}

#[test]
fn tokens_split_across_chunks_are_caught_at_every_position() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    for (input, expected, leaks) in token_samples() {
        assert_split_everywhere(&scrubber, input.as_bytes(), leaks[0].as_bytes(), &input);
        assert_eq!(
            String::from_utf8_lossy(&scrubber.scrub(input.as_bytes())),
            expected
        );
    }
}

/// (form, label) pairs of the test secrets, raw and encoded.
fn secret_forms() -> Vec<(Vec<u8>, &'static [u8])> {
    let api_hex: String = API.iter().map(|b| format!("{b:02x}")).collect();
    vec![
        (API.to_vec(), b"[REDACTED:api]"),
        (STANDARD.encode(API).into_bytes(), b"[REDACTED:api]"),
        (api_hex.into_bytes(), b"[REDACTED:api]"),
        (PG.to_vec(), b"[REDACTED:pg]"),
        (URL_SAFE_NO_PAD.encode(PG).into_bytes(), b"[REDACTED:pg]"),
        (percent(PG), b"[REDACTED:pg]"),
    ]
}

/// Does `bytes` contain a whole literal form of PG or API (raw, base64(url) unpadded or core)?
fn holds_a_whole_form(bytes: &[u8]) -> bool {
    [PG, API].iter().any(|value| {
        let mut whole = vec![value.to_vec()];
        for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
            whole.push(engine.encode(value).into_bytes());
            for offset in 0..3 {
                let mut shifted = vec![0u8; offset];
                shifted.extend_from_slice(value);
                let encoded = engine.encode(&shifted).into_bytes();
                let drop_end = usize::from(shifted.len() % 3 != 0);
                whole.push(encoded[[0, 2, 3][offset]..encoded.len() - drop_end].to_vec());
            }
        }
        whole.iter().any(|form| contains(bytes, form))
    })
}

#[test]
fn a_cut_inside_a_secret_leaks_no_prefix() {
    let scrubber = secret_scrubber();
    let tail = scrubber.withheld_tail();
    assert_eq!(tail, verbd::scrub::CUT_WITHHELD_TAIL);
    let filler = "x".repeat(6000);
    for (form, _) in secret_forms() {
        for cut in 1..form.len() {
            let mut input = format!("log line\n{filler}\nresult: ").into_bytes();
            input.extend_from_slice(&form[..cut]);
            // What is shown is the input minus a fixed tail, wherever the cut fell.
            let expected = &input[..input.len() - tail];
            // Fed as a stream cut at the truncation point, in two chunks split anywhere near it.
            for split in [input.len() / 2, input.len() - cut, input.len() - 1] {
                let mut stream = scrubber.stream();
                let mut out = stream.push(&input[..split]);
                out.extend(stream.push(&input[split..]));
                let rest = stream.finish_cut();
                out.extend(rest.bytes);
                assert_eq!(rest.withheld, tail as u64);
                assert!(
                    out == expected,
                    "form {:?} cut at {cut}, split at {split}",
                    String::from_utf8_lossy(&form)
                );
            }
        }
    }
}

#[test]
fn a_natural_end_treats_a_secret_prefix_like_any_other_bytes() {
    // Redacting a trailing prefix would tell a caller who chose the bytes that its guess is
    // right (issue 11: a 16-character secret was recovered one character at a time).
    let scrubber = secret_scrubber();
    for (form, label) in secret_forms() {
        for cut in 1..form.len() {
            if holds_a_whole_form(&form[..cut]) {
                continue; // e.g. base64's first 26 characters are its whole "core" form
            }
            let mut input = b"log line\nresult: ".to_vec();
            input.extend_from_slice(&form[..cut]);
            assert_eq!(scrubber.scrub(&input), input, "one shot, cut at {cut}");
            let mut stream = scrubber.stream();
            let mut out = stream.push(&input);
            out.extend(stream.finish());
            assert_eq!(out, input, "streamed, cut at {cut}");
        }
        // The whole form is still redacted at the very end.
        let mut input = b"log line\nresult: ".to_vec();
        input.extend_from_slice(&form);
        let mut expected = b"log line\nresult: ".to_vec();
        expected.extend_from_slice(label);
        assert_eq!(scrubber.scrub(&input), expected);
    }
}

#[test]
fn a_cut_never_splits_a_whole_secret_and_withholds_it_entirely() {
    let scrubber = secret_scrubber();
    let tail = scrubber.withheld_tail();
    // A whole secret straddles the point where the fixed tail would start: the cut moves
    // before it instead of showing its head.
    let head = "h".repeat(5000);
    let mut input = format!("{head}\nvalue=").into_bytes();
    let secret_start = input.len();
    input.extend_from_slice(API);
    let filler_len = tail - API.len() / 2 - 1 + API.len() / 2;
    input.extend(std::iter::repeat_n(b'.', filler_len - API.len() / 2));
    let boundary = input.len() - tail;
    assert!(secret_start < boundary && boundary < secret_start + API.len());
    let mut stream = scrubber.stream();
    let mut out = stream.push(&input);
    let rest = stream.finish_cut();
    out.extend(rest.bytes);
    assert_eq!(out, &input[..secret_start]);
    assert_eq!(rest.withheld, (input.len() - secret_start) as u64);
}

#[test]
fn truncated_tokens_leak_no_prefix() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
    let github = github_token();
    // (token, shortest cut that is recognisable, bytes of it kept, label)
    let cases: [(&str, usize, usize, &str); 7] = [
        ("AKIAIOSFODNN7EXAMPLE", 4, 0, "aws-access-key"),
        (&github, 4, 0, "github-token"),
        ("glpat-xK9vR2mQ7wL4nT8pZ3sY", 6, 0, "gitlab-token"),
        (
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            5,
            0,
            "slack-token",
        ),
        (jwt, 3, 0, "jwt"),
        (
            "sk-ant-api03-Zq7vP2xmK9wLr4Tn8Yb3Qf6Hs1Dj5Ga0Ce2Wm7Ui4Oy9Kt",
            7,
            0,
            "api-key",
        ),
        ("postgres://app:S3cr3tP4ssw0rd", 16, 15, "url-credentials"),
    ];
    for (token, shortest, keep, label) in cases {
        for cut in shortest..token.len() {
            let input = format!("out: {}", &token[..cut]);
            let out = String::from_utf8(scrubber.scrub(input.as_bytes())).unwrap();
            let expected = format!("out: {}[REDACTED:{label}]", &token[..keep]);
            assert_eq!(out, expected, "{label} cut at {cut}");
        }
    }
    for cut in [
        "password=hunt",
        "\"password\": \"correct hor",
        "SecretAccessKey: wJalr",
    ] {
        let out = String::from_utf8(scrubber.scrub(cut.as_bytes())).unwrap();
        assert!(
            out.ends_with("[REDACTED:credential-assignment]")
                || out.ends_with("[REDACTED:aws-secret-key]"),
            "{cut} → {out}"
        );
    }
}

/// Deterministic pseudo-random bytes (xorshift), including invalid UTF-8 and NULs.
fn noise(len: usize, mut state: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn output_without_secrets_passes_through_byte_for_byte() {
    let scrubber = secret_scrubber();
    let mut inputs: Vec<Vec<u8>> = vec![
        noise(300_000, 0x9e37_79b9_7f4a_7c15),
        b"NAME   READY   STATUS    RESTARTS   AGE\nweb-1  1/1     Running   0          5d\n"
            .to_vec(),
        vec![b'x'; 400_000],
        b"\xff\xfe invalid \xc3\x28 utf-8 \x80\n\n\r\n".to_vec(),
        Vec::new(),
    ];
    let mut long_text = Vec::new();
    while long_text.len() < 250_000 {
        long_text.extend_from_slice(b"a long line of ordinary words without a newline; ");
    }
    inputs.push(long_text);
    for input in inputs {
        assert_eq!(scrubber.scrub(&input), input);
        for chunk_size in [1usize, 7, 4096, 65_536] {
            if chunk_size == 1 && input.len() > 10_000 {
                continue;
            }
            let mut stream = scrubber.stream();
            let mut out = Vec::new();
            for chunk in input.chunks(chunk_size) {
                out.extend(stream.push(chunk));
            }
            out.extend(stream.finish());
            assert!(out == input, "chunk size {chunk_size}: output differs");
        }
    }
}

#[test]
fn secrets_in_a_very_long_line_are_caught_across_forced_cuts() {
    let scrubber = secret_scrubber();
    let mut input = Vec::new();
    let mut planted = 0;
    while input.len() < 600_000 {
        input.extend(std::iter::repeat_n(b'.', 997));
        input.extend_from_slice(API);
        planted += 1;
    }
    let mut expected_markers = 0;
    for chunk_size in [1000usize, 4096, 65_537] {
        let mut stream = scrubber.stream();
        let mut out = Vec::new();
        for chunk in input.chunks(chunk_size) {
            out.extend(stream.push(chunk));
        }
        out.extend(stream.finish());
        assert!(!contains(&out, &API[..8]));
        assert!(!contains(&out, &API[API.len() - 8..]));
        expected_markers = out
            .windows(b"[REDACTED:api]".len())
            .filter(|w| w == b"[REDACTED:api]")
            .count();
        assert_eq!(expected_markers, planted, "chunk size {chunk_size}");
    }
    assert!(expected_markers > 500);
}

#[test]
fn ten_megabyte_stream_scrubs_in_bounded_memory() {
    // A secret exactly as long as its marker keeps lengths equal, so held-back bytes are
    // measurable as pushed minus emitted.
    let secret = b"Zq7-vP2x!mK9w";
    assert_eq!(secret.len(), b"[REDACTED:pg]".len());
    let scrubber = Scrubber::new(&store_of(&[("pg", secret)]), &[], true).unwrap();
    let mut line_no = 0u64;
    let mut pushed = 0usize;
    let mut emitted = 0usize;
    let mut max_held = 0usize;
    let mut stream = scrubber.stream();
    let mut leaked = false;
    let mut markers = 0usize;
    let count = |out: &[u8]| {
        out.windows(b"[REDACTED:pg]".len())
            .filter(|w| w == b"[REDACTED:pg]")
            .count()
    };
    while pushed < 10 * 1024 * 1024 {
        let mut chunk = Vec::with_capacity(70_000);
        while chunk.len() < 65_536 {
            line_no += 1;
            if line_no.is_multiple_of(1000) {
                chunk.extend_from_slice(format!("{line_no:08} secret ").as_bytes());
                chunk.extend_from_slice(secret);
                chunk.push(b'\n');
            } else {
                chunk.extend_from_slice(
                    format!("{line_no:08} INFO request served in 12ms path=/api/v1/items\n")
                        .as_bytes(),
                );
            }
        }
        pushed += chunk.len();
        let out = stream.push(&chunk);
        emitted += out.len();
        leaked |= contains(&out, secret);
        markers += count(&out);
        max_held = max_held.max(pushed - emitted);
    }
    let out = stream.finish();
    emitted += out.len();
    leaked |= contains(&out, secret);
    markers += count(&out);
    assert_eq!(pushed, emitted);
    assert!(!leaked);
    assert_eq!(markers as u64, line_no / 1000);
    // About one line plus the tail a cut would withhold (which covers the longest literal
    // form), whatever the stream length.
    assert!(
        max_held <= 1024 + verbd::scrub::CUT_WITHHELD_TAIL,
        "held back {max_held} bytes at once"
    );
}

#[test]
fn policy_patterns_compile_at_load_and_bad_ones_are_named() {
    let good = ScrubPattern {
        name: "employee-id".to_owned(),
        regex: r"EMP-[0-9]{6}".to_owned(),
    };
    let scrubber =
        Scrubber::new(&SecretStore::empty(), std::slice::from_ref(&good), false).unwrap();
    assert_eq!(
        scrubber.scrub(b"owner EMP-123456 ok\n"),
        b"owner [REDACTED:employee-id] ok\n"
    );

    let bad = ScrubPattern {
        name: "broken".to_owned(),
        regex: "EMP-([0-9".to_owned(),
    };
    let error = Scrubber::new(&SecretStore::empty(), &[good.clone(), bad], false).unwrap_err();
    assert!(matches!(error, ScrubError::BadPattern { ref name, .. } if name == "broken"));
    assert!(error.to_string().contains("`broken`"), "{error}");

    let empty = ScrubPattern {
        name: "everything".to_owned(),
        regex: "x*".to_owned(),
    };
    let error = Scrubber::new(&SecretStore::empty(), &[empty], false).unwrap_err();
    assert!(
        matches!(error, ScrubError::MatchesEmpty { .. }),
        "{error:?}"
    );
    let boundary = ScrubPattern {
        name: "boundary".to_owned(),
        regex: r"\b".to_owned(),
    };
    let error = Scrubber::new(&SecretStore::empty(), &[boundary], false).unwrap_err();
    assert!(
        matches!(error, ScrubError::MatchesEmpty { .. }),
        "{error:?}"
    );

    let badly_named = ScrubPattern {
        name: "has space]".to_owned(),
        regex: "abc".to_owned(),
    };
    let error = Scrubber::new(&SecretStore::empty(), &[badly_named], false).unwrap_err();
    assert!(
        matches!(error, ScrubError::BadPatternName { .. }),
        "{error:?}"
    );
}

#[test]
fn scrubber_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    let scrubber = secret_scrubber();
    assert_send_sync(&scrubber);
    assert_send_sync(&store_of(&[("pg", PG)]));
    let outputs: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut input = b"x ".to_vec();
                    input.extend_from_slice(API);
                    scrubber.scrub(&input)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for out in outputs {
        assert_eq!(out, b"x [REDACTED:api]");
    }
}

#[test]
fn short_secrets_are_still_scrubbed_and_warned_about() {
    let store = store_of(&[("pin", b"4821")]);
    let warnings = store.warnings();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("`pin`") && warnings[0].contains("shorter than 8"));
    assert!(!warnings[0].contains("4821"));
    let scrubber = Scrubber::new(&store, &[], false).unwrap();
    assert_eq!(scrubber.scrub(b"pin 4821 ok"), b"pin [REDACTED:pin] ok");
}
