//! `verbd notify …`: the approval notifier recipes (docs/fleet.md). The daemon runs `[approvals]
//! notify` in its notifier sandbox with the proposal on stdin (as `verbd pending --json` shows
//! one). These commands turn it into one short message — the proposal id, the verb, a summary of
//! the arguments, the hash prefix and the exact command that approves it — and hand it to one
//! transport: curl (ntfy, Slack-compatible webhooks), a sendmail-compatible program, notify-send.
//!
//! Invariants:
//! - the message holds no secret and no data: never the requester's `reason` (free text an agent
//!   writes to persuade), never a dry run's output, never file content (`content` and any long
//!   argument appear as their size and hash); every requester-written string is escaped with
//!   `terminal::escape` (argument values with `terminal::quoted`: a value that is not a plain
//!   word is quoted, so it cannot pass for further `name=value` pairs or the next field), then
//!   for the transport's markup (Slack, desktop), so an argument can neither start a line of
//!   its own (a forged approve command) nor become a mention or a link;
//! - no shell: each transport gets an argv built here and its message on stdin (notify-send:
//!   as arguments); titles and subjects hold only printable ASCII the policy chose (verb names,
//!   the host name, numbers);
//! - tokens and webhook URLs are read from files (`${secret_file:…}` in the policy) and reach
//!   curl as a config on its stdin, never on a command line another process could read.
#![forbid(unsafe_code)]

use anyhow::{Context, bail};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use verbd::protocol::ProposalView;
use verbd::terminal::{escape, quoted};

/// `verbd notify …`
#[derive(clap::Subcommand)]
pub enum NotifyCommand {
    /// Print the message for the proposal on stdin (to check a recipe, or to preview one:
    /// `verbd pending --json | jq '.[0]' | verbd notify print`)
    Print {
        #[command(flatten)]
        message: MessageArgs,
    },
    /// Publish to an ntfy topic (https://ntfy.sh or your own server) with curl
    Ntfy {
        /// The topic URL, e.g. https://ntfy.example.com/verbd-approvals
        #[arg(long)]
        url: String,
        /// A file holding an ntfy access token (`${secret_file:NAME}`), sent as a bearer token
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// ntfy priority, 1 (min) to 5 (max)
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=5))]
        priority: u8,
        /// The curl program (its path: the notifier sandbox must allow executing it)
        #[arg(long, default_value = "/usr/bin/curl")]
        curl: PathBuf,
        #[command(flatten)]
        message: MessageArgs,
    },
    /// Post to a Slack incoming webhook, or a compatible one (Mattermost, Rocket.Chat), with curl
    Slack {
        /// A file holding the webhook URL (`${secret_file:NAME}`): whoever has it can post
        #[arg(long)]
        webhook_file: PathBuf,
        /// The curl program (its path: the notifier sandbox must allow executing it)
        #[arg(long, default_value = "/usr/bin/curl")]
        curl: PathBuf,
        #[command(flatten)]
        message: MessageArgs,
    },
    /// Send an email: over SMTP with curl (`--smtp-config`), or through a sendmail-compatible
    /// program (`--sendmail`)
    Email {
        /// A recipient address (repeat for several)
        #[arg(long, required = true)]
        to: Vec<String>,
        /// The From: address (and the SMTP envelope sender with --smtp-config)
        #[arg(long)]
        from: Option<String>,
        /// A file of curl options for the SMTP relay (`${secret_file:NAME}`): url =
        /// "smtps://smtp.example.com", user = "name:password", mail-from = "verbd@example.com"
        #[arg(
            long,
            required_unless_present = "sendmail",
            conflicts_with = "sendmail"
        )]
        smtp_config: Option<PathBuf>,
        /// The curl program (its path: the notifier sandbox must allow executing it)
        #[arg(long, default_value = "/usr/bin/curl")]
        curl: PathBuf,
        /// A sendmail-compatible program to hand the message to instead (it gets
        /// `--sendmail-arg`s, then `-i -- RECIPIENTS`, and the message on stdin)
        #[arg(long)]
        sendmail: Option<PathBuf>,
        /// An argument for the sendmail program (repeat)
        #[arg(
            long = "sendmail-arg",
            allow_hyphen_values = true,
            requires = "sendmail"
        )]
        sendmail_args: Vec<String>,
        #[command(flatten)]
        message: MessageArgs,
    },
    /// A desktop notification with notify-send (the daemon must run in the approver's session)
    Desktop {
        /// The notify-send program (its path: the notifier sandbox must allow executing it)
        #[arg(long, default_value = "/usr/bin/notify-send")]
        notify_send: PathBuf,
        /// The session bus address (default: unix:path=/run/user/UID/bus of the caller's uid)
        #[arg(long)]
        bus: Option<String>,
        #[command(flatten)]
        message: MessageArgs,
    },
}

