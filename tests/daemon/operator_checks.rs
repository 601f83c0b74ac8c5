//! What an operator is told before the first verb runs, through the real binary (`policy check`,
//! `selftest`, `serve`) and a real daemon: accounts the policy names that do not exist; file
//! roots the daemon user cannot use; the fix for a program below a shared `/tmp`; verbs that
//! look more dangerous than they are marked, and patterns that accept anything; and the paths a
//! dry run shows the approver.
use crate::common;

use common::policy::{Category, Param, Policy, Sandbox, Verb};
use common::{BIN, Daemon, open_tempdir, require_root};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const AGENT: u32 = 62700;
const SRE: u32 = 62701;

fn verbd(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run verbd")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn write_policy(dir: &Path, text: &str) -> String {
    let path = dir.join("p.toml");
    std::fs::write(&path, text.replace("@DIR@", dir.to_str().unwrap())).unwrap();
    path.to_str().unwrap().to_string()
}

const ECHO_VERB: &str = "[verb.hello]\ndescription = \"hi\"\ncategory = \"read-only\"\nroles = [\"agent\"]\ncommand = \"/bin/echo hi\"\n";

#[test]
fn accounts_that_do_not_exist_are_reported_by_policy_check_and_selftest() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        dir.path(),
        &format!(
            "version = 1\n[daemon]\nuser = \"verbd-no-such-user-62700\"\nsocket_group = \"verbd-no-such-group-62700\"\n[roles.agent]\nuids = [{AGENT}]\n[roles.sre]\nkind = \"human\"\nusers = [\"alcie-62701\", \"root\"]\ngroups = [\"opz-62701\"]\n[approvals]\napprovers = [\"sre\"]\n{ECHO_VERB}"
        ),
    );
    let check = verbd(&["policy", "check", &policy]);
    let shown = text(&check);
    assert_eq!(check.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains(&format!(
            "daemon.user \"verbd-no-such-user-62700\" ({policy}:3:8) does not exist"
        )) && shown.contains(&format!(
            "daemon.socket_group \"verbd-no-such-group-62700\" ({policy}:4:16) does not exist"
        )),
        "{shown}"
    );
    // Role members that do not exist are warnings (the role grants nothing through them).
    assert!(
        shown.contains(&format!(
            "warning: role `sre` ({policy}:7:1): user \"alcie-62701\" does not exist"
        )) && shown.contains("group \"opz-62701\" does not exist"),
        "{shown}"
    );
    assert!(!shown.contains("\"root\" does not exist"), "{shown}");
    let selftest = verbd(&["selftest", "--policy", &policy]);
    let report = text(&selftest);
    assert_eq!(selftest.status.code(), Some(1), "{report}");
    assert!(
        report.contains("FAIL accounts: daemon.user \"verbd-no-such-user-62700\"")
            && report.contains("WARN role `sre`"),
        "{report}"
    );
    // The same policy with accounts this host has: the warnings stay, the check passes.
    let policy = write_policy(
        dir.path(),
        &format!(
            "version = 1\n[daemon]\nuser = \"nobody\"\nsocket_group = \"nogroup\"\n[roles.agent]\nuids = [{AGENT}]\n[roles.sre]\nkind = \"human\"\nusers = [\"alcie-62701\"]\n[approvals]\napprovers = [\"sre\"]\n{ECHO_VERB}"
        ),
    );
    let check = verbd(&["policy", "check", &policy]);
    let shown = text(&check);
    assert_eq!(check.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("user \"alcie-62701\" does not exist"),
        "{shown}"
    );
}

/// A daemon user (nobody) with a `file.write` verb whose root is `notes` (root-owned, 0755).
fn notes_policy(dir: &Path) -> String {
    write_policy(
        dir,
        &format!(
            "version = 1\n[daemon]\nuser = \"nobody\"\n[roles.agent]\nuids = [{AGENT}]\n[verb.note]\ndescription = \"a note\"\nbuiltin = \"file.write\"\ncategory = \"mutating\"\napproval = \"none\"\nroles = [\"agent\"]\nroots = [\"@DIR@/notes\"]\n"
        ),
    )
}

