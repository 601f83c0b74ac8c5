//! The notifier recipes of policy/notifiers/ run as written (only the endpoint, the secret
//! files and the verbd binary's path substituted) in a real `verbd serve`, against local
//! endpoints: real curl to a real local HTTP listener (ntfy, Slack-compatible webhook), real
//! curl over smtp:// to a local SMTP listener (email), a notify-send stand-in (desktop). Each message names
//! the proposal, the verb, the arguments and the hash, and its approve command, run as written
//! by the approver, approves the proposal.
//!
//! The attacks: an agent writes arguments meant to forge a second approve line or a Slack
//! mention/link, or to carry file content or a dry run's output (which printed a secret) to a
//! third-party service; the notifier process tries to read what its sandbox does not grant.
use crate::common;
use common::harness::write_secret;
use common::policy::{Category, Param, ParamType, Policy, Secret, Verb};
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

const AGENT: u32 = 61401;
const ONCALL: u32 = 61402;
const SECRET: &str = "tok-Secret-Value-7777-nq";
const CONTENT_MARK: &str = "FILE-CONTENT-MARK-c0ffee";
const DRY_RUN_MARK: &str = "DRY-RUN-OUTPUT-MARK-b33f";
const HOST: &str = "web1.example";

fn base_policy() -> Policy {
    let free_text = |max_length| Param::matching(".*").max_length(max_length);
    Policy::new()
        .allow_root()
        .shutdown_grace("1s")
        .agents("agent", &[AGENT])
        .humans("oncall", &[ONCALL])
        .humans("me", &[ONCALL])
        .secret("tok", Secret::File("@DIR@/tok".into()))
        .verb(
            "restart",
            Verb::command(Category::Mutating, "/bin/echo restarted {unit}")
                .description("restart a unit")
                .roles(&["agent"])
                .param("unit", Param::of(ParamType::SystemdUnit)),
        )
        .verb(
            "say",
            Verb::command(Category::Mutating, "/bin/echo {message}")
                .description("post a message somewhere")
                .roles(&["agent"])
                .param("message", free_text(200)),
        )
        .verb(
            "purge",
            Verb::command(Category::Mutating, "/bin/echo purge {path} {note}")
                .description("purge a cache")
                .roles(&["agent"])
                .param("path", free_text(120))
                .param("note", free_text(120)),
        )
        .verb(
            "note",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/notes"])
                .description("write a note")
                .roles(&["agent"]),
        )
        .verb(
            "drop",
            Verb::command(Category::Destructive, "/bin/echo dropping {name}")
                .description("drop a thing (dry run first)")
                .roles(&["agent"])
                .dry_run_argv(&[
                    "/usr/bin/printf",
                    &format!("would drop %s using %s {DRY_RUN_MARK}\n"),
                    "{name}",
                    "${secret:tok}",
                ])
                .param("name", Param::of(ParamType::K8sName)),
        )
}

/// A recipe file from policy/notifiers/, as an operator pastes it, with only what must differ on
/// a test machine substituted: the verbd binary (and its directory as a read root: the recipe
/// names /usr/bin/verbd, under /usr), the endpoint, the secret files, the host name.
fn recipe(name: &str, substitutions: &[(&str, String)]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("policy/notifiers")
        .join(format!("{name}.toml"));
    let mut text = std::fs::read_to_string(&path).expect("recipe file");
    let bin_dir = Path::new(BIN).parent().unwrap().display().to_string();
    let notify_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("notify = "))
            .expect("recipe has a notify line")
            .to_string()
    };
    let original = notify_line(&text);
    text = text.replace("/usr/bin/verbd", BIN);
    text = text.replace(
        "read = [\"/usr\",",
        &format!("read = [\"/usr\", \"{bin_dir}\","),
    );
    for (from, to) in substitutions {
        assert!(text.contains(from), "{name}.toml has no {from:?}");
        text = text.replace(from, to);
    }
    // The notifier command itself changed only where the list above says.
    let mut expected = original.replace("/usr/bin/verbd", BIN);
    for (from, to) in substitutions {
        expected = expected.replace(from, to);
    }
    assert_eq!(notify_line(&text), expected);
    let host = format!(" --host {HOST}\"");
    let line = notify_line(&text);
    text.replace(&line, &(line.trim_end_matches('"').to_string() + &host))
}

/// The base policy with the recipe's tables after it, as an operator pastes a recipe.
fn start(recipe_text: &str, setup: impl FnOnce(&Path)) -> Daemon {
    let policy = format!("{}\n{recipe_text}", base_policy().render());
    let d = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir(dir.join("notes")).unwrap();
        write_secret(&dir.join("tok"), SECRET);
        setup(dir);
    });
    d.open_socket();
    d
}

