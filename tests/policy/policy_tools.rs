//! `verbd policy coverage|suggest|test|schema`, the packs and their include mechanism, shell
//! completions and man pages — all through the real binary, on the corpora in
//! tests/data/coverage and the transcript fixtures in tests/fixtures/transcripts.

use crate::common;

use common::{BIN, require_root};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ALL_PACKS: &str = "policy/packs/tests/all-packs.toml";
const READ_ONLY_CORPUS: &str = "tests/data/coverage/sre-readonly.txt";
const DANGEROUS_CORPUS: &str = "tests/data/coverage/sre-dangerous.txt";

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

/// `verbd policy suggest POLICY --from FROM`, which must succeed: what it printed.
fn suggest(policy: &Path, from: &str) -> String {
    let out = verbd(&[
        "policy",
        "suggest",
        policy.to_str().unwrap(),
        "--from",
        from,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn coverage_json(policy: &str, from: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["policy", "coverage", policy, "--format", "json", "--from"];
    args.extend_from_slice(from);
    let out = verbd(&args);
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out)));
    (out.status.code(), json)
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn command<'a>(report: &'a Value, text: &str) -> &'a Value {
    report["commands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["command"] == text)
        .unwrap_or_else(|| panic!("no command {text:?} in the report"))
}

fn corpus_lines(path: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count()
}