#[test]
fn a_file_root_the_daemon_user_cannot_write_fails_the_self_test_and_the_start() {
    if !require_root("file roots for the daemon user") {
        return;
    }
    let dir = open_tempdir();
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = notes_policy(dir.path());
    // Offline, as root for the daemon user it will become: owner, group and mode bits.
    for args in [
        vec!["selftest", "--policy", policy.as_str()],
        vec!["policy", "check", policy.as_str()],
    ] {
        let out = verbd(&args);
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {shown}");
        assert!(
            shown.contains(&format!(
                "the daemon user nobody (uid 65534) cannot write {}",
                notes.display()
            )) && shown.contains(&format!("setfacl -m u:nobody:rwx {}", notes.display())),
            "{args:?}: {shown}"
        );
    }
    // Serving: after the privilege drop the kernel answers (faccessat), and the start stops.
    let policy_text = std::fs::read_to_string(&policy).unwrap();
    let mut daemon = Daemon::spawn_in(open_tempdir(), &policy_text, &[]);
    let status = daemon.child.as_mut().unwrap().wait().unwrap();
    let log = daemon.log();
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(
        log.contains("FAIL file-roots:note: the daemon user nobody (uid 65534) cannot write")
            && log.contains("Permission denied"),
        "{log}"
    );
    daemon.child = None;
    // Given to the daemon user, the root passes.
    nix::unistd::chown(&notes, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = verbd(&["selftest", "--policy", &policy]);
    assert!(
        text(&out).contains(
            "PASS file-roots:note: 1 root(s) the daemon user nobody (uid 65534) can write"
        ),
        "{}",
        text(&out)
    );
    let daemon = Daemon::start(&policy_text);
    assert!(
        daemon.log().contains("self-test passed"),
        "{}",
        daemon.log()
    );
}

#[test]
fn a_program_below_a_shared_tmp_is_told_to_move_not_to_chmod_tmp() {
    if !require_root("programs below /tmp (root-owned directories)") {
        return;
    }
    let tmp = std::fs::metadata("/tmp").unwrap();
    if tmp.permissions().mode() & 0o7777 != 0o1777 {
        common::skip::skip_or_fail("shared /tmp hint", "/tmp is not mode 1777 here");
        return;
    }
    let bin = tempfile::Builder::new()
        .prefix("verbd-bin-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = bin.path().join("tool");
    std::fs::copy("/bin/true", &program).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        dir.path(),
        &format!(
            "version = 1\n[roles.agent]\nuids = [{AGENT}]\n[verb.tool]\ndescription = \"t\"\ncategory = \"read-only\"\nroles = [\"agent\"]\ncommand = \"{}\"\n",
            program.display()
        ),
    );
    let out = verbd(&["selftest", "--policy", &policy]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let fix = shown
        .lines()
        .skip_while(|l| !l.starts_with("FAIL binary:tool"))
        .nth(1)
        .unwrap_or_else(|| panic!("no fix line: {shown}"));
    assert!(
        fix.contains("/tmp is a shared directory (mode 1777) that must stay writable by everyone")
            && fix.contains("/usr/local/bin"),
        "{fix}"
    );
    assert!(!fix.contains("chmod go-w /tmp"), "{fix}");
}

#[test]
fn verbs_more_dangerous_than_marked_and_patterns_that_accept_anything_warn() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        dir.path(),
        &format!(
            r#"version = 1
[roles.agent]
uids = [{AGENT}]

[verb.clean]
description = "remove a scratch file"
category = "read-only"
roles = ["agent"]
command = "/bin/rm -f -- {{name}}"
params.name = {{ type = "string", pattern = "[a-z]{{1,20}}" }}

[verb.say]
description = "echo anything"
category = "read-only"
roles = ["agent"]
command = "/bin/echo {{text}}"
params.text = {{ type = "string", pattern = ".*" }}

[verb.unit]
description = "status or stop"
category = "read-only"
roles = ["agent"]
command = "/usr/bin/systemctl {{action}} {{unit}}"
params.action = {{ type = "enum", values = ["status", "stop"] }}
params.unit = {{ type = "systemd-unit" }}

[verb.status]
description = "a unit's status"
category = "read-only"
roles = ["agent"]
command = "/usr/bin/systemctl status {{unit}}"
params.unit = {{ type = "systemd-unit" }}

[verb.remove]
description = "remove, with approval"
category = "mutating"
roles = ["agent"]
command = "/bin/rm -f -- {{name}}"
params.name = {{ type = "string", pattern = "[a-z]{{1,20}}" }}
"#
        ),
    );
    let out = verbd(&["policy", "check", &policy]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let warnings: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    let about = |verb: &str| {
        warnings
            .iter()
            .filter(|w| w.contains(&format!("verb `{verb}`")))
            .count()
    };
    assert!(
        shown.contains(&format!(
            "warning: verb `clean` ({policy}:5:1) runs without approval (read-only), but `/bin/rm -f -- {{name}}` is destructive"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("`/usr/bin/systemctl stop {unit}` is destructive"),
        "{shown}"
    );
    assert!(
        shown.contains("the pattern \".*\" of parameter `text` accepts any text of any length"),
        "{shown}"
    );
    assert_eq!(
        (
            about("clean"),
            about("say"),
            about("unit"),
            about("status"),
            about("remove")
        ),
        (1, 1, 1, 0, 0),
        "{shown}"
    );
    // The self-test shows the same warnings.
    let out = verbd(&["selftest", "--policy", &policy]);
    let report = text(&out);
    assert!(
        report.contains("WARN verb `clean`") && report.contains("WARN verb `say`"),
        "{report}"
    );
}

#[test]
fn a_dry_run_shows_the_approver_the_paths_not_the_descriptors() {
    if !require_root("approvals as other uids") {
        return;
    }
    let policy = Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .sandbox(
            "data",
            Sandbox::new(
                &["/usr", "/lib", "/etc", "/bin", "@DIR@/data"],
                &["@DIR@/data"],
            ),
        )
        .verb(
            "wipe",
            Verb::command(Category::Destructive, "/bin/rm -r -- {dir}")
                .description("remove a directory under data")
                .roles(&["agent"])
                .sandbox("data")
                .dry_run("/usr/bin/find {dir}")
                .param("dir", Param::path(&["@DIR@/data"])),
        )
        .render();
    let d = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir_all(dir.join("data/sub")).unwrap();
        std::fs::write(dir.join("data/sub/a.bin"), "x").unwrap();
    });
    d.open_socket();
    let sub = d.path("data/sub");
    let out = d.cli_as(AGENT, &["call", "wipe", &format!("dir={}", sub.display())]);
    assert_eq!(out.status.code(), Some(73), "{}", text(&out));
    let pending = d.cli_as(SRE, &["pending"]);
    let shown = text(&pending);
    assert!(
        shown.contains(&format!("{}/a.bin", sub.display())),
        "the dry run must name the real path: {shown}"
    );
    assert!(!shown.contains("/proc/self/fd"), "{shown}");
    assert!(sub.join("a.bin").exists(), "the dry run deleted something");
}
