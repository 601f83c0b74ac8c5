//! Invariant 7 on the channels tests/secrets/secrets_daemon.rs does not cover: a secret the child writes to
//! **stderr**, a secret in a destructive verb's **dry-run output** (stored in the proposal and
//! journaled in `proposal_created`), a secret in a file read by **`file.read`**, and the daemon's
//! log at trace level. Delivery is proven too: the child prints the SHA-256 of the value it got,
//! which must equal the real secret's, so a placeholder that never became the secret fails.
use crate::common;
use crate::common::digest::sha256_hex;
use common::harness::write_secret;
use common::policy::{Category, Policy, Secret, Verb};
use common::*;
use verbd::protocol::Response;

const SECRET: &str = "s3cr3t-Channel-0123456789-qrs";
const AGENT: u32 = 61820;
const SRE: u32 = 61821;

fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .humans("me", &[0])
        .agents("agent", &[AGENT])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .secret("tok", Secret::File("@DIR@/tok".into()))
        .verb(
            "to-stderr",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/bin/sh",
                    "-c",
                    "printf %s \"$TOKEN\" >&2; printf %s \"$TOKEN\" | sha256sum",
                ],
            )
            .description("writes the secret to stderr, and its digest to stdout")
            .roles(&["me", "agent"])
            .allow_interpreter()
            .env("TOKEN", "${secret:tok}"),
        )
        .verb(
            "read",
            Verb::builtin(Category::ReadOnly, "file.read", &["@DIR@/files"])
                .description("read a file")
                .roles(&["me", "agent"]),
        )
        .verb(
            "leaky-wipe",
            Verb::argv(Category::Destructive, &["/bin/true"])
                .description("destructive; its dry run prints the secret")
                .roles(&["me", "agent"])
                .allow_interpreter()
                .dry_run_argv(&["/bin/sh", "-c", "echo would use $TOKEN; echo $TOKEN >&2"])
                .env("TOKEN", "${secret:tok}"),
        )
}

fn start() -> Option<Daemon> {
    if !require_root("secrets_channels") {
        return None;
    }
    let dir = open_tempdir();
    write_secret(&dir.path().join("tok"), &format!("{SECRET}\n"));
    std::fs::create_dir(dir.path().join("files")).unwrap();
    std::fs::write(
        dir.path().join("files/config.env"),
        format!("API_TOKEN={SECRET}\nMODE=prod\n"),
    )
    .unwrap();
    let d = Daemon::spawn_in(dir, &policy().render(), &[("VERBD_LOG", "trace")]);
    d.wait_ready();
    d.open_socket();
    Some(d)
}

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} leaks the secret:\n{text}");
}

#[test]
fn stderr_is_scrubbed_and_the_secret_was_delivered() {
    let Some(d) = start() else { return };
    match d.call("to-stderr", &[]) {
        Response::Ok { result, .. } => {
            assert_eq!(
                result.stderr, "[REDACTED:tok]",
                "stderr: {:?}",
                result.stderr
            );
            // Control for delivery: the child had the real value, not a placeholder.
            assert!(
                result.stdout.starts_with(&sha256_hex(SECRET)),
                "the child did not get the secret: {}",
                result.stdout
            );
        }
        other => panic!("{other:?}"),
    }
    assert_clean("journal", &d.journal());
    assert_clean("daemon log (trace)", &d.log());
}

#[test]
fn file_read_output_is_scrubbed() {
    let Some(d) = start() else { return };
    let path = d.path("files/config.env");
    match d.call("read", &[("path", path.to_str().unwrap())]) {
        Response::Ok { result, .. } => {
            // Control: the rest of the file arrives as it is.
            assert!(result.stdout.contains("MODE=prod"), "{:?}", result.stdout);
            assert!(
                result.stdout.contains("API_TOKEN=[REDACTED:tok]"),
                "{:?}",
                result.stdout
            );
            assert_clean("file.read output", &result.stdout);
        }
        other => panic!("{other:?}"),
    }
    assert_clean("journal", &d.journal());
    assert_clean("daemon log (trace)", &d.log());
}

#[test]
fn dry_run_output_is_scrubbed_in_the_proposal_and_the_journal() {
    let Some(d) = start() else { return };
    let out = d.cli_as(AGENT, &["call", "--json", "--reason", "test", "leaky-wipe"]);
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    assert_clean("confirm_required", &String::from_utf8_lossy(&out.stdout));
    let pending = d.cli_as(SRE, &["pending"]);
    let text = String::from_utf8_lossy(&pending.stdout);
    // Control: the dry run ran and its output is in the proposal, with the placeholder.
    assert!(text.contains("would use"), "{text}");
    assert!(text.contains("[REDACTED:tok]"), "{text}");
    assert_clean("pending", &text);
    let json = d.cli_as(SRE, &["pending", "--json"]);
    assert_clean("pending --json", &String::from_utf8_lossy(&json.stdout));
    let journal = d.journal();
    assert!(journal.contains("proposal_created"), "{journal}");
    assert_clean("journal", &journal);
    assert_clean("daemon log (trace)", &d.log());
}
