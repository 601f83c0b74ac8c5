//! Invariant 7 end to end: secret values reach only the child; every response, journal record,
//! log line, proposal and `explain` output shows placeholders; output is scrubbed even when a
//! secret is split across writes; `${secret_file:…}` copies are private, per call, and removed.
use crate::common;
use base64::Engine;
use common::harness::write_secret;
use common::policy::{Category, Param, Policy, Secret, Verb};
use common::*;
use std::time::Duration;
use verbd::protocol::Response;

const SECRET: &str = "s3cr3t-Value-0123456789-xyz";
const FIRST: &str = "s3cr3t-Value-";
const SECOND: &str = "0123456789-xyz";

fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .humans("me", &[0])
        .agents("agent", &[61201])
        .humans("sre", &[61202])
        .approvers(&["sre"])
        .secret("tok", Secret::File("@DIR@/tok".into()))
        .verb(
            "show-env",
            Verb::command(Category::ReadOnly, "/usr/bin/printenv")
                .description("prints its environment")
                .roles(&["me"])
                .env("TOKEN", "${secret:tok}")
                .env("OTHER", "plain"),
        )
        .verb(
            "show-argv",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/usr/bin/printf",
                    "[%s]\n",
                    "--token=${secret:tok}",
                    "{word}",
                ],
            )
            .description("prints its argv")
            .roles(&["me"])
            .param("word", Param::matching("[a-z]+")),
        )
        .verb(
            "split",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/bin/sh",
                    "-c",
                    "printf %s \"$A\"; sleep 0.3; printf %s \"$B\"; echo",
                    "split",
                ],
            )
            .description("writes the secret in two pieces, with a pause between")
            .roles(&["me"])
            .allow_interpreter()
            .env("A", FIRST)
            .env("B", SECOND),
        )
        .verb(
            "kubeconfig",
            Verb::argv(
                Category::ReadOnly,
                &[
                    "/bin/sh",
                    "-c",
                    "stat -L -c '%n %i' \"$1\"; readlink \"$1\"; sha256sum < \"$1\"; sleep {secs}",
                    "kube",
                    "${secret_file:tok}",
                ],
            )
            .description("a tool that wants a file")
            .roles(&["me"])
            .allow_interpreter()
            .param("secs", Param::int(0, 5)),
        )
        .verb(
            "encode",
            Verb::argv(
                Category::ReadOnly,
                &["/usr/bin/base64", "${secret_file:tok}"],
            )
            .description("prints the secret file base64-encoded (coreutils base64)")
            .roles(&["me"]),
        )
        .verb(
            "encode-url",
            Verb::argv(
                Category::ReadOnly,
                &["/usr/bin/basenc", "--base64url", "${secret_file:tok}"],
            )
            .description("prints the secret file base64url-encoded (coreutils basenc)")
            .roles(&["me"]),
        )
        .verb(
            "deploy",
            Verb::command(
                Category::Mutating,
                r"/usr/bin/printf %s\n --token=${secret:tok} {word}",
            )
            .description("mutating, with the secret in its argv")
            .roles(&["agent"])
            .param("word", Param::matching("[a-z]+")),
        )
}

fn forms() -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    vec![
        SECRET.to_string(),
        b64.encode(SECRET),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET),
        SECRET.bytes().map(|b| format!("{b:02x}")).collect(),
    ]
}

fn assert_clean(what: &str, text: &str) {
    for form in forms() {
        assert!(
            !text.contains(&form),
            "{what} contains a secret form {form:?}:\n{text}"
        );
    }
    assert!(
        !text.contains(SECOND) || !text.contains(FIRST),
        "{what} contains both halves"
    );
}

fn start() -> Option<Daemon> {
    if !require_root("secrets") {
        return None;
    }
    let d = Daemon::start_with(&policy().render(), |dir| {
        write_secret(&dir.join("tok"), &format!("{SECRET}\n"));
    });
    d.open_socket();
    Some(d)
}

#[test]
fn secrets_never_leave() {
    let Some(d) = start() else { return };
    let env = stdout_of(&d.call("show-env", &[]));
    assert!(env.contains("TOKEN=[REDACTED:tok]"), "{env}");
    assert!(env.contains("OTHER=plain"));
    assert!(env.contains("PATH="));
    assert!(
        !env.contains("NOTIFY_SOCKET") && !env.contains("HOME="),
        "env not cleared: {env}"
    );
    let argv = stdout_of(&d.call("show-argv", &[("word", "hello")]));
    assert_eq!(argv, "[--token=[REDACTED:tok]]\n[hello]\n");
    let split = stdout_of(&d.call("split", &[]));
    assert!(split.contains("[REDACTED:tok]"), "{split:?}");
    assert_clean("split output", &split);

    // A proposal with the secret in its argv: the agent's answer and `pending` show placeholders.
    let out = d.cli_as(61201, &["call", "--json", "deploy", "word=prod"]);
    assert_clean("confirm_required", &String::from_utf8_lossy(&out.stdout));
    let out = d.cli_as(61202, &["pending"]);
    let pending = String::from_utf8_lossy(&out.stdout);
    assert!(pending.contains("--token=${secret:tok}"), "{pending}");
    assert_clean("pending", &pending);
    let out = d.cli_as(61202, &["pending", "--json"]);
    assert_clean("pending --json", &String::from_utf8_lossy(&out.stdout));

    // explain (offline) shows placeholders.
    let out = d.cli(&[
        "policy",
        "explain",
        d.policy.to_str().unwrap(),
        "show-env",
        "--json",
    ]);
    let explain = String::from_utf8_lossy(&out.stdout);
    assert!(explain.contains("${secret:tok}"), "{explain}");
    assert_clean("explain", &explain);

    // Errors: a missing param message does not carry it either.
    let r = d.call("show-argv", &[]);
    assert_clean("error", &format!("{r:?}"));

    assert_clean("journal", &d.journal());
    assert_clean("daemon log", &d.log());
}

