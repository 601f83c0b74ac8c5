//! Invariants 6 and 10 at the daemon level: a verb run *by `verbd serve`* (not by the sandbox
//! library directly) is confined by its named profile, the dry run of a destructive verb runs in
//! the profile's twin without write roots, and a sandbox stage that fails denies the call with the
//! stage named. The probe is the verbd binary's own canary subcommand (`__sandbox-canary`, the
//! self-test's child), run as an ordinary verb: it reports each probe as `confined` or `ESCAPED`.
//! Each confinement check has a control verb whose profile allows the forbidden thing, and there
//! the same probe reports `ESCAPED`.
use crate::common;
use common::policy::{Category, NetworkMode, Policy, Sandbox, Verb};
use common::*;
use std::time::Duration;
use verbd::protocol::Response;

const AGENT: u32 = 61810;
const SRE: u32 = 61811;

/// The profile `tight` and its control `loose`, which also writes `outside` and has the network.
fn policy() -> String {
    let bin_dir = std::path::Path::new(BIN)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let read = [
        "/usr",
        "/bin",
        "/lib",
        "/lib64",
        "/etc",
        "/proc",
        bin_dir.as_str(),
    ];
    let canary = [
        BIN,
        "__sandbox-canary",
        "--outside",
        "@DIR@/outside/sub",
        "--network-none",
    ];
    let verb = |category, description: &str, profile: &str, argv: &[&str]| {
        Verb::argv(category, argv)
            .description(description)
            .roles(&["agent"])
            .sandbox(profile)
    };
    let read_only = Category::ReadOnly;
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT, 0])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .sandbox("tight", Sandbox::new(&read, &["@DIR@/inside"]))
        .sandbox(
            "loose",
            Sandbox {
                network: Some(NetworkMode::Full),
                ..Sandbox::new(&read, &["@DIR@/inside", "@DIR@/outside"])
            },
        )
        .verb(
            "probe",
            verb(
                read_only,
                "the canary, as a verb of the tight profile",
                "tight",
                &canary,
            ),
        )
        .verb(
            "probe-loose",
            verb(
                read_only,
                "control: the same canary where writing outside and the network are allowed",
                "loose",
                &canary,
            ),
        )
        .verb(
            "status",
            verb(
                read_only,
                "the child's own /proc/self/status",
                "tight",
                &["/bin/cat", "/proc/self/status"],
            ),
        )
        .verb(
            "mark",
            verb(
                read_only,
                "a side effect inside the write root",
                "tight",
                &["/usr/bin/touch", "@DIR@/inside/sub/marked"],
            ),
        )
        .verb(
            "wipe",
            verb(
                Category::Destructive,
                "destructive: its dry run tries to write where the real run may",
                "tight",
                &["/usr/bin/touch", "@DIR@/inside/sub/real"],
            )
            .dry_run_argv(&["/usr/bin/touch", "@DIR@/inside/sub/dry"]),
        )
        .render()
}

fn start(env: &[(&str, &str)]) -> Option<Daemon> {
    if !require_root("daemon_confinement") {
        return None;
    }
    let dir = open_tempdir();
    for sub in ["inside/sub", "outside/sub"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let d = Daemon::spawn_in(dir, &policy(), env);
    d.wait_ready();
    d.open_socket();
    Some(d)
}

/// The canary's verdict per probe: `name -> (confined, detail)`.
fn probes(stdout: &str) -> std::collections::BTreeMap<String, (bool, String)> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let name = parts.next()?.to_string();
            let confined = match parts.next()? {
                "confined" => true,
                "ESCAPED" => false,
                _ => return None,
            };
            Some((name, (confined, parts.next().unwrap_or("").to_string())))
        })
        .collect()
}