/// What every message needs beyond the proposal.
#[derive(clap::Args)]
pub struct MessageArgs {
    /// The socket approvers reach the daemon by, shown in the commands (e.g. the local end of an
    /// SSH forward, ./verbd-approve.sock); without it the commands use the default
    #[arg(long)]
    approve_socket: Option<PathBuf>,
    /// The host name the message names (default: /etc/hostname)
    #[arg(long)]
    host: Option<String>,
}

/// Longest proposal accepted on stdin.
const MAX_INPUT: u64 = 4 * 1024 * 1024;
/// Argument values longer than this are shown as their size and hash (as in journald).
const MAX_ARG_CHARS: usize = 128;
/// Longest argument summary; the rest is counted, not shown.
const MAX_ARGS_CHARS: usize = 600;
/// Hex digits of the argument hash shown and used in the approve command.
const HASH_PREFIX: usize = 16;
/// How long curl may take (the daemon kills the notifier after 30 s).
const CURL_MAX_TIME: &str = "20";

pub fn run(command: NotifyCommand) -> anyhow::Result<ExitCode> {
    if let NotifyCommand::Email {
        sendmail: None,
        sendmail_args,
        ..
    } = &command
        && !sendmail_args.is_empty()
    {
        bail!(
            "--sendmail-arg is for --sendmail; with --smtp-config, curl's options go in that file"
        );
    }
    let view = read_proposal()?;
    match command {
        NotifyCommand::Print { message } => {
            let message = Message::of(&view, &message)?;
            verbd::print_lossy!("{}\n\n{}", message.title, message.body);
        }
        NotifyCommand::Ntfy {
            url,
            token_file,
            priority,
            curl,
            message,
        } => {
            let message = Message::of(&view, &message)?;
            let mut config = CurlConfig::new(&url)?;
            config.header(&format!("Title: {}", message.title));
            config.header(&format!("Priority: {priority}"));
            config.header("Tags: lock");
            if let Some(file) = token_file {
                let token = read_secret_line(&file, "ntfy token")?;
                config.header(&format!("Authorization: Bearer {token}"));
            }
            config.body(&message.body);
            run_curl(&curl, &config)?;
        }
        NotifyCommand::Slack {
            webhook_file,
            curl,
            message,
        } => {
            let message = Message::of(&view, &message)?;
            let url = read_secret_line(&webhook_file, "webhook URL")?;
            let mut config = CurlConfig::new(&url)?;
            config.header("Content-Type: application/json");
            let text = format!(
                "*{}*\n{}",
                slack_escape(&message.title),
                slack_escape(&message.body)
            );
            config.body(&serde_json::json!({ "text": text }).to_string());
            run_curl(&curl, &config)?;
        }
        NotifyCommand::Email {
            to,
            from,
            smtp_config,
            curl,
            sendmail,
            sendmail_args,
            message,
        } => {
            if sendmail.is_none() && !sendmail_args.is_empty() {
                bail!(
                    "--sendmail-arg is for --sendmail; with --smtp-config, put curl options in that file"
                );
            }
            let message = Message::of(&view, &message)?;
            for address in to.iter().chain(&from) {
                check_address(address)?;
            }
            let mail = mail_text(&message, &to, from.as_deref());
            let mut command = match (&sendmail, &smtp_config) {
                (Some(sendmail), _) => {
                    let mut command = Command::new(sendmail);
                    command.args(&sendmail_args).arg("-i").arg("--").args(&to);
                    command
                }
                (None, Some(config)) => {
                    let mut command = Command::new(&curl);
                    command.arg("--config").arg(config).args([
                        "--silent",
                        "--show-error",
                        "--proto",
                        "=smtp,smtps",
                        "--max-time",
                        CURL_MAX_TIME,
                        "--upload-file",
                        "-",
                    ]);
                    if let Some(from) = &from {
                        command.arg("--mail-from").arg(from);
                    }
                    for address in &to {
                        command.arg("--mail-rcpt").arg(address);
                    }
                    command
                }
                (None, None) => bail!("give --smtp-config or --sendmail"),
            };
            let what = if sendmail.is_some() {
                "sendmail"
            } else {
                "curl"
            };
            feed(&mut command, mail.as_bytes(), what)?;
        }
        NotifyCommand::Desktop {
            notify_send,
            bus,
            message,
        } => {
            let message = Message::of(&view, &message)?;
            let bus = bus.unwrap_or_else(|| {
                format!("unix:path=/run/user/{}/bus", nix::unistd::getuid().as_raw())
            });
            let mut command = Command::new(&notify_send);
            command
                .env("DBUS_SESSION_BUS_ADDRESS", bus)
                .args(["--app-name=verbd", "--urgency=critical", "--"])
                .arg(&message.title)
                .arg(markup_escape(&message.body));
            feed(&mut command, b"", "notify-send")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The proposal on stdin: a `ProposalView` (the daemon's notifier payload, or one element of
/// `verbd pending --json`).
fn read_proposal() -> anyhow::Result<ProposalView> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(MAX_INPUT + 1)
        .read_to_end(&mut input)
        .context("reading the proposal on stdin")?;
    if input.len() as u64 > MAX_INPUT {
        bail!("the proposal on stdin is larger than {MAX_INPUT} bytes");
    }
    serde_json::from_slice(&input).context(
        "stdin is not a proposal (the JSON the daemon gives its notifier, or one element of `verbd pending --json`)",
    )
}

/// One notification: a title of trusted ASCII and a body of short lines.
struct Message {
    title: String,
    body: String,
}

impl Message {
    fn of(view: &ProposalView, args: &MessageArgs) -> anyhow::Result<Message> {
        let p = &view.proposal;
        let hash = &p.args_hash[..p.args_hash.len().min(HASH_PREFIX)];
        if hash.len() < 8 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("the proposal's args_hash is not a hash");
        }
        let host = args
            .host
            .clone()
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "this host".to_string());
        let title = ascii_line(&format!("verbd on {host}: approve {} #{}?", p.verb, p.id));
        let socket = args
            .approve_socket
            .as_ref()
            .map(|s| format!(" --socket {}", shell_words::quote(&s.display().to_string())))
            .unwrap_or_default();
        let user = p
            .requester
            .user
            .as_deref()
            .map(|u| format!(" ({})", escape(u)))
            .unwrap_or_default();
        let mut body = String::new();
        let _ = writeln!(body, "proposal:  {} on {}", p.id, ascii_line(&host));
        let _ = writeln!(
            body,
            "verb:      {} ({})",
            escape(&p.verb),
            escape(&p.category)
        );
        let _ = writeln!(body, "requester: uid {}{user}", p.requester.uid);
        let _ = writeln!(body, "args:      {}", args_summary(p));
        let _ = writeln!(body, "hash:      {hash}");
        let _ = writeln!(body, "expires:   {}", escape(&view.expires_at));
        let _ = writeln!(
            body,
            "approve:   verbd approve {} --hash {hash}{socket}",
            p.id
        );
        let _ = writeln!(
            body,
            "details:   verbd pending{socket}   (shows everything, the requester's reason too)"
        );
        let _ = writeln!(body, "deny:      verbd deny {} --reason '…'{socket}", p.id);
        Ok(Message { title, body })
    }
}

/// The message as an RFC 5322 mail (CRLF line ends, 8-bit UTF-8 body).
fn mail_text(message: &Message, to: &[String], from: Option<&str>) -> String {
    let mut mail = String::new();
    let _ = write!(
        mail,
        "Date: {}\r\n",
        rfc5322_date(std::time::SystemTime::now())
    );
    if let Some(from) = from {
        let _ = write!(mail, "From: {from}\r\n");
    }
    let _ = write!(
        mail,
        "To: {}\r\nSubject: {}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\nAuto-Submitted: auto-generated\r\n\r\n",
        to.join(", "),
        message.title
    );
    for line in message.body.lines() {
        // A line that is a lone dot ends the message for some submission programs.
        let line = if line == "." { ".." } else { line };
        let _ = write!(mail, "{line}\r\n");
    }
    mail
}

/// `1 Dec 2026 05:51:56 +0000` (RFC 5322, without the optional day of the week).
fn rfc5322_date(time: std::time::SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // format_rfc3339 writes YYYY-MM-DDTHH:MM:SS.mmmZ.
    let stamp = verbd::journal::format_rfc3339(time);
    let month = stamp[5..7].parse::<usize>().unwrap_or(1).clamp(1, 12);
    let day = stamp[8..10].trim_start_matches('0');
    format!(
        "{day} {} {} {} +0000",
        MONTHS[month - 1],
        &stamp[..4],
        &stamp[11..19]
    )
}

/// `name=value` for each argument, the value as `terminal::quoted` writes it (so no value can
/// pass for further pairs or the message's next field); `content` and long values as size and
/// hash. The names are the policy's parameter names, shown bare.
fn args_summary(p: &verbd::proposal::Proposal) -> String {
    let mut out = String::new();
    let mut hidden = 0;
    for (name, value) in &p.args {
        let shown = if name == "content" || value.chars().count() > MAX_ARG_CHARS {
            format!(
                "<{} bytes, sha256 {}>",
                value.len(),
                &verbd::digest::sha256_hex(value.as_bytes())[..HASH_PREFIX]
            )
        } else {
            quoted(value)
        };
        let item = format!("{}={shown}", escape(name));
        if out.len() + item.len() > MAX_ARGS_CHARS {
            hidden += 1;
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&item);
    }
    if hidden > 0 {
        let _ = write!(out, " (+{hidden} more: verbd pending)");
    }
    if out.is_empty() {
        out.push_str("(none)");
    }
    out
}

/// Printable ASCII only (other characters become `?`): for titles, subjects and headers.
fn ascii_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// Slack's three reserved characters (mentions, links and channel names start with `<`).
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// notify-send bodies are markup for most notification servers.
fn markup_escape(text: &str) -> String {
    slack_escape(text)
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// An address for a header and a sendmail argument: one plain `local@domain`.
fn check_address(address: &str) -> anyhow::Result<()> {
    let plain = address.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty() && !domain.is_empty() && !domain.contains('@')
    }) && !address.starts_with('-')
        && address
            .chars()
            .all(|c| c.is_ascii_graphic() && !"<>()[]\\,;:\"".contains(c));
    if !plain {
        bail!("{address:?} is not a plain address (local@domain, no spaces, quotes or lists)");
    }
    Ok(())
}