/// The ntfy recipe publishing to the local listener on `port`, with its token.
fn start_ntfy(port: u16) -> Daemon {
    let recipe_text = recipe(
        "ntfy",
        &[
            (
                "https://ntfy.example.com",
                format!("http://127.0.0.1:{port}"),
            ),
            ("/etc/verbd/secrets/ntfy_token", "@DIR@/ntfy_token".into()),
        ],
    );
    start(&recipe_text, |dir| {
        write_secret(&dir.join("ntfy_token"), "tk_test0123456789abcdef")
    })
}

/// Proposes as the agent; returns (id, full hash).
fn propose(d: &Daemon, verb: &str, args: &[&str]) -> (u64, String) {
    let mut argv = vec![verb];
    argv.extend_from_slice(args);
    let proposed = d.propose_as(AGENT, &argv);
    (proposed.id, proposed.hash)
}

/// The `approve:` line of a message, run word for word by the approver (verbd's path aside).
fn run_approve_line(d: &Daemon, body: &str, id: u64, hash: &str) {
    let lines: Vec<&str> = body.lines().filter(|l| l.starts_with("approve:")).collect();
    assert_eq!(lines.len(), 1, "one approve line: {body}");
    let command = lines[0].trim_start_matches("approve:").trim();
    assert_eq!(
        command,
        format!("verbd approve {id} --hash {}", &hash[..16])
    );
    let words = shell_words::split(command).unwrap();
    assert_eq!(words[0], "verbd");
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let out = d.cli_as(ONCALL, &args);
    assert!(out.status.success(), "{out:?}");
    let events = d.journal_events();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "proposal_approved" && e["id"] == id && e["by"]["uid"] == ONCALL),
        "approved by the approver"
    );
}

fn assert_common_message(body: &str, id: u64, hash: &str, verb: &str, args: &str) {
    for line in [
        format!("proposal:  {id} on {HOST}"),
        format!("verb:      {verb} (mutating)"),
        format!("requester: uid {AGENT}"),
        format!("args:      {args}"),
        format!("hash:      {}", &hash[..16]),
        format!("approve:   verbd approve {id} --hash {}", &hash[..16]),
    ] {
        assert!(
            body.lines().any(|l| l.starts_with(&line)),
            "{line:?} missing from:\n{body}"
        );
    }
}

/// No secret, no file content, no dry-run output in what left the host.
fn assert_no_data(sent: &str) {
    for (mark, what) in [
        (SECRET, "a secret"),
        (CONTENT_MARK, "file content"),
        (DRY_RUN_MARK, "dry-run output"),
    ] {
        assert!(!sent.contains(mark), "{what} was sent: {sent}");
    }
}

/// One HTTP request as a real local listener received it.
#[derive(Debug)]
struct HttpRequest {
    request_line: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A real HTTP/1.1 listener on 127.0.0.1 answering 200 to every request.
fn http_listener() -> (u16, mpsc::Receiver<HttpRequest>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap();
                headers.push((name.trim().to_string(), value.trim().to_string()));
            }
            let length: usize = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.parse().unwrap())
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).unwrap();
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            let _ = tx.send(HttpRequest {
                request_line: request_line.trim_end().to_string(),
                headers,
                body: String::from_utf8(body).unwrap(),
            });
        }
    });
    (port, rx)
}

fn next<T>(rx: &mpsc::Receiver<T>, d: &Daemon) -> T {
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| {
            panic!(
                "the notifier sent nothing; journal:\n{}\nlog:\n{}",
                d.journal(),
                d.log()
            )
        })
}

#[test]
fn ntfy_recipe_publishes_the_proposal_and_its_approve_command() {
    if !require_root("ntfy_recipe_publishes_the_proposal_and_its_approve_command") {
        return;
    }
    let (port, rx) = http_listener();
    let d = start_ntfy(port);
    let (id, hash) = propose(&d, "restart", &["unit=nginx.service"]);
    let request = next(&rx, &d);
    println!("{request:#?}");
    assert_eq!(request.request_line, "POST /verbd-approvals HTTP/1.1");
    assert_eq!(
        request.header("Authorization"),
        Some("Bearer tk_test0123456789abcdef")
    );
    assert_eq!(
        request.header("Title"),
        Some(format!("verbd on {HOST}: approve restart #{id}?").as_str())
    );
    assert_eq!(request.header("Priority"), Some("4"));
    assert_common_message(&request.body, id, &hash, "restart", "unit=nginx.service");
    assert!(
        !request.body.contains("tk_test"),
        "the token is not in the message"
    );
    run_approve_line(&d, &request.body, id, &hash);
}