#[test]
fn the_corpus_is_big_enough_and_read_only_work_is_covered_at_95_percent() {
    let lines = corpus_lines(READ_ONLY_CORPUS) + corpus_lines(DANGEROUS_CORPUS);
    assert!(lines >= 300, "corpus has {lines} lines");
    let (code, report) = coverage_json(ALL_PACKS, &[READ_ONLY_CORPUS]);
    assert_eq!(code, Some(0), "{report}");
    let s = &report["summary"];
    let (commands, covered) = (
        s["commands"].as_u64().unwrap(),
        s["covered"].as_u64().unwrap(),
    );
    let percent = covered as f64 * 100.0 / commands as f64;
    eprintln!("read-only corpus: {covered}/{commands} covered ({percent:.1} %)");
    assert!(percent >= 95.0, "coverage {percent:.1} %: {report:#}");
    // The README reports this figure; it must be the one measured here.
    let readme = std::fs::read_to_string("README.md").unwrap();
    let claim = format!("**{covered} of {commands} read-only commands ({percent:.1} %)**");
    assert!(
        readme.contains(&claim),
        "README.md must report the measured coverage: {claim}"
    );
    assert_eq!(s["dangerous_without_approval"], 0);
    // What stays uncovered is exactly what no verb can stand for, each with its reason.
    let uncovered: Vec<(&str, &str)> = report["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "uncovered")
        .map(|c| {
            (
                c["command"].as_str().unwrap(),
                c["reason"].as_str().unwrap(),
            )
        })
        .collect();
    for (command, reason) in &uncovered {
        let explained = [
            "`-f` matches no element",
            "option `-f`",
            "glob",
            "a shell program",
            "watch",
            "SHOW",
            "`-f`",
        ]
        .iter()
        .any(|why| reason.contains(why));
        assert!(explained, "{command}: {reason}");
    }
}

#[test]
fn no_destructive_or_credential_reading_command_runs_without_approval() {
    let (code, report) = coverage_json(ALL_PACKS, &[DANGEROUS_CORPUS]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["summary"]["dangerous_without_approval"], 0);
    for c in report["commands"].as_array().unwrap() {
        if c["status"] == "covered" {
            assert_eq!(
                c["needs_approval"], true,
                "{} is covered by {} without approval",
                c["command"], c["verb"]
            );
        }
    }
    // The same check fails loudly for a policy with a verb that reads any file at once.
    let dir = tempfile::tempdir().unwrap();
    let policy = write(
        dir.path(),
        "p.toml",
        "version = 1\n[roles.agent]\nuids = [1]\n[verb.read-any]\ncategory = \"read-only\"\nroles = [\"agent\"]\ncommand = \"/usr/bin/cat {file}\"\nparams.file = { type = \"path\", roots = [\"/\"] }\n",
    );
    let history = write(
        dir.path(),
        "h.txt",
        "sudo cat /etc/shadow\nsudo cat /etc/hostname\n",
    );
    let out = verbd(&[
        "policy",
        "coverage",
        policy.to_str().unwrap(),
        "--from",
        history.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains(
            "!!! DANGER: 1 destructive or credential-reading command(s) would run WITHOUT approval"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("sudo cat /etc/shadow [credential-read] via verb `read-any`"),
        "{shown}"
    );
}

#[test]
fn shell_features_are_reported_as_such_never_guessed_through() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str)] = &[
        ("kill $(pidof nginx)", "command substitution"),
        (
            "kubectl logs `kubectl get pods -o name | head -1`",
            "command substitution",
        ),
        ("kubectl logs $POD -n web", "shell variable $POD"),
        ("ls /var/log/*.log", "a glob"),
        (
            "journalctl -u nginx > /tmp/out.txt",
            "redirection to a file",
        ),
        ("psql -d app < /tmp/q.sql", "input read from a file"),
        ("sudo sh -c 'systemctl restart nginx'", "`sh -c`"),
        ("sudo bash -lc 'id'", "`bash -c`"),
        ("python3 -c 'import os; os.system(\"id\")'", "`python3 -c`"),
        (
            "pgrep nginx | xargs kill",
            "downstream `xargs kill` is not a pure text filter",
        ),
        ("find /var/log -name x -exec cat {} ;", "`-exec`"),
        ("psql -c 'select 1' <<< 'x'", "a here-string feeding stdin"),
        ("(cd /etc && cat shadow)", "a subshell"),
        (
            "journalctl -u nginx | grep -r secret /root",
            "grep -r/-d reads directories",
        ),
        (
            "systemctl status nginx | sed 's/a/b/e'",
            "runs commands or touches files",
        ),
        (
            "echo 'select 1' | psql",
            "reads its input from `echo 'select 1'`",
        ),
        (
            "watch -n1 kubectl get pods",
            "`watch`: runs its argument through `sh -c`",
        ),
        ("sudo -i", "opens a shell"),
        (
            "while true; do uptime; done",
            "a shell program, not one command",
        ),
        ("cat ~/.kube/config", "tilde expansion"),
        ("echo 'unterminated", "cannot be read as a shell command"),
    ];
    let history: String = cases.iter().map(|(c, _)| format!("{c}\n")).collect();
    let from = write(dir.path(), "h.txt", &history);
    let (_, report) = coverage_json(ALL_PACKS, &[from.to_str().unwrap()]);
    for (line, why) in cases {
        let c = report["commands"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| line.starts_with(c["command"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{line} missing from {report:#}"));
        assert_eq!(c["status"], "uncovered", "{line}");
        let reason = c["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{line}: {reason}");
    }
}

#[test]
fn sudo_env_cd_are_peeled_and_text_filters_are_client_side() {
    let dir = tempfile::tempdir().unwrap();
    let from = write(
        dir.path(),
        "h.txt",
        concat!(
            "cd /srv && sudo -u root env SYSTEMD_COLORS=0 timeout 10 journalctl -u nginx -n 50 --no-pager | grep -i error | tail -5\n",
            "echo ---; sudo systemctl status nginx; sudo systemctl status postgresql\n",
        ),
    );
    let (_, report) = coverage_json(ALL_PACKS, &[from.to_str().unwrap()]);
    let c = &report["commands"][0];
    assert_eq!(c["status"], "covered", "{report:#}");
    assert_eq!(c["verb"], "journal-unit");
    assert_eq!(c["args"]["unit"], "nginx");
    assert_eq!(c["args"]["lines"], "50");
    assert_eq!(c["client_side"], "grep -i error | tail -5");
    assert_eq!(c["needs_approval"], false);
    assert_eq!(c["category"], "read-only");
    // `cd` and `echo` are ignored; the two status commands are separate commands.
    assert_eq!(report["summary"]["commands"], 3);
    assert_eq!(report["summary"]["ignored"], 2);
    assert_eq!(
        command(&report, "sudo systemctl status postgresql")["args"]["unit"],
        "postgresql"
    );
}

#[test]
fn json_shape_is_stable() {
    let dir = tempfile::tempdir().unwrap();
    let from = write(
        dir.path(),
        "h.txt",
        "sudo systemctl status nginx\nrm -rf /tmp/x\n",
    );
    let (_, report) = coverage_json(ALL_PACKS, &[from.to_str().unwrap()]);
    for key in ["commands", "covered", "needs_approval", "uncovered"] {
        assert!(report["summary"][key].is_u64(), "summary.{key}: {report}");
    }
    for c in report["commands"].as_array().unwrap() {
        for key in [
            "command",
            "status",
            "verb",
            "args",
            "category",
            "needs_approval",
            "client_side",
            "reason",
        ] {
            assert!(c.get(key).is_some(), "{key} missing: {c}");
        }
    }
    let covered = command(&report, "sudo systemctl status nginx");
    assert_eq!(covered["verb"], "unit-status");
    assert!(covered["reason"].is_null());
    let uncovered = command(&report, "rm -rf /tmp/x");
    assert!(uncovered["verb"].is_null());
    assert_eq!(uncovered["reason"], "no verb runs `rm`");
}

#[test]
fn claude_code_and_codex_transcripts_in_their_real_formats() {
    let (code, report) = coverage_json(
        ALL_PACKS,
        &["tests/fixtures/transcripts/claude-code-session.jsonl"],
    );
    assert_eq!(code, Some(0));
    let commands: Vec<&str> = report["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    // Every Bash tool_use, in order (the Read tool_use and text blocks are not commands; the
    // `cd` of `cd /srv/app && git log` is ignored).
    assert_eq!(commands.len(), 13, "{commands:#?}");
    assert_eq!(commands[0], "sudo systemctl status nginx --no-pager");
    assert_eq!(commands[11], "df -h");
    assert_eq!(commands[12], "free -m");
    let git = command(&report, "git log --oneline -5");
    assert_eq!(git["verb"], "git-log");
    assert_eq!(git["args"]["repo"], "/srv/app");
    assert_eq!(
        command(&report, "kubectl rollout restart deploy/api -n web")["needs_approval"],
        true
    );
    assert!(
        command(&report, "sudo -u postgres psql -c \"SELECT count(*) FROM pg_stat_activity WHERE state = 'active'\"")["notes"]
            .to_string()
            .contains("the agent ran it as `postgres`")
    );

    let (code, report) = coverage_json(
        ALL_PACKS,
        &["tests/fixtures/transcripts/codex-rollout.jsonl"],
    );
    assert_eq!(code, Some(0));
    let commands: Vec<&str> = report["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    // shell (bash -lc unwrapped, and a bare argv), shell_command, exec_command, local_shell_call;
    // exec_command_begin events repeat the calls and are not counted twice; apply_patch is no
    // command.
    assert_eq!(
        commands,
        [
            "kubectl top pods -n workers --sort-by=memory",
            "kubectl logs queue-worker-5c6d7-abcde -n workers --since=30m | grep -c retry",
            "sudo -u postgres psql -d app -c \"SELECT state, count(*) FROM pg_stat_activity GROUP BY state\"",
            "kubectl get pods -n workers",
            "sudo journalctl -u redis -n 100 --no-pager",
            "kubectl scale deploy/worker --replicas=6 -n workers",
            "free -h",
            "uptime",
            "ps aux --sort=-%mem | head -15",
            "df -h /var",
        ]
    );
    assert_eq!(report["summary"]["uncovered"], 0, "{report:#}");
    assert_eq!(
        command(
            &report,
            "kubectl scale deploy/worker --replicas=6 -n workers"
        )["verb"],
        "k8s-scale"
    );
    // A directory of transcripts works too.
    let (_, both) = coverage_json(ALL_PACKS, &["tests/fixtures/transcripts"]);
    assert_eq!(both["summary"]["commands"], 23);
}

#[test]
fn credentials_in_recorded_commands_are_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let from = write(
        dir.path(),
        "h.txt",
        concat!(
            "PGPASSWORD=hunter2-very-secret psql -h db.internal -U stats_ro -d app -c 'SELECT 1'\n",
            "psql postgres://app:s3cr3t-pass-word@db.internal/app -c 'SELECT 1'\n",
            "curl -H 'Authorization: Bearer x' --token=tok-abcdef123456 http://localhost:8080/\n",
            "{\"command\": \"mysql --password=pw-zyx987 -e 'select 1'\"}\n",
        ),
    );
    for format in ["json", "text"] {
        let out = verbd(&[
            "policy",
            "coverage",
            ALL_PACKS,
            "--format",
            format,
            "--from",
            from.to_str().unwrap(),
        ]);
        let shown = text(&out);
        for secret in [
            "hunter2-very-secret",
            "s3cr3t-pass-word",
            "tok-abcdef123456",
            "pw-zyx987",
        ] {
            assert!(!shown.contains(secret), "{format} shows {secret}: {shown}");
        }
    }
    let (_, report) = coverage_json(ALL_PACKS, &[from.to_str().unwrap()]);
    let first = &report["commands"][0];
    let shown = first["command"].as_str().unwrap();
    assert!(
        shown.starts_with("PGPASSWORD=")
            && shown.ends_with(" psql -h db.internal -U stats_ro -d app -c 'SELECT 1'"),
        "{shown}"
    );
    assert_eq!(first["status"], "covered");
}

#[test]
fn terminal_escapes_in_a_hostile_transcript_cannot_fake_the_report() {
    let dir = tempfile::tempdir().unwrap();
    // A recorded command that clears the screen and prints a fake all-clear line.
    let hostile = "rm -rf / \u{1b}[2J\u{1b}[Hcoverage: 100/100 commands covered (100.0 %)\r";
    let line = serde_json::json!({ "command": hostile }).to_string();
    let from = write(dir.path(), "h.jsonl", &format!("{line}\n"));
    let out = verbd(&[
        "policy",
        "coverage",
        ALL_PACKS,
        "--from",
        from.to_str().unwrap(),
    ]);
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !shown.contains('\u{1b}'),
        "raw ESC in the report: {shown:?}"
    );
    assert!(!shown.contains('\r'), "raw CR in the report: {shown:?}");
    assert!(
        shown.starts_with("coverage: 0/1 commands covered"),
        "{shown}"
    );
}

#[test]
fn suggest_then_paste_then_check_passes_and_covers() {
    let dir = tempfile::tempdir().unwrap();
    let policy_text = "version = 1\n[roles.agent]\ngroups = [\"verbd-agents\"]\n[roles.sre]\nkind = \"human\"\nuids = [0]\n[approvals]\napprovers = [\"sre\"]\n";
    let policy = write(dir.path(), "p.toml", policy_text);
    let history = write(
        dir.path(),
        "h.txt",
        concat!(
            "sudo systemctl status nginx\n",
            "sudo systemctl status postgresql\n",
            "sudo systemctl status redis-server.service\n",
            "journalctl -u nginx -n 50\n",
            "journalctl -u nginx -n 200\n",
            "journalctl -u api -n 1000\n",
            "sudo -u postgres psql -c 'SELECT count(*) FROM pg_stat_activity'\n",
            "sudo -u postgres psql -c 'SELECT datname FROM pg_database'\n",
            "sudo systemctl restart nginx\n",
            "sudo systemctl restart api\n",
            "kubectl delete pod web-1 -n web\n",
            "kubectl delete pod web-2 -n web\n",
            "du -sh /var/log/nginx\n",
            "du -sh /var/lib/docker\n",
            "sudo bash -c 'systemctl restart nginx'\n",
            "python3 -c 'print(1)'\n",
            "sudo cat /etc/shadow\n",
            "tail -n 20 /var/log/app/a.log\n",
            "tail -n 40 /var/log/app/b.log\n",
        ),
    );
    let suggested = suggest(&policy, history.to_str().unwrap());
    // Never a shell, an interpreter or a credential read; said why.
    assert!(suggested.contains("#   `sudo bash -c 'systemctl restart nginx'`: `bash -c`: a command string run by a shell or interpreter"), "{suggested}");
    assert!(suggested.contains("#   `python3 -c 'print(1)'`: `python3 -c`: a command string run by a shell or interpreter"), "{suggested}");
    assert!(
        suggested.contains("#   `sudo cat /etc/shadow`: reads credentials"),
        "{suggested}"
    );
    for line in suggested.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            !line.contains("/bash\"") && !line.contains("python"),
            "{line}"
        );
        if line.contains("type = \"string\"") {
            assert!(
                line.contains("pattern = "),
                "a string without a pattern: {line}"
            );
        }
    }
    // Typed parameters inferred from the variation seen; conservative categories.
    assert!(
        suggested.contains("type = \"int\", min = 50, max = 1000"),
        "{suggested}"
    );
    assert!(
        suggested.contains("type = \"sql\", allow = [\"select\"]"),
        "{suggested}"
    );
    assert!(
        suggested
            .contains("params.path = { type = \"path\", roots = [\"/var/lib\", \"/var/log\"] }"),
        "{suggested}"
    );
    assert!(suggested.contains("params.unit = { type = \"enum\", values = [\"nginx\", \"postgresql\", \"redis-server.service\"] }"), "{suggested}");
    assert!(suggested.contains("[verb.systemctl-restart]\ndescription = \"systemctl restart (suggested from 2 recorded commands; review)\"\ncategory = \"mutating\""), "{suggested}");
    assert!(
        suggested.contains("category = \"destructive\""),
        "{suggested}"
    );
    assert!(
        suggested.contains("dry_run = [\"/bin/echo\", \"would run:\""),
        "{suggested}"
    );
    assert!(suggested.contains("[verb.systemctl-status]\ndescription = \"systemctl status (suggested from 3 recorded commands; review)\"\ncategory = \"read-only\""), "{suggested}");
    assert!(suggested.contains("examples.accept = ["), "{suggested}");
    // Paste: the policy still checks, and now covers what it was drafted from.
    let pasted = write(
        dir.path(),
        "pasted.toml",
        &format!("{policy_text}\n{suggested}"),
    );
    let check = verbd(&["policy", "check", pasted.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    let (_, report) = coverage_json(pasted.to_str().unwrap(), &[history.to_str().unwrap()]);
    for c in report["commands"].as_array().unwrap() {
        let line = c["command"].as_str().unwrap();
        let skipped =
            line.contains("bash -c") || line.contains("python3") || line.contains("/etc/shadow");
        assert_eq!(c["status"] == "covered", !skipped, "{line}: {c}");
    }
    assert_eq!(report["summary"]["dangerous_without_approval"], 0);
}

#[test]
fn coverage_names_the_pack_and_suggest_includes_it_before_drafting() {
    let dir = tempfile::tempdir().unwrap();
    let packs = std::fs::canonicalize("policy/packs").unwrap();
    let systemd = packs.join("systemd.toml");
    let policy_text = format!(
        "version = 1\ninclude = [{{ path = {:?}, verbs = [\"unit-status\"], values = {{ unit = [\"nginx.service\"] }} }}]\n[roles.agent]\nuids = [63201]\n[roles.sre]\nkind = \"human\"\nuids = [63299]\n[approvals]\napprovers = [\"sre\"]\n",
        systemd.to_str().unwrap()
    );
    let policy = write(dir.path(), "p.toml", &policy_text);
    let history = write(
        dir.path(),
        "h.txt",
        concat!(
            "systemctl status nginx.service\n",
            "systemctl status postgresql.service\n",
            "redis-cli -h cache.internal INFO memory\n",
            "redis-cli -h cache.internal info\n",
            "psql -h db.internal -U stats_ro -d app -At -c 'SELECT count(*) FROM pg_stat_activity'\n",
            "frobnicate --all\n",
            "frobnicate --none\n",
        ),
    );
    let from = history.to_str().unwrap();
    let (code, report) = coverage_json(policy.to_str().unwrap(), &[from]);
    assert_eq!(code, Some(0), "{report}");
    let pack_of = |line: &str| command(&report, line)["pack"].clone();
    assert_eq!(
        command(&report, "systemctl status nginx.service")["status"],
        "covered"
    );
    assert!(pack_of("systemctl status nginx.service").is_null());
    // Included, but narrowed out: the pack is named as the one to widen.
    let narrowed = pack_of("systemctl status postgresql.service");
    assert_eq!(narrowed["pack"], "systemd", "{narrowed}");
    assert_eq!(narrowed["verb"], "unit-status", "{narrowed}");
    assert_eq!(narrowed["included"], true, "{narrowed}");
    // Not included: the pack beside the ones the policy includes that covers it.
    let redis = pack_of("redis-cli -h cache.internal INFO memory");
    assert_eq!(redis["pack"], "redis", "{redis}");
    assert_eq!(redis["verb"], "redis-info", "{redis}");
    assert_eq!(redis["included"], false, "{redis}");
    assert_eq!(redis["args"]["redis_host"], "cache.internal", "{redis}");
    let psql = pack_of(
        "psql -h db.internal -U stats_ro -d app -At -c 'SELECT count(*) FROM pg_stat_activity'",
    );
    assert_eq!(psql["pack"], "postgresql", "{psql}");
    assert!(pack_of("frobnicate --all").is_null());
    assert_eq!(report["summary"]["uncovered_in_packs"], 4, "{report}");

    let out = verbd(&[
        "policy",
        "coverage",
        policy.to_str().unwrap(),
        "--from",
        from,
    ]);
    let shown = text(&out);
    assert!(
        shown.contains("4 of the uncovered commands are covered by packs: postgresql (1), redis (2), systemd (1)"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "pack `redis` covers it (verb `redis-info`): include {}",
            packs.join("redis.toml").display()
        )),
        "{shown}"
    );
    assert!(
        shown.contains(
            "pack `systemd` covers it (verb `unit-status`), but this policy narrows it out"
        ),
        "{shown}"
    );
    // An empty pack directory: nothing named.
    let empty = tempfile::tempdir().unwrap();
    let out = verbd(&[
        "policy",
        "coverage",
        policy.to_str().unwrap(),
        "--format",
        "json",
        "--packs",
        empty.path().to_str().unwrap(),
        "--from",
        from,
    ]);
    let none: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(none["summary"]["uncovered_in_packs"], 0, "{none}");

    // Suggest proposes the packs' include entries and drafts verbs only for the rest.
    let suggested = suggest(&policy, from);
    assert!(
        suggested.contains(&format!(
            "# pack `redis` covers 2 recorded command(s), e.g. `redis-cli -h cache.internal INFO memory` ({from}:3):\n#   {{ path = \"{}\", verbs = [\"redis-info\"] }},\n#   values seen for redis_host: [\"cache.internal\"] (narrow with values = {{ redis_host = [...] }})\n# pack",
            packs.join("redis.toml").display()
        )),
        "{suggested}"
    );
    // Flags, enums and SQL are not site values.
    assert!(!suggested.contains("values seen for info"), "{suggested}");
    assert!(!suggested.contains("values seen for sql"), "{suggested}");
    assert!(
        suggested.contains("#   values seen for host: [\"db.internal\"]"),
        "{suggested}"
    );
    assert!(
        suggested.contains("#   the policy includes it, narrowed so these fall outside"),
        "{suggested}"
    );
    for drafted in ["[verb.redis-cli", "[verb.psql", "[verb.systemctl"] {
        assert!(!suggested.contains(drafted), "{drafted}: {suggested}");
    }
    assert!(suggested.contains("[verb.frobnicate]"), "{suggested}");
}

#[test]
fn psql_drafts_run_as_the_pack_does_and_names_say_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let policy_text = "version = 1\n[roles.agent]\nuids = [63202]\n";
    let policy = write(dir.path(), "p.toml", policy_text);
    let history = write(
        dir.path(),
        "h.txt",
        concat!(
            "psql -h db.internal -U stats_ro -c 'SELECT 1'\n",
            "psql -h db.internal -U stats_ro -c 'SELECT 2'\n",
            "journalctl -u nginx.service -n 50\n",
            "journalctl -u api.service -n 100\n",
            "journalctl -u nginx.service --since 1h\n",
            "journalctl -u api.service --since 2h\n",
        ),
    );
    let suggested = suggest(&policy, history.to_str().unwrap());
    let psql = suggested
        .lines()
        .find(|l| l.starts_with("command = [") && l.contains("psql"))
        .unwrap_or_else(|| panic!("no psql draft: {suggested}"));
    assert!(
        psql.contains("/psql\", \"-X\", \"--no-password\", \"-h\""),
        "{psql}"
    );
    assert!(
        suggested.contains(
            "env = { PGOPTIONS = \"-c default_transaction_read_only=on -c statement_timeout=30s\" }"
        ),
        "{suggested}"
    );
    // Two journalctl shapes: the second is named for what sets it apart.
    assert!(suggested.contains("[verb.journalctl]"), "{suggested}");
    assert!(suggested.contains("[verb.journalctl-lines]"), "{suggested}");
    assert!(!suggested.contains("[verb.journalctl-2]"), "{suggested}");
    // Pasted, it checks and covers what it came from.
    let pasted = write(
        dir.path(),
        "pasted.toml",
        &format!("{policy_text}\n{suggested}"),
    );
    let check = verbd(&["policy", "check", pasted.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    let (_, report) = coverage_json(pasted.to_str().unwrap(), &[history.to_str().unwrap()]);
    assert_eq!(report["summary"]["uncovered"], 0, "{report}");
}

#[test]
fn packs_load_and_their_tests_pass() {
    let check = verbd(&["policy", "check", ALL_PACKS]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    // The example names the accounts its package creates (daemon.user, socket groups).
    if require_root("the example policy with the package's accounts") {
        let check = common::PackageAccounts::create()
            .command(BIN)
            .args(["policy", "check", "policy/example.toml"])
            .output()
            .unwrap();
        assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    }
    let mut packs = 0;
    for entry in std::fs::read_dir("policy/packs").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        packs += 1;
        let name = path.file_name().unwrap().to_str().unwrap();
        let tests = format!("policy/packs/tests/{name}");
        assert!(
            Path::new(&tests).exists(),
            "pack {name} ships without tests"
        );
        let out = verbd(&["policy", "test", ALL_PACKS, &tests]);
        assert_eq!(out.status.code(), Some(0), "{tests}: {}", text(&out));
        assert!(text(&out).contains(" passed, 0 failed"), "{}", text(&out));
    }
    assert_eq!(packs, 14);
    // JUnit for CI.
    let out = verbd(&[
        "policy",
        "test",
        ALL_PACKS,
        "policy/packs/tests/kubectl.toml",
        "--format",
        "junit",
    ]);
    let xml = String::from_utf8(out.stdout).unwrap();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains(
            "<testsuite name=\"policy/packs/tests/kubectl.toml\" tests=\"14\" failures=\"0\">"
        ),
        "{xml}"
    );
}

#[test]
fn policy_test_fails_on_a_mismatch_and_refuses_vague_cases() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = write(
        dir.path(),
        "wrong.toml",
        "[caller]\nrole = \"agent\"\n[[case]]\nname = \"stop runs at once?\"\nverb = \"unit-stop\"\nargs = { unit = \"nginx\" }\nexpect = \"run\"\n[[case]]\nname = \"refused for the right rule\"\nverb = \"unit-status\"\nargs = { unit = \"--all\" }\nexpect = \"refuse\"\nrule = \"enum\"\n",
    );
    let out = verbd(&["policy", "test", ALL_PACKS, wrong.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains("FAIL  stop runs at once?\n      expected run\n      got      propose"),
        "{shown}"
    );
    assert!(
        shown.contains("expected refuse(enum)\n      got      refuse(systemd-unit)"),
        "{shown}"
    );
    assert!(shown.contains("0 passed, 2 failed"), "{shown}");
    let out = verbd(&[
        "policy",
        "test",
        ALL_PACKS,
        wrong.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["failed"], 2);
    let vague = write(
        dir.path(),
        "vague.toml",
        "[[case]]\nname = \"any refusal\"\ncaller = { role = \"agent\" }\nverb = \"unit-status\"\nargs = { unit = \"--all\" }\nexpect = \"refuse\"\n",
    );
    let out = verbd(&["policy", "test", ALL_PACKS, vague.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(text(&out).contains("a refuse case must name the rule that refuses it"));
}

/// A policy in `dir` that includes `pack` (its text) with `include` (the TOML value).
fn policy_with_pack(dir: &Path, pack: &str, include: &str) -> PathBuf {
    let pack_path = write(dir, "pack.toml", pack);
    let mut perms = std::fs::metadata(&pack_path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&pack_path, perms).unwrap();
    write(
        dir,
        "policy.toml",
        &format!(
            "version = 1\ninclude = [{include}]\n[roles.agent]\nuids = [1]\n[roles.other]\nuids = [2]\n"
        ),
    )
}

const SMALL_PACK: &str = "[pack]\ndescription = \"test\"\n\n[verb.pods]\ncategory = \"read-only\"\nroles = [\"agent\"]\ncommand = \"/usr/bin/kubectl get pods -n {namespace}\"\nparams.namespace = { type = \"k8s-name\" }\n";

fn check(policy: &Path) -> (Option<i32>, String) {
    let out = verbd(&["policy", "check", policy.to_str().unwrap()]);
    (out.status.code(), text(&out))
}

#[test]
fn a_pack_cannot_grant_roles_secrets_or_approvers() {
    let dir = tempfile::tempdir().unwrap();
    let pack = format!("{SMALL_PACK}\n[roles.agent]\nuids = [0]\n");
    let policy = policy_with_pack(dir.path(), &pack, "\"pack.toml\"");
    let (code, err) = check(&policy);
    assert_eq!(code, Some(1));
    let pack_path = std::fs::canonicalize(dir.path().join("pack.toml")).unwrap();
    // Located in the pack itself: line 10 is `[roles.agent]`.
    assert!(
        err.contains(&format!("{}:10:2:", pack_path.display())),
        "{err}"
    );
    assert!(err.contains("unknown field `roles`"), "{err}");
    let pack = format!("{SMALL_PACK}\n[approvals]\napprovers = [\"agent\"]\n");
    let (code, err) = check(&policy_with_pack(dir.path(), &pack, "\"pack.toml\""));
    assert_eq!(code, Some(1));
    assert!(err.contains("unknown field `approvals`"), "{err}");
}

#[test]
fn a_pack_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_with_pack(dir.path(), SMALL_PACK, "\"pack.toml\"");
    assert_eq!(check(&policy).0, Some(0));
    let pack = dir.path().join("pack.toml");
    let mut perms = std::fs::metadata(&pack).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o666);
    std::fs::set_permissions(&pack, perms).unwrap();
    let (code, err) = check(&policy);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("mode 0666 lets group or others write it"),
        "{err}"
    );
    assert!(err.contains("policy.toml:2:"), "{err}");
}

#[test]
fn includes_narrow_packs_and_every_name_they_use_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_with_pack(
        dir.path(),
        SMALL_PACK,
        "{ path = \"pack.toml\", roles = [\"other\"], values = { namespace = [\"web\"] }, programs = { kubectl = \"/opt/k/kubectl\" } }",
    );
    let p = verbd::policy::load_file(&policy).unwrap();
    let verb = &p.verbs["pods"];
    assert_eq!(verb.roles, ["other"]);
    assert_eq!(verb.params["namespace"].kind.describe(), "enum(web)");
    let roles: Vec<&verbd::policy::Role> = vec![&p.roles["other"]];
    let args =
        |ns: &str| verbd::policy::text_args(&[("namespace".to_string(), ns.to_string())].into());
    match p.evaluate(&roles, "pods", &args("web")) {
        verbd::policy::Verdict::Run(call) => {
            assert_eq!(
                call.display_argv(),
                ["/opt/k/kubectl", "get", "pods", "-n", "web"]
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p.evaluate(&roles, "pods", &args("kube-system")),
        verbd::policy::Verdict::Refuse(verbd::policy::Refusal::Invalid(ref r)) if r.rule == "enum"
    ));
    // The pack is protected like the policy file, and its text is part of the policy hash.
    let pack = std::fs::canonicalize(dir.path().join("pack.toml")).unwrap();
    assert!(p.protected.match_path(&pack).is_some());
    let before = p.hash.clone();
    std::fs::write(&pack, SMALL_PACK.replace("get pods", "get pods -o wide")).unwrap();
    assert_ne!(verbd::policy::load_file(&policy).unwrap().hash, before);
    // Typos fail closed.
    for (include, needle) in [
        (
            "{ path = \"pack.toml\", values = { namespce = [\"web\"] } }",
            "values.namespce: no verb of",
        ),
        (
            "{ path = \"pack.toml\", verbs = [\"podz\"] }",
            "has no verb `podz`",
        ),
        (
            "{ path = \"pack.toml\", programs = { kubect = \"/x/kubect\" } }",
            "programs.kubect: no verb of",
        ),
        ("\"missing.toml\"", "include"),
        ("\"pack.toml\", \"pack.toml\"", "is included twice"),
    ] {
        let policy = policy_with_pack(dir.path(), SMALL_PACK, include);
        let (code, err) = check(&policy);
        assert_eq!(code, Some(1), "{include}");
        assert!(err.contains(needle), "{include}: {err}");
    }
    // A verb defined twice is an error, not a silent override.
    let policy = policy_with_pack(dir.path(), SMALL_PACK, "\"pack.toml\"");
    let text = std::fs::read_to_string(&policy).unwrap()
        + "[verb.pods]\ncategory = \"read-only\"\nroles = [\"agent\"]\ncommand = \"/usr/bin/id\"\n";
    std::fs::write(&policy, text).unwrap();
    let (code, err) = check(&policy);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("verb `pods` of") && err.contains("is also defined by the policy"),
        "{err}"
    );
}

#[test]
fn selftest_passes_for_every_pack_except_programs_missing_here() {
    if !require_root("self-test of the packs (sandbox canaries, root-owned secrets)") {
        return;
    }
    let dir = common::open_tempdir();
    let root = std::env::current_dir().unwrap().join("policy/packs");
    let mut includes = Vec::new();
    for pack in [
        "systemd",
        "journald",
        "kubectl",
        "postgresql",
        "nginx",
        "network",
        "host",
        "helm",
    ] {
        includes.push(format!("\"{}/{pack}.toml\"", root.display()));
    }
    // Programs this host keeps elsewhere than the packs' Debian paths.
    let mut programs = Vec::new();
    for (name, here) in [
        ("git", "/usr/local/bin/git"),
        ("docker", "/usr/local/bin/docker"),
    ] {
        if Path::new(here).exists() && !Path::new(&format!("/usr/bin/{name}")).exists() {
            programs.push(format!("{name} = \"{here}\""));
        }
    }
    let with_programs = |pack: &str, prog: &str| {
        let chosen: Vec<&String> = programs.iter().filter(|p| p.starts_with(prog)).collect();
        if chosen.is_empty() {
            format!("\"{}/{pack}.toml\"", root.display())
        } else {
            format!(
                "{{ path = \"{}/{pack}.toml\", programs = {{ {} }} }}",
                root.display(),
                chosen[0]
            )
        }
    };
    includes.push(with_programs("git", "git"));
    includes.push(with_programs("containers", "docker"));
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    for name in ["kubeconfig", "pg_password"] {
        let path = secrets.join(name);
        std::fs::write(&path, "placeholder-secret-value-1234567890").unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    let policy = write(
        dir.path(),
        "policy.toml",
        &format!(
            "version = 1\ninclude = [{}]\n[roles.agent]\nuids = [61000]\n[roles.sre]\nkind = \"human\"\nuids = [0]\n[approvals]\napprovers = [\"sre\"]\n[secrets.kubeconfig]\nfile = \"{}\"\n[secrets.pg_password]\nfile = \"{}\"\n",
            includes.join(", "),
            secrets.join("kubeconfig").display(),
            secrets.join("pg_password").display()
        ),
    );
    let out = verbd(&["selftest", "--policy", policy.to_str().unwrap(), "--json"]);
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    let p = verbd::policy::load_file(&policy).unwrap();
    let mut missing = std::collections::BTreeSet::new();
    for verb in p.verbs.values() {
        if let verbd::policy::VerbAction::Command { template, .. } = &verb.action
            && !template.program().exists()
        {
            missing.insert(format!("binary:{}", verb.name));
        }
    }
    let mut passed = 0;
    for check in report["checks"].as_array().unwrap() {
        let name = check["name"].as_str().unwrap();
        if check["passed"] == true {
            passed += 1;
            continue;
        }
        assert!(
            missing.contains(name) && check["detail"].as_str().unwrap().contains("No such file"),
            "{name} failed: {check}"
        );
    }
    for name in &missing {
        eprintln!("not installed on this host, so not self-tested: {name}");
    }
    let checks = report["checks"].as_array().unwrap().len();
    assert_eq!(passed + missing.len(), checks);
    assert!(passed > 150, "{passed} checks passed");
    // Every verb with examples was checked, and every sandbox canary ran.
    for name in [
        "examples:journal-unit",
        "examples:http-health",
        "examples:pg-local-query",
    ] {
        assert!(report["checks"].to_string().contains(name), "{name}");
    }
}

#[test]
fn schema_completions_and_man_pages_are_generated_from_the_code() {
    let out = verbd(&["policy", "schema"]);
    assert_eq!(out.status.code(), Some(0));
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(schema["$defs"].is_object());
    // Every top-level table of the example policy is in the schema, and unknown keys are not.
    let example: toml::Table = std::fs::read_to_string("policy/example.toml")
        .unwrap()
        .parse()
        .unwrap();
    for key in example.keys() {
        assert!(
            schema["properties"].get(key).is_some(),
            "{key} missing from the schema"
        );
    }
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["$defs"]["RawVerb"]["additionalProperties"], false);
    let pack: Value =
        serde_json::from_slice(&verbd(&["policy", "schema", "--pack"]).stdout).unwrap();
    assert!(pack["properties"]["verb"].is_object() && pack["properties"].get("roles").is_none());

    for shell in ["bash", "zsh", "fish"] {
        let out = verbd(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains("coverage") && script.contains("suggest"),
            "{shell}: {script}"
        );
    }
    assert_ne!(verbd(&["completions", "tcsh"]).status.code(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let out = verbd(&["man", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let man1 = dir.path().join("man1");
    let page = std::fs::read_to_string(man1.join("verbd-policy-coverage.1")).unwrap();
    assert!(page.starts_with(".ie") || page.contains(".TH"), "{page}");
    assert!(page.contains("destructive or credential"), "{page}");
    assert!(man1.join("verbd.1").exists());
    assert!(!man1.join("verbd-__sandbox-canary.1").exists());
    assert!(!man1.join("verbd-policy-help.1").exists());
}

#[test]
fn a_glob_reads_every_matching_file_and_the_text_report_groups_by_program() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(
        dir.path(),
        "p.toml",
        r#"version = 1
[roles.agent]
uids = [61000]
[verb.status]
description = "unit status"
category = "read-only"
roles = ["agent"]
command = "/usr/bin/systemctl status {unit} --no-pager"
params.unit = { type = "systemd-unit" }
"#,
    );
    write(
        dir.path(),
        "a.history",
        "systemctl status nginx.service --no-pager\ncurl -s http://x/\n",
    );
    write(
        dir.path(),
        "b.history",
        "systemctl status nginx.service --no-pager --full\ncurl -s http://y/\nwget http://z/\n",
    );
    write(
        dir.path(),
        "c.txt",
        "systemctl status sshd.service --no-pager\n",
    );
    let glob = format!("{}/*.history", dir.path().display());
    let (code, report) = coverage_json(policy.to_str().unwrap(), &[&glob]);
    assert_eq!(code, Some(0), "{report}");
    // Both .history files and nothing else (c.txt does not match the glob).
    let sources: std::collections::BTreeSet<&str> = report["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["source"].as_str().unwrap().rsplit_once(':').unwrap().0)
        .collect();
    let names: Vec<&str> = sources
        .iter()
        .map(|s| s.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(names, ["a.history", "b.history"], "{report:#}");
    assert_eq!(report["summary"]["commands"], 5);
    assert_eq!(report["summary"]["covered"], 1);
    // An uncovered call of a verb's program names the closest verb and the element that differs.
    let full = command(&report, "systemctl status nginx.service --no-pager --full");
    assert_eq!(full["status"], "uncovered");
    let reason = full["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("closest verb `status`: ") && reason.contains("--full"),
        "{reason}"
    );
    assert_eq!(
        command(&report, "wget http://z/")["reason"],
        "no verb runs `wget`"
    );

    // The text report: the percentage, then the uncovered commands grouped by program, the
    // largest group first, each command with its reason.
    let out = verbd(&[
        "policy",
        "coverage",
        policy.to_str().unwrap(),
        "--from",
        &glob,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(
        printed.starts_with("coverage: 1/5 commands covered (20.0 %)"),
        "{printed}"
    );
    let groups = printed
        .split_once("uncovered, by program:\n")
        .unwrap_or_else(|| panic!("{printed}"))
        .1;
    let headers: Vec<&str> = groups
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .map(str::trim)
        .collect();
    assert_eq!(
        headers,
        ["curl (2)", "systemctl (1)", "wget (1)"],
        "{printed}"
    );
    assert!(
        groups.contains("    curl -s http://x/\n      no verb runs `curl`"),
        "{printed}"
    );
}

/// Each parameter of a pack that can be narrowed (a bool flag in none of its verbs) with the
/// values a test narrows it to: the values the pack's
/// verbs default it to (a narrowing must keep a default), else the first value an accept example
/// gives it (so the pack's other examples fall outside), else its first enum value, else "x".
fn narrowing_values(pack: &toml::Table) -> std::collections::BTreeMap<String, Vec<String>> {
    use std::collections::BTreeMap;
    let text = |v: &toml::Value| match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut defaults: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut examples: BTreeMap<String, String> = BTreeMap::new();
    let mut enums: BTreeMap<String, String> = BTreeMap::new();
    let mut flags = std::collections::BTreeSet::new();
    for verb in pack["verb"].as_table().unwrap().values() {
        let Some(params) = verb.get("params").and_then(|p| p.as_table()) else {
            continue;
        };
        for (name, param) in params {
            if param["type"].as_str() == Some("bool") {
                flags.insert(name.clone());
                continue;
            }
            let entry = defaults.entry(name.clone()).or_default();
            if let Some(default) = param.get("default").map(text)
                && !entry.contains(&default)
            {
                entry.push(default);
            }
            if let Some(first) = param
                .get("values")
                .and_then(|v| v.as_array())
                .and_then(|v| v.first())
            {
                enums.entry(name.clone()).or_insert_with(|| text(first));
            }
        }
        let accepted = verb
            .get("examples")
            .and_then(|e| e.get("accept"))
            .and_then(|a| a.as_array());
        for example in accepted.into_iter().flatten() {
            for (name, value) in example.as_table().unwrap() {
                examples.entry(name.clone()).or_insert_with(|| text(value));
            }
        }
    }
    defaults
        .into_iter()
        .filter(|(name, _)| !flags.contains(name))
        .map(|(name, values)| {
            let values = if values.is_empty() {
                vec![
                    examples
                        .get(&name)
                        .or(enums.get(&name))
                        .cloned()
                        .unwrap_or_else(|| "x".into()),
                ]
            } else {
                values
            };
            (name, values)
        })
        .collect()
}

/// `policy check` and `selftest` on a policy that includes `pack` narrowed by `values`: the exit
/// status of the first, and whether the second passed every check of the policy itself
/// (examples, hostile values, accounts, file roots; programs missing on this host aside).
fn check_and_selftest(
    dir: &Path,
    pack: &Path,
    values: &[(String, Vec<String>)],
) -> (Option<i32>, bool, String) {
    let values = values
        .iter()
        .map(|(name, values)| format!("{name} = {}", toml::Value::from(values.clone())))
        .collect::<Vec<_>>()
        .join(", ");
    let policy = write(
        dir,
        "narrowed.toml",
        &format!(
            "version = 1\ninclude = [{{ path = \"{}\", values = {{ {values} }} }}]\n[roles.agent]\nuids = [61000]\n[roles.sre]\nkind = \"human\"\nuids = [0]\n[approvals]\napprovers = [\"sre\"]\n[secrets.kubeconfig]\nfile = \"{1}/kubeconfig\"\n[secrets.pg_password]\nfile = \"{1}/pg_password\"\n",
            pack.display(),
            dir.display()
        ),
    );
    let check = verbd(&["policy", "check", policy.to_str().unwrap()]);
    let selftest = verbd(&["selftest", "--json", "--policy", policy.to_str().unwrap()]);
    // A policy that does not compile gives no report: nothing of it passed.
    let report: Value = serde_json::from_slice(&selftest.stdout).unwrap_or_else(|_| {
        assert_eq!(selftest.status.code(), Some(1), "{}", text(&selftest));
        serde_json::json!({ "checks": [{ "name": "accounts", "passed": false }] })
    });
    let policy_checks_passed = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            let name = c["name"].as_str().unwrap();
            ["examples:", "validator:", "file-roots:", "accounts"]
                .iter()
                .any(|prefix| name.starts_with(prefix))
        })
        .all(|c| c["passed"] == true);
    (
        check.status.code(),
        policy_checks_passed,
        format!("policy check: {}\nselftest: {report:#}", text(&check)),
    )
}

#[test]
fn every_pack_narrowed_as_its_header_says_passes_policy_check_and_selftest_alike() {
    if !require_root("self-test of narrowed packs (root-owned secrets)") {
        return;
    }
    let dir = common::open_tempdir();
    for name in ["kubeconfig", "pg_password"] {
        let path = write(dir.path(), name, "placeholder-secret-value-1234567890");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }
    let root = std::env::current_dir().unwrap().join("policy/packs");
    let mut runs = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let pack = entry.unwrap().path();
        if pack.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let table: toml::Table = std::fs::read_to_string(&pack).unwrap().parse().unwrap();
        let narrowing: Vec<(String, Vec<String>)> = narrowing_values(&table).into_iter().collect();
        // Every parameter at once, then each parameter that an example names on its own.
        let in_examples = std::fs::read_to_string(&pack).unwrap();
        let mut cases = vec![narrowing.clone()];
        for (name, values) in &narrowing {
            if in_examples.contains(&format!("{{ {name} = "))
                || in_examples.contains(&format!(", {name} = "))
            {
                cases.push(vec![(name.clone(), values.clone())]);
            }
        }
        for case in cases {
            runs += 1;
            let (code, selftest_passed, shown) = check_and_selftest(dir.path(), &pack, &case);
            assert_eq!(
                code == Some(0),
                selftest_passed,
                "{} narrowed by {case:?}: policy check and selftest disagree\n{shown}",
                pack.display()
            );
            assert_eq!(
                code,
                Some(0),
                "{} narrowed by {case:?} must pass\n{shown}",
                pack.display()
            );
        }
    }
    assert!(runs >= 30, "{runs} narrowings checked");
    // The issue's own example: the systemd pack narrowed to nginx.service. The example naming
    // postgresql must now be refused, and an allowed one is still rendered.
    let systemd = root.join("systemd.toml");
    let only_nginx = vec![("unit".to_string(), vec!["nginx.service".to_string()])];
    let (code, passed, shown) = check_and_selftest(dir.path(), &systemd, &only_nginx);
    assert_eq!((code, passed), (Some(0), true), "{shown}");
    assert!(
        shown.contains("\"name\": \"examples:unit-status\"")
            && shown.contains("5 example(s) behave"),
        "{shown}"
    );
    // An example that genuinely contradicts the narrowing: allowing `--all` as a unit, which the
    // pack's example says must be refused. Both fail, and policy check says where.
    let dashed = vec![("unit".to_string(), vec!["--all".to_string()])];
    let (code, passed, shown) = check_and_selftest(dir.path(), &systemd, &dashed);
    assert_eq!((code, passed), (Some(1), false), "{shown}");
    assert!(
        shown.contains(&format!(
            "{}:13:1: examples:unit-status:",
            systemd.display()
        )),
        "{shown}"
    );
}

#[test]
fn policy_check_reports_an_example_that_contradicts_its_verb_where_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(
        dir.path(),
        "p.toml",
        "version = 1\n[roles.agent]\nuids = [61000]\n\n[verb.word]\ndescription = \"d\"\ncategory = \"read-only\"\nroles = [\"agent\"]\ncommand = \"/bin/echo {w}\"\nparams.w = { type = \"string\", pattern = \"[a-z]+\" }\nexamples.accept = [{ w = \"UPPER\" }]\n",
    );
    let out = verbd(&["policy", "check", policy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "{}:5:1: examples:word: accept example {{\"w\": \"UPPER\"}} was refused",
            policy.display()
        )),
        "{}",
        text(&out)
    );
}