/// The first line of a secret file, which must hold one.
fn read_secret_line(path: &Path, what: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} from {}", path.display()))?;
    let line = text.trim();
    if line.is_empty() || line.contains(['\n', '\r']) {
        bail!(
            "{} must hold the {what} on one line, nothing else",
            path.display()
        );
    }
    Ok(line.to_string())
}

/// A curl config (`curl --config -`): the URL, headers and body, none of them on curl's
/// command line.
struct CurlConfig {
    text: String,
}

impl CurlConfig {
    fn new(url: &str) -> anyhow::Result<CurlConfig> {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            bail!("the URL must be https:// (or http:// to a local relay)");
        }
        let mut config = CurlConfig {
            text: String::new(),
        };
        config.option("url", url);
        Ok(config)
    }

    fn header(&mut self, header: &str) {
        self.option("header", header);
    }

    fn body(&mut self, body: &str) {
        self.option("data-binary", body);
    }

    fn option(&mut self, name: &str, value: &str) {
        let mut quoted = String::with_capacity(value.len() + 2);
        for c in value.chars() {
            match c {
                '\\' => quoted.push_str("\\\\"),
                '"' => quoted.push_str("\\\""),
                '\n' => quoted.push_str("\\n"),
                '\r' => quoted.push_str("\\r"),
                '\t' => quoted.push_str("\\t"),
                c => quoted.push(c),
            }
        }
        let _ = writeln!(self.text, "{name} = \"{quoted}\"");
    }
}