/// Run `verb` as the hostile agent uid through the CLI; its stdout (exit 0 required).
fn run_as_agent(d: &Daemon, verb: &str) -> String {
    let out = d.cli_as(AGENT, &["call", "--json", verb]);
    assert_eq!(out.status.code(), Some(0), "{verb}: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["stdout"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_verb_run_by_the_daemon_is_confined_by_its_profile() {
    let Some(d) = start(&[]) else { return };
    let tight = probes(&run_as_agent(&d, "probe"));
    for name in [
        "write-outside",
        "denied-syscall",
        "network",
        "no-new-privs",
        "seccomp",
        "capabilities",
    ] {
        let (confined, detail) = tight
            .get(name)
            .unwrap_or_else(|| panic!("no {name}: {tight:?}"));
        assert!(confined, "{name} escaped under the daemon: {detail}");
    }
    assert!(
        tight["write-outside"].1.contains("Permission denied"),
        "{tight:?}"
    );
    assert!(
        tight["network"].1.contains("EPERM") || tight["network"].1.contains("permitted"),
        "{tight:?}"
    );
    assert!(tight["denied-syscall"].1.contains("EPERM"), "{tight:?}");
    assert!(
        std::fs::read_dir(d.path("outside/sub"))
            .unwrap()
            .next()
            .is_none(),
        "the tight probe left a file outside its write roots"
    );

    // Control: the same probe in a profile that allows the write and the network escapes on
    // exactly those two, so the probes can see an escape.
    let loose = probes(&run_as_agent(&d, "probe-loose"));
    assert!(!loose["write-outside"].0, "{loose:?}");
    assert!(!loose["network"].0, "{loose:?}");
    assert!(loose["seccomp"].0 && loose["no-new-privs"].0, "{loose:?}");
}

#[test]
fn the_daemon_child_status_shows_no_new_privs_seccomp_and_no_capabilities() {
    let Some(d) = start(&[]) else { return };
    let field = |status: &str, name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {status}"))
            .trim()
            .to_string()
    };
    let child = run_as_agent(&d, "status");
    assert_eq!(field(&child, "NoNewPrivs"), "1");
    assert_eq!(field(&child, "Seccomp"), "2");
    assert_ne!(field(&child, "Seccomp_filters"), "0");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(&child, set), "0000000000000000", "{set}");
    }
    // Control: the same fields of this (root, unconfined) test process differ, so equal values
    // above are the sandbox's doing, not the format's.
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    assert_eq!(field(&own, "NoNewPrivs"), "0");
    assert_ne!(field(&own, "CapEff"), "0000000000000000");
}

#[test]
fn a_dry_run_cannot_write_inside_the_write_roots_the_real_run_may() {
    let Some(d) = start(&[]) else { return };
    let out = d.cli_as(
        AGENT,
        &["call", "--json", "--reason", "confinement test", "wipe"],
    );
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_u64().unwrap();
    let hash = v["hash"].as_str().unwrap().to_string();
    let pending = d.cli_as(SRE, &["pending", "--json"]);
    let text = String::from_utf8_lossy(&pending.stdout);
    assert!(text.contains("exit 1"), "{text}");
    assert!(
        text.contains("Permission denied"),
        "the dry run's write was not refused: {text}"
    );
    assert!(!d.path("inside/sub/dry").exists(), "the dry run wrote");
    // Control: approved, the real run writes in the same directory.
    let approved = d.cli_as(SRE, &["approve", &id.to_string(), "--hash", &hash[..12]]);
    assert_eq!(approved.status.code(), Some(0), "{approved:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !d.path("inside/sub/real").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the approved run never wrote"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!d.path("inside/sub/dry").exists());
}

#[test]
fn a_failing_sandbox_stage_denies_the_call_and_names_the_stage() {
    // Control: without the fault the verb runs and leaves its marker.
    let Some(control) = start(&[]) else { return };
    assert!(matches!(control.call("mark", &[]), Response::Ok { .. }));
    assert!(control.path("inside/sub/marked").exists());

    for stage in ["landlock", "seccomp", "no-new-privs", "capabilities"] {
        let setting = format!("tight:{stage}");
        let Some(d) = start(&[("VERBD_TEST_FAIL_STAGE", &setting)]) else {
            return;
        };
        match d.call("mark", &[]) {
            Response::Error { message } => {
                assert!(message.contains(stage), "{stage}: {message}");
                assert!(message.contains("sandbox"), "{stage}: {message}");
            }
            other => panic!("{stage}: a failed sandbox stage did not deny: {other:?}"),
        }
        assert!(
            !d.path("inside/sub/marked").exists(),
            "{stage}: the child ran without its sandbox"
        );
        let results: Vec<serde_json::Value> = d
            .journal_events()
            .into_iter()
            .filter(|e| e["kind"] == "result")
            .collect();
        assert_eq!(results.len(), 1, "{stage}");
        assert!(
            results[0]["error"].as_str().unwrap_or("").contains(stage),
            "{stage}: {:?}",
            results[0]
        );
    }
}