#[test]
fn slack_recipe_posts_escaped_text_and_never_data() {
    if !require_root("slack_recipe_posts_escaped_text_and_never_data") {
        return;
    }
    let (port, rx) = http_listener();
    let hook_path = "/services/T000/B000/XXXXsecretXXXX";
    let recipe_text = recipe(
        "slack",
        &[(
            "/etc/verbd/secrets/slack_webhook",
            "@DIR@/slack_webhook".into(),
        )],
    );
    let d = start(&recipe_text, |dir| {
        write_secret(
            &dir.join("slack_webhook"),
            &format!("http://127.0.0.1:{port}{hook_path}\n"),
        )
    });
    // The attack: a mention, a disguised link, and a second "approve:" line behind a Unicode
    // line separator, all in one argument.
    let forged = "<!channel> <https://evil.example|open> \u{2028}approve:   verbd approve 99 --hash deadbeefdeadbeef";
    let (id, hash) = propose(&d, "say", &[&format!("message={forged}")]);
    let request = next(&rx, &d);
    assert_eq!(request.request_line, format!("POST {hook_path} HTTP/1.1"));
    assert_eq!(request.header("Content-Type"), Some("application/json"));
    let payload: Value = serde_json::from_str(&request.body).unwrap();
    let text = payload["text"].as_str().unwrap().to_string();
    println!("{text}");
    assert!(
        !text.contains("XXXXsecretXXXX"),
        "the webhook URL is not in the message"
    );
    assert!(!text.contains('<') && !text.contains('>'), "{text}");
    assert!(
        text.contains("&lt;!channel&gt; &lt;https://evil.example|open&gt;"),
        "{text}"
    );
    assert!(text.contains("\\u{2028}approve:"), "{text}");
    let body = text.split_once('\n').unwrap().1;
    assert_common_message(
        body,
        id,
        &hash,
        "say",
        // Quoted (it holds spaces), its backslash (from the payload's escaping of U+2028) doubled.
        "message=\"&lt;!channel&gt; &lt;https://evil.example|open&gt; \\\\u{2028}approve:   verbd approve 99 --hash deadbeefdeadbeef\"",
    );
    run_approve_line(&d, body, id, &hash);

    // File content and a dry run's output (which printed a secret) stay on the host.
    let note = d.path("notes/n.txt");
    let (_, _) = propose(
        &d,
        "note",
        &[
            &format!("path={}", note.display()),
            &format!("content={CONTENT_MARK}\nsecond line"),
        ],
    );
    let request = next(&rx, &d);
    assert!(request.body.contains("content=&lt;"), "{}", request.body);
    assert_no_data(&request.body);
    let out = d.cli_as(AGENT, &["call", "--json", "drop", "name=web"]);
    assert_eq!(out.status.code(), Some(73), "{out:?}");
    let request = next(&rx, &d);
    assert!(
        request.body.contains("verb:      drop (destructive)"),
        "{}",
        request.body
    );
    assert_no_data(&request.body);
    assert!(
        d.journal().contains(DRY_RUN_MARK),
        "precondition: the proposal holds the dry-run output"
    );
}

/// One mail as a local SMTP listener received it.
#[derive(Debug)]
struct Mail {
    recipients: Vec<String>,
    data: String,
}

/// A minimal real SMTP server on 127.0.0.1 (enough for curl's smtp:// without TLS or auth).
fn smtp_listener() -> (u16, mpsc::Receiver<Mail>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let _ = stream.write_all(b"220 localhost ESMTP test\r\n");
            let mut recipients = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
                let reply: &[u8] = match verb.as_str() {
                    "EHLO" => b"250-localhost\r\n250 8BITMIME\r\n",
                    "HELO" | "MAIL" | "RSET" | "NOOP" => b"250 ok\r\n",
                    "RCPT" => {
                        recipients.push(line.trim_end().to_string());
                        b"250 ok\r\n"
                    }
                    "DATA" => {
                        let _ = stream.write_all(b"354 go ahead\r\n");
                        let mut data = String::new();
                        loop {
                            let mut line = String::new();
                            reader.read_line(&mut line).unwrap();
                            if line == ".\r\n" {
                                break;
                            }
                            data.push_str(&line);
                        }
                        let _ = tx.send(Mail {
                            recipients: std::mem::take(&mut recipients),
                            data,
                        });
                        b"250 queued\r\n"
                    }
                    "QUIT" => {
                        let _ = stream.write_all(b"221 bye\r\n");
                        break;
                    }
                    _ => b"502 unknown\r\n",
                };
                let _ = stream.write_all(reply);
            }
        }
    });
    (port, rx)
}