/// A verb that prints the secret encoded: the encoded form is redacted like the value itself,
/// and only the encoded form was there to redact (the raw value never reaches the output).
#[test]
fn a_verb_printing_the_secret_base64_encoded_is_redacted() {
    let Some(d) = start() else { return };
    for (verb, form) in [
        (
            "encode",
            base64::engine::general_purpose::STANDARD.encode(SECRET),
        ),
        (
            "encode-url",
            base64::engine::general_purpose::URL_SAFE.encode(SECRET),
        ),
    ] {
        let out = stdout_of(&d.call(verb, &[]));
        assert_eq!(out, "[REDACTED:tok]\n", "{verb} printed {out:?}");
        assert!(!out.contains(&form), "{verb}: {out}");
        assert_clean(verb, &out);
    }
    assert_clean("journal", &d.journal());
}

#[test]
fn secret_files_are_private_per_call_and_removed() {
    let Some(d) = start() else { return };
    let run = |secs: &str| stdout_of(&d.call("kubeconfig", &[("secs", secs)]));
    let out = run("0");
    let mut lines = out.lines();
    let stat = lines.next().unwrap().to_string();
    let path = stat.split_whitespace().next().unwrap().to_string();
    // The copy is a descriptor of this child alone, not a name in any file system.
    assert!(path.starts_with("/proc/self/fd/"), "{stat}");
    let target = lines.next().unwrap();
    assert!(target.starts_with("/memfd:verbd-secret"), "{target}");
    let hash = lines.next().unwrap();
    let expected = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(SECRET.as_bytes());
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert!(
        hash.starts_with(&expected),
        "the child read the secret: {hash}"
    );
    // Nothing is left behind: no secret directory, no open copy in the daemon.
    assert!(!d.state.join("secret-files").exists());
    let daemon_pid = d.child.as_ref().unwrap().id();
    let open_copies = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
            .filter(|t| t.to_string_lossy().starts_with("/memfd:verbd-secret"))
            .count()
    };
    assert_eq!(
        open_copies(daemon_pid),
        0,
        "a secret copy outlived its call"
    );
    // Two concurrent calls get their own copies.
    let socket = d.socket.clone();
    let call = move || {
        let r = verbd::client::request(
            &socket,
            &verbd::protocol::Request::Call {
                verb: "kubeconfig".into(),
                args: [("secs".to_string(), serde_json::json!("1"))].into(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(30),
        )
        .unwrap();
        match r {
            Response::Ok { result, .. } => result
                .stdout
                .split_whitespace()
                .nth(1)
                .expect("the copy's inode")
                .to_string(),
            other => panic!("{other:?}"),
        }
    };
    let a = std::thread::spawn(call.clone());
    let b = std::thread::spawn(call);
    let (pa, pb) = (a.join().unwrap(), b.join().unwrap());
    assert_ne!(pa, pb, "concurrent calls shared a secret copy");
    assert_eq!(
        open_copies(daemon_pid),
        0,
        "a secret copy outlived its call"
    );
}

#[test]
fn inline_secret_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("inline.toml");
    std::fs::write(
        &p,
        "version = 1\n[roles.a]\nuids = [1]\n\n[secrets.pg]\nvalue = \"hunter2-hunter2\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["policy", "check"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("inline.toml:5:") && err.contains("inline"),
        "{err}"
    );
    assert!(
        !err.contains("hunter2"),
        "the refusal repeats the secret: {err}"
    );
}

#[test]
fn short_secret_is_a_warning_not_an_error() {
    if !require_root("secrets") {
        return;
    }
    let policy = policy().secret("tiny", Secret::File("@DIR@/tiny".into()));
    let d = Daemon::start_with(&policy.render(), |dir| {
        for (name, value) in [("tok", SECRET), ("tiny", "abc")] {
            write_secret(&dir.join(name), value);
        }
    });
    assert!(d.log().contains("shorter than 8"), "{}", d.log());
    assert!(!d.log().contains("abc\n") && !d.log().contains("\"abc\""));
    assert!(matches!(d.call("show-env", &[]), Response::Ok { .. }));
}

#[test]
fn secrets_in_argv_draw_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, policy().render().replace("@DIR@", "/etc/verbd-test")).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["policy", "check"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("show-argv") && err.contains("/proc/PID/cmdline"),
        "{err}"
    );
    // (show-env does draw another warning: printenv, read-only, prints the environment.)
    assert!(
        !err.contains("verb `show-env` passes secret"),
        "env secrets need no warning: {err}"
    );
}