fn run_curl(curl: &Path, config: &CurlConfig) -> anyhow::Result<()> {
    let mut command = Command::new(curl);
    command.args([
        "--config",
        "-",
        "--silent",
        "--show-error",
        "--fail",
        "--proto",
        "=https,http",
        "--max-redirs",
        "0",
        "--max-time",
        CURL_MAX_TIME,
        "--output",
        "/dev/null",
    ]);
    feed(&mut command, config.text.as_bytes(), "curl")
}

/// Runs `command` with `input` on its stdin; its stderr goes to ours (the daemon journals it,
/// scrubbed, when the notifier fails).
fn feed(command: &mut Command, input: &[u8], what: &str) -> anyhow::Result<()> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {what} ({:?})", command.get_program()))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let written = stdin.write_all(input);
    drop(stdin);
    let status = child
        .wait()
        .with_context(|| format!("waiting for {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    written.with_context(|| format!("writing to {what}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_config_values_cannot_add_options() {
        let mut config = CurlConfig::new("https://ntfy.example.com/t").unwrap();
        config.body("line\"\nurl = \"https://evil.example\"\\");
        assert_eq!(
            config.text,
            "url = \"https://ntfy.example.com/t\"\ndata-binary = \"line\\\"\\nurl = \\\"https://evil.example\\\"\\\\\"\n"
        );
        assert!(CurlConfig::new("file:///etc/shadow").is_err());
    }

    #[test]
    fn addresses_are_plain() {
        assert!(check_address("ops@example.com").is_ok());
        for bad in [
            "-oQ/tmp@x",
            "a@b\r\nBcc: x@y",
            "a b@c",
            "a@b,c@d",
            "nobody",
            "<a@b>",
        ] {
            assert!(check_address(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn mail_dates_follow_rfc_5322() {
        let time = verbd::journal::parse_rfc3339("2026-03-07T09:05:01.250Z").unwrap();
        assert_eq!(rfc5322_date(time), "7 Mar 2026 09:05:01 +0000");
    }

    #[test]
    fn titles_are_printable_ascii() {
        assert_eq!(ascii_line("a\r\nb\u{202e}ü"), "a??b??");
    }

    #[test]
    fn markup_is_neutralized() {
        assert_eq!(
            slack_escape("<!channel> & <https://x|y>"),
            "&lt;!channel&gt; &amp; &lt;https://x|y&gt;"
        );
        assert_eq!(markup_escape("<a href='x'>"), "&lt;a href=&#39;x&#39;&gt;");
    }
}