#[test]
fn email_recipe_sends_over_smtp_with_curl() {
    if !require_root("email_recipe_sends_over_smtp_with_curl") {
        return;
    }
    let (port, rx) = smtp_listener();
    let recipe_text = recipe("email", &[("/etc/verbd/secrets/smtp", "@DIR@/smtp".into())]);
    let d = start(&recipe_text, |dir| {
        write_secret(
            &dir.join("smtp"),
            &format!("url = \"smtp://127.0.0.1:{port}\"\nuser = \"verbd:smtp-Password-31337\"\n"),
        )
    });
    let (id, hash) = propose(&d, "restart", &["unit=nginx.service"]);
    let mail = next(&rx, &d);
    println!("{}", mail.data);
    assert_eq!(mail.recipients, ["RCPT TO:<oncall@example.com>"]);
    let (headers, body) = mail.data.split_once("\r\n\r\n").unwrap();
    for header in [
        "From: verbd@example.com\r\n".to_string(),
        "To: oncall@example.com\r\n".to_string(),
        format!("Subject: verbd on {HOST}: approve restart #{id}?\r\n"),
        "Content-Type: text/plain; charset=utf-8\r\n".to_string(),
    ] {
        assert!(headers.contains(&header), "{header:?} not in {headers}");
    }
    assert!(headers.starts_with("Date: "), "{headers}");
    assert!(
        !mail.data.contains("smtp-Password"),
        "the relay password is not in the mail"
    );
    let body = body.replace("\r\n", "\n");
    assert_common_message(&body, id, &hash, "restart", "unit=nginx.service");
    run_approve_line(&d, &body, id, &hash);
}

#[test]
fn email_through_a_sendmail_program_gets_recipients_as_arguments_and_the_mail_on_stdin() {
    if !require_root(
        "email_through_a_sendmail_program_gets_recipients_as_arguments_and_the_mail_on_stdin",
    ) {
        return;
    }
    // docs/fleet.md's sendmail variant of the recipe, with a sendmail stand-in that records its
    // argv and stdin.
    let tools = open_tempdir();
    let stand_in = tools.path().join("sendmail");
    let out_dir = open_tempdir();
    let out = out_dir.path().join("sendmail.out");
    std::fs::write(&out, "").unwrap();
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/bash\n{{ printf 'arg:%s\\n' \"$@\"; echo stdin:; cat; }} > {}\n",
            out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let recipe_text = recipe(
        "email",
        &[
            (
                "--smtp-config ${secret_file:smtp}",
                format!("--sendmail {}", stand_in.display()),
            ),
            ("/etc/verbd/secrets/smtp", "@DIR@/smtp".into()),
            (
                "write = []",
                format!("write = [\"{}\"]", out_dir.path().display()),
            ),
            (
                "read = [\"/usr\",",
                format!("read = [\"/usr\", \"{}\",", tools.path().display()),
            ),
        ],
    );
    let d = start(&recipe_text, |dir| {
        write_secret(&dir.join("smtp"), "unused")
    });
    let (id, hash) = propose(&d, "restart", &["unit=nginx.service"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&out).is_ok_and(|t| t.contains("deny:")) {
        assert!(
            std::time::Instant::now() < deadline,
            "sendmail never ran; journal:\n{}",
            d.journal()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let recorded = std::fs::read_to_string(&out).unwrap();
    println!("{recorded}");
    let (args, mail) = recorded.split_once("stdin:\n").unwrap();
    assert_eq!(args, "arg:-i\narg:--\narg:oncall@example.com\n");
    assert!(mail.contains(&format!(
        "Subject: verbd on {HOST}: approve restart #{id}?\r\n"
    )));
    let body = mail.split_once("\r\n\r\n").unwrap().1.replace("\r\n", "\n");
    assert_common_message(&body, id, &hash, "restart", "unit=nginx.service");
    run_approve_line(&d, &body, id, &hash);
}

/// A daemon with the desktop recipe, its notify-send replaced by a stand-in that records its
/// argv and bus address, then tries what the recipe's sandbox must not allow: read the policy
/// (and with it the secrets' locations) and open a TCP connection to `probe_port`.
struct Desktop {
    d: Daemon,
    stand_in: std::path::PathBuf,
    out: std::path::PathBuf,
    _dirs: [tempfile::TempDir; 2],
}

fn desktop(probe_port: u16) -> Desktop {
    let tools = open_tempdir();
    let stand_in = tools.path().join("notify-send");
    // Write roots grant the entries that exist when the policy loads: the record file first.
    let out_dir = open_tempdir();
    let out = out_dir.path().join("notify-send.out");
    std::fs::write(&out, "").unwrap();
    let recipe_text = recipe(
        "desktop",
        &[
            (
                "verbd notify desktop",
                format!("verbd notify desktop --notify-send {}", stand_in.display()),
            ),
            (
                "write = []",
                format!("write = [\"{}\"]", out_dir.path().display()),
            ),
            (
                "read = [\"/usr\",",
                format!("read = [\"/usr\", \"{}\",", tools.path().display()),
            ),
        ],
    );
    let d = start(&recipe_text, |dir| {
        std::fs::write(
            &stand_in,
            format!(
                "#!/bin/bash\n{{ printf 'arg:%s\\n' \"$@\"; echo \"bus:$DBUS_SESSION_BUS_ADDRESS\"; \
                 if cat {policy} >/dev/null 2>&1; then echo policy:read; else echo policy:denied; fi; \
                 if (exec 3<>/dev/tcp/127.0.0.1/{probe_port}) 2>/dev/null; then echo tcp:open; else echo tcp:denied; fi; \
                 }} > {out}\n",
                policy = dir.join("policy.toml").display(),
                out = out.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &stand_in,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    });
    Desktop {
        d,
        stand_in,
        out,
        _dirs: [tools, out_dir],
    }
}

impl Desktop {
    /// What the stand-in recorded once notify-send ran: the whole record, its arguments, and
    /// the body (the rest of the record up to the probes: notify-send gets it as one argument).
    fn notification(&self) -> (String, Vec<String>, String) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&self.out).is_ok_and(|t| t.contains("tcp:")) {
            assert!(
                std::time::Instant::now() < deadline,
                "notify-send never ran; journal:\n{}",
                self.d.journal()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let recorded = std::fs::read_to_string(&self.out).unwrap();
        println!("{recorded}");
        let args: Vec<String> = recorded
            .lines()
            .filter_map(|l| l.strip_prefix("arg:"))
            .map(str::to_owned)
            .collect();
        let body = recorded
            .split_once(&format!("arg:{}\narg:", args[3]))
            .unwrap()
            .1
            .split("\nbus:")
            .next()
            .unwrap()
            .to_owned();
        (recorded, args, body)
    }
}

#[test]
fn desktop_recipe_calls_notify_send_in_a_sandbox_that_allows_only_that() {
    if !require_root("desktop_recipe_calls_notify_send_in_a_sandbox_that_allows_only_that") {
        return;
    }
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let desktop = desktop(probe.local_addr().unwrap().port());
    let d = &desktop.d;
    let (id, hash) = propose(d, "restart", &["unit=nginx.service"]);
    let (recorded, args, body) = desktop.notification();
    assert_eq!(&args[..3], ["--app-name=verbd", "--urgency=critical", "--"]);
    assert_eq!(args[3], format!("verbd on {HOST}: approve restart #{id}?"));
    let uid = nix::unistd::getuid().as_raw();
    assert!(recorded.contains(&format!("bus:unix:path=/run/user/{uid}/bus")));
    assert!(recorded.contains("policy:denied"), "{recorded}");
    assert!(recorded.contains("tcp:denied"), "{recorded}");
    assert_common_message(&body, id, &hash, "restart", "unit=nginx.service");
    run_approve_line(d, &body, id, &hash);
    // Positive control: the same stand-in outside the sandbox reads the policy and connects.
    let status = std::process::Command::new(&desktop.stand_in)
        .status()
        .unwrap();
    assert!(status.success());
    let unconfined = std::fs::read_to_string(&desktop.out).unwrap();
    assert!(unconfined.contains("policy:read"), "{unconfined}");
    assert!(unconfined.contains("tcp:open"), "{unconfined}");
    drop(probe);
}

/// An argument written as markup for the notification server (notify-send bodies are Pango or
/// HTML-like markup for most of them): bold text, a link labelled "approve" to the attacker's
/// page, an image that would be fetched (and could cover the text), an entity. notify-send gets
/// no `<` or `>` and no `&` but the five escapes, so the approver reads the argument as the
/// agent wrote it, character for character (quoted, its `"` escaped), and one approve line:
/// verbd's.
#[test]
fn an_argument_cannot_add_markup_to_a_desktop_notification() {
    if !require_root("an_argument_cannot_add_markup_to_a_desktop_notification") {
        return;
    }
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let desktop = desktop(probe.local_addr().unwrap().port());
    let d = &desktop.d;
    let markup = "<b>OK</b> <a href=\"https://evil.example/a\">approve</a><img src='https://evil.example/p.png'/> &amp; &lt;i&gt;";
    let (id, hash) = propose(d, "say", &[&format!("message={markup}")]);
    let (_, args, body) = desktop.notification();
    assert_eq!(args[3], format!("verbd on {HOST}: approve say #{id}?"));
    assert!(
        !body.contains(['<', '>']),
        "markup reached notify-send: {body}"
    );
    let entities = ["&lt;", "&gt;", "&amp;", "&quot;", "&#39;"];
    for (at, _) in body.match_indices('&') {
        assert!(
            entities.iter().any(|e| body[at..].starts_with(e)),
            "a bare `&` reached notify-send: {}",
            &body[at..]
        );
    }
    // What a markup-parsing server shows: the argument exactly as written.
    let shown = body
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    assert!(
        shown
            .lines()
            .any(|l| l == format!("args:      message=\"{}\"", markup.replace('"', "\\\""))),
        "{shown}"
    );
    assert_eq!(
        shown.lines().filter(|l| l.contains("approve")).count(),
        2,
        "the argument's line and verbd's approve line: {shown}"
    );
    run_approve_line(d, &body, id, &hash);
    drop(probe);
}

#[test]
fn a_notifier_template_is_checked_at_load() {
    for (notify, extra, expected) in [
        (
            "/bin/true {verb}",
            "",
            "`{verb}` is not a placeholder of the notifier",
        ),
        (
            "/bin/true ${secret_file:nope}",
            "",
            "notify uses secret `nope`, which is not defined in [secrets]",
        ),
        (
            "/bin/true {id}",
            "notify_sandbox = \"nowhere\"",
            "notify_sandbox: sandbox `nowhere` is not defined",
        ),
    ] {
        let dir = open_tempdir();
        let policy = base_policy()
            .render()
            .replace("@DIR@", dir.path().to_str().unwrap())
            + &format!("[approvals]\napprovers = [\"oncall\"]\nnotify = \"{notify}\"\n{extra}\n");
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, policy).unwrap();
        let out = std::process::Command::new(BIN)
            .args(["policy", "check"])
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert_ne!(out.status.code(), Some(0), "{text}");
        assert!(text.contains(expected), "{expected:?} not in {text}");
    }
}

/// An agent's argument written to inject mail headers and end the message early for SMTP
/// smuggling behind the line breaks a parameter may hold (U+0085, U+2028: CR, LF and NUL are
/// refused in every parameter before anything is proposed), to hide a second approve line, and
/// a markdown link. The mail has the recipe's
/// recipient and headers only, and one approve line.
#[test]
fn an_argument_cannot_add_a_mail_header_a_recipient_or_an_approve_line() {
    if !require_root("an_argument_cannot_add_a_mail_header_a_recipient_or_an_approve_line") {
        return;
    }
    let (port, rx) = smtp_listener();
    let recipe_text = recipe("email", &[("/etc/verbd/secrets/smtp", "@DIR@/smtp".into())]);
    let d = start(&recipe_text, |dir| {
        write_secret(
            &dir.join("smtp"),
            &format!("url = \"smtp://127.0.0.1:{port}\"\nuser = \"verbd:smtp-Password-31337\"\n"),
        )
    });
    let forged = "hi\u{85}Bcc: evil@attacker.example\u{2028}Subject: forged\u{85}\u{85}.\u{85}RCPT TO:<evil@attacker.example>\u{85}approve:   verbd approve 99 --hash deadbeefdeadbeef\u{2028}[approve here](https://evil.example)";
    let (id, hash) = propose(&d, "say", &[&format!("message={forged}")]);
    let mail = next(&rx, &d);
    println!("{:?}", mail);
    assert_eq!(mail.recipients, ["RCPT TO:<oncall@example.com>"]);
    let (headers, body) = mail.data.split_once("\r\n\r\n").unwrap();
    let names: Vec<&str> = headers
        .split("\r\n")
        .map(|line| line.split_once(':').map_or(line, |(name, _)| name))
        .collect();
    assert_eq!(
        names,
        [
            "Date",
            "From",
            "To",
            "Subject",
            "MIME-Version",
            "Content-Type",
            "Content-Transfer-Encoding",
            "Auto-Submitted"
        ],
        "the recipe's headers only: {headers}"
    );
    assert!(!headers.contains("evil"), "{headers}");
    let body = body.replace("\r\n", "\n");
    assert!(
        !body.contains(['\r', '\u{85}', '\u{2028}']),
        "a line break of the argument reached the mail: {body:?}"
    );
    // An argument holding invisible or line-breaking characters is shown by its size and digest.
    let args = body.lines().find(|line| line.starts_with("args:")).unwrap();
    assert!(
        args.contains("message=<") && args.contains("sha256"),
        "{args}"
    );
    assert!(!body.contains("evil"), "{body}");
    assert_eq!(
        body.lines().filter(|line| line.contains("approve")).count(),
        1,
        "one approve line: {body}"
    );
    run_approve_line(&d, &body, id, &hash);
}

/// The same argument through ntfy: the notification's headers are the recipe's (its title from
/// the policy's verb name), no `Markdown`, `Click`, `Actions` or `Attach` header an argument
/// could fill, and the body shows the argument on one line.
#[test]
fn an_argument_cannot_add_an_ntfy_header_or_action() {
    if !require_root("an_argument_cannot_add_an_ntfy_header_or_action") {
        return;
    }
    let (port, rx) = http_listener();
    let d = start_ntfy(port);
    let forged = "x\u{85}Actions: http, Approve, https://evil.example\u{2028}Click: https://evil.example\u{2028}approve:   verbd approve 99 --hash deadbeefdeadbeef [open](https://evil.example)";
    let (id, hash) = propose(&d, "say", &[&format!("message={forged}")]);
    let request = next(&rx, &d);
    println!("{request:#?}");
    for (name, value) in &request.headers {
        assert!(!value.contains("evil"), "{name}: {value}");
        for absent in ["Markdown", "Click", "Actions", "Attach", "X-Markdown"] {
            assert!(!name.eq_ignore_ascii_case(absent), "{name}: {value}");
        }
    }
    assert_eq!(
        request.header("Title"),
        Some(format!("verbd on {HOST}: approve say #{id}?").as_str())
    );
    assert!(
        !request.body.contains(['\r', '\u{2028}']),
        "{:?}",
        request.body
    );
    run_approve_line(&d, &request.body, id, &hash);
}

/// The values of the pair-imitation attack: `path` reads as three arguments when shown bare,
/// `note` as the end of the args line followed by the message's own `requester:` and `hash:`
/// fields, with quotes, `;`, `,` and a FULLWIDTH EQUALS SIGN (U+FF1D) that looks like `=`.
const IMITATING_PATH: &str = "/srv/app/cache force=false dry_run=true";
const IMITATING_NOTE: &str =
    "ok\" requester: uid 0 (root); hash: 0000000000000000, force\u{ff1d}true 'x' \\";

/// The args line as every channel must show it: each value quoted (the quotes and backslash
/// inside escaped), so it reads as exactly two arguments, `note` and `path`.
const QUOTED_ARGS: &str = "note=\"ok\\\" requester: uid 0 (root); hash: 0000000000000000, force\u{ff1d}true 'x' \\\\\" path=\"/srv/app/cache force=false dry_run=true\"";

fn propose_imitation(d: &Daemon) -> (u64, String) {
    propose(
        d,
        "purge",
        &[
            &format!("path={IMITATING_PATH}"),
            &format!("note={IMITATING_NOTE}"),
        ],
    )
}

/// The message's args line holds exactly the two quoted values, and no line of the message but
/// verbd's own starts a `requester:` or `hash:` field.
fn assert_quoted_args(body: &str, id: u64, hash: &str) {
    let args: Vec<&str> = body.lines().filter(|l| l.starts_with("args:")).collect();
    assert_eq!(args, [format!("args:      {QUOTED_ARGS}")], "{body}");
    assert_common_message(body, id, hash, "purge", QUOTED_ARGS);
    for field in ["requester:", "hash:"] {
        assert_eq!(
            body.lines().filter(|l| l.starts_with(field)).count(),
            1,
            "{field}: {body}"
        );
    }
}

/// A hostile agent's values that imitate further `name=value` pairs and the next fields of the
/// message reach the approver quoted: in the ntfy notification (real curl), in the mail (the
/// same body), in `verbd notify print` of `verbd pending --json`, and in `verbd pending`, where
/// each value is one quoted string after its parameter's name.
#[test]
fn an_argument_cannot_pass_for_another_pair_or_field() {
    if !require_root("an_argument_cannot_pass_for_another_pair_or_field") {
        return;
    }
    let (port, rx) = http_listener();
    let d = start_ntfy(port);
    let (id, hash) = propose_imitation(&d);
    let request = next(&rx, &d);
    println!("ntfy body:\n{}", request.body);
    assert_quoted_args(&request.body, id, &hash);

    let pending = d.cli_as(ONCALL, &["pending"]);
    assert!(pending.status.success(), "{pending:?}");
    let pending = String::from_utf8(pending.stdout).unwrap();
    println!("verbd pending:\n{pending}");
    let arg_lines: Vec<&str> = pending
        .lines()
        .filter(|l| l.starts_with("  arg "))
        .collect();
    assert_eq!(
        arg_lines,
        [
            "  arg note      \"ok\\\" requester: uid 0 (root); hash: 0000000000000000, force\u{ff1d}true 'x' \\\\\"",
            "  arg path      \"/srv/app/cache force=false dry_run=true\"",
        ],
        "{pending}"
    );

    // The same rendering from the approver's copy of the proposal (`verbd pending --json`).
    let json = d.cli_as(ONCALL, &["pending", "--json"]);
    let views: Value = serde_json::from_slice(&json.stdout).unwrap();
    let mut print = std::process::Command::new(BIN)
        .args(["notify", "print", "--host", HOST])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    print
        .stdin
        .take()
        .unwrap()
        .write_all(views[0].to_string().as_bytes())
        .unwrap();
    let printed = print.wait_with_output().unwrap();
    assert!(printed.status.success(), "{printed:?}");
    let printed = String::from_utf8(printed.stdout).unwrap();
    println!("verbd notify print:\n{printed}");
    assert_quoted_args(&printed, id, &hash);
    run_approve_line(&d, &request.body, id, &hash);
}

/// The same values through the desktop recipe: once a markup-parsing notification server has
/// turned the entities back, the approver reads the same quoted args line.
#[test]
fn an_argument_cannot_pass_for_another_pair_in_a_desktop_notification() {
    if !require_root("an_argument_cannot_pass_for_another_pair_in_a_desktop_notification") {
        return;
    }
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let desktop = desktop(probe.local_addr().unwrap().port());
    let d = &desktop.d;
    let (id, hash) = propose_imitation(d);
    let (_, _, body) = desktop.notification();
    let shown = body
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    assert_quoted_args(&shown, id, &hash);
    run_approve_line(d, &body, id, &hash);
    drop(probe);
}

/// The same values through the Slack recipe (the text of the JSON a real listener received)
/// and the email recipe over SMTP (the mail's body): the same quoted args line.
#[test]
fn an_argument_cannot_pass_for_another_pair_in_slack_or_mail() {
    if !require_root("an_argument_cannot_pass_for_another_pair_in_slack_or_mail") {
        return;
    }
    let (port, rx) = http_listener();
    let hook_path = "/services/T000/B000/XXXXsecretXXXX";
    let recipe_text = recipe(
        "slack",
        &[(
            "/etc/verbd/secrets/slack_webhook",
            "@DIR@/slack_webhook".into(),
        )],
    );
    let d = start(&recipe_text, |dir| {
        write_secret(
            &dir.join("slack_webhook"),
            &format!("http://127.0.0.1:{port}{hook_path}\n"),
        )
    });
    let (id, hash) = propose_imitation(&d);
    let request = next(&rx, &d);
    let payload: Value = serde_json::from_str(&request.body).unwrap();
    let text = payload["text"].as_str().unwrap();
    println!("slack text:\n{text}");
    let body = text.split_once('\n').unwrap().1;
    assert_quoted_args(body, id, &hash);
    run_approve_line(&d, body, id, &hash);
    drop(d);

    let (port, rx) = smtp_listener();
    let recipe_text = recipe("email", &[("/etc/verbd/secrets/smtp", "@DIR@/smtp".into())]);
    let d = start(&recipe_text, |dir| {
        write_secret(
            &dir.join("smtp"),
            &format!("url = \"smtp://127.0.0.1:{port}\"\nuser = \"verbd:smtp-Password-31337\"\n"),
        )
    });
    let (id, hash) = propose_imitation(&d);
    let mail = next(&rx, &d);
    let body = mail
        .data
        .split_once("\r\n\r\n")
        .unwrap()
        .1
        .replace("\r\n", "\n");
    println!("mail body:\n{body}");
    assert_quoted_args(&body, id, &hash);
    run_approve_line(&d, &body, id, &hash);
}
