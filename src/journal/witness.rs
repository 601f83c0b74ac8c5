//! Publishing the chain head outside the journal, as records are written, so that cutting
//! records off the end (or replacing the journal with an older copy) is evident: a journal checked
//! only against itself cannot tell "the last 50 records were deleted" from "nothing happened".
//!
//! - **The witness file** `journal.witness`: one line `{"seq":N,"epoch":E,"hash":"H"}` per
//!   record, appended after the record is durable. It is worth something only where the daemon
//!   user cannot rewrite it: opened `O_APPEND` by root before the privilege drop (root-owned; the
//!   daemon keeps only the descriptor), and best with the append-only inode flag (`chattr +a`,
//!   which only `CAP_LINUX_IMMUTABLE` can set or clear: then not even the descriptor can
//!   truncate, overwrite or unlink it). [`WitnessProtection`] says which of these holds.
//! - **journald**, when its native socket exists: one structured entry per record
//!   (`SYSLOG_IDENTIFIER=verbd`, `MESSAGE_ID`, `VERBD_SEQ`, `VERBD_CHAIN`, ...). Local journald
//!   is rewritable by root; forwarded off the host it is the witness root cannot reach.
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::record::{hex, parse_hash};
use super::{JournalError, Record, WITNESS_FILE};

/// How well the witness file is protected against the daemon's own uid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WitnessProtection {
    /// The inode is append-only (`chattr +a`): nobody without `CAP_LINUX_IMMUTABLE` can shorten,
    /// overwrite, rename or delete it.
    AppendOnly,
    /// Owned by root while the daemon runs as another uid: the daemon user cannot open it; only
    /// code inside the running daemon could misuse the descriptor it holds.
    RootOwned,
    /// Owned by the uid the daemon runs as: it records heads, but protects nothing against that
    /// uid. Set it append-only (see docs/audit.md).
    Unprotected,
}

impl WitnessProtection {
    pub fn describe(self) -> &'static str {
        match self {
            WitnessProtection::AppendOnly => "append-only (chattr +a)",
            WitnessProtection::RootOwned => {
                "root-owned, opened before the privilege drop (not append-only)"
            }
            WitnessProtection::Unprotected => {
                "owned by the daemon's uid and not append-only: no protection against that uid"
            }
        }
    }
}

/// The witness file, opened for appending (and reading through the same descriptor).
pub struct Witness {
    file: File,
    path: PathBuf,
}

/// One published head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Head {
    pub(super) seq: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(super) epoch: Option<u64>,
    #[serde(with = "head_hash")]
    pub(super) hash: [u8; 32],
}

mod head_hash {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(hash: &[u8; 32], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::hex(hash))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_hash(&text).ok_or_else(|| serde::de::Error::custom("bad hash"))
    }
}

/// A head as read back, with its 1-based line in the witness file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct WitnessEntry {
    pub(super) line: u64,
    pub(super) head: Head,
}

impl Head {
    fn to_line(self) -> String {
        let mut line = serde_json::to_string(&self).expect("a head always serializes");
        line.push('\n');
        line
    }
}

fn parse_entry(bytes: &[u8]) -> Option<Head> {
    serde_json::from_slice(bytes).ok()
}

impl Witness {
    /// Opens (creating it, mode 0644, if missing) the witness file of `state_dir` for appending.
    /// A root-started daemon calls this before dropping privileges, so the file stays root's.
    /// A symlink or a non-regular file is refused.
    pub fn open(state_dir: &Path) -> Result<Witness, JournalError> {
        let path = state_dir.join(WITNESS_FILE);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| JournalError::Io {
                what: "witness file",
                path: path.clone(),
                action: "open",
                source,
            })?;
        let metadata = file.metadata().map_err(|source| JournalError::Io {
            what: "witness file",
            path: path.clone(),
            action: "stat",
            source,
        })?;
        let euid = nix::unistd::geteuid().as_raw();
        if !metadata.is_file() || metadata.mode() & 0o022 != 0 {
            return Err(JournalError::File {
                path,
                reason: "must be a regular file that neither group nor other can write; fix: \
                         chmod 644 (after checking who changed it)"
                    .to_owned(),
            });
        }
        if metadata.nlink() != 1 {
            // A hard link the daemon user planted to some root-owned file elsewhere would make
            // root append heads to it (fs.protected_hardlinks stops most such links; this
            // stops the rest).
            return Err(JournalError::File {
                path,
                reason: format!(
                    "has {} hard links: another name elsewhere could be a file that is not the \
                     witness. Keep it for the investigation, move it aside and restart",
                    metadata.nlink()
                ),
            });
        }
        if metadata.uid() != 0 && metadata.uid() != euid {
            return Err(JournalError::File {
                path,
                reason: format!(
                    "is owned by uid {}, neither root nor the daemon (uid {euid}): it was \
                     replaced. Keep it for the investigation, move it aside and restart",
                    metadata.uid()
                ),
            });
        }
        Ok(Witness { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How well the file is protected against the uid this process runs as now.
    pub fn protection(&self) -> WitnessProtection {
        protection_of(&self.file, nix::unistd::geteuid().as_raw())
    }

    /// Appends one head (the descriptor is `O_APPEND`: it lands at the end, whatever the offset).
    pub(super) fn publish(&self, head: &Head) -> io::Result<()> {
        io::Write::write_all(&mut &self.file, head.to_line().as_bytes())
    }

    pub(super) fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Reads the heads published after `after_seq`, newest last, by reading backwards from the
    /// end. Stops at the first head at or below `after_seq` (returned too, as the anchor);
    /// refuses more than `cap` heads.
    pub(super) fn tail_after(
        &self,
        after_seq: u64,
        cap: usize,
    ) -> Result<(Vec<WitnessEntry>, u64), JournalError> {
        read_tail_after(&self.file, &self.path, after_seq, cap)
    }
}

/// How well `file` is protected against `daemon_uid`.
pub(super) fn protection_of(file: &File, daemon_uid: u32) -> WitnessProtection {
    if let Ok(flags) = rustix::fs::ioctl_getflags(file)
        && flags.contains(rustix::fs::IFlags::APPEND)
    {
        return WitnessProtection::AppendOnly;
    }
    let owner = file.metadata().map(|m| m.uid()).unwrap_or(u32::MAX);
    if owner == 0 && daemon_uid != 0 {
        WitnessProtection::RootOwned
    } else {
        WitnessProtection::Unprotected
    }
}

/// See [`Witness::tail_after`]. Also returns how many lines were not heads. Entries read this
/// way carry line 0 (counting lines would mean reading the whole file).
pub(super) fn read_tail_after(
    file: &File,
    path: &Path,
    after_seq: u64,
    cap: usize,
) -> Result<(Vec<WitnessEntry>, u64), JournalError> {
    let read_error = |source: io::Error| JournalError::Io {
        what: "witness file",
        path: path.to_owned(),
        action: "read",
        source,
    };
    let length = file.metadata().map_err(read_error)?.len();
    let mut current = length;
    let mut region: Vec<u8> = Vec::new();
    let mut newest_first: Vec<Head> = Vec::new();
    let mut garbage = 0u64;
    loop {
        let search_end = region.len().saturating_sub(1);
        let boundary = region[..search_end].iter().rposition(|byte| *byte == b'\n');
        let line = match boundary {
            Some(index) => region.split_off(index + 1),
            None if current == 0 => std::mem::take(&mut region),
            None => {
                let step = current.min(64 * 1024);
                current -= step;
                let mut chunk = vec![0u8; step as usize];
                file.read_exact_at(&mut chunk, current)
                    .map_err(read_error)?;
                chunk.extend_from_slice(&region);
                region = chunk;
                continue;
            }
        };
        if line.is_empty() {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        match parse_entry(text) {
            Some(head) => {
                newest_first.push(head);
                if head.seq <= after_seq {
                    break;
                }
            }
            None => garbage += 1,
        }
        if newest_first.len() as u64 + garbage > cap as u64 {
            return Err(JournalError::File {
                path: path.to_owned(),
                reason: format!(
                    "holds more than {cap} lines after the last checkpoint (seq {after_seq}); \
                     someone appended to it. Run `verbd audit verify`"
                ),
            });
        }
    }
    let entries = newest_first
        .into_iter()
        .rev()
        .map(|head| WitnessEntry { line: 0, head })
        .collect();
    Ok((entries, garbage))
}

/// Every head in a witness file, in file order, streamed.
pub(super) struct WitnessStream {
    reader: io::BufReader<File>,
    line: u64,
}

/// One line of a witness file as read by [`WitnessStream`].
pub(super) enum WitnessLine {
    Head(WitnessEntry),
    Garbage(u64),
}

impl WitnessStream {
    pub(super) fn open(path: &Path) -> Result<Option<WitnessStream>, JournalError> {
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(file) => Ok(Some(WitnessStream {
                reader: io::BufReader::with_capacity(64 * 1024, file),
                line: 0,
            })),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(JournalError::Io {
                what: "witness file",
                path: path.to_owned(),
                action: "open",
                source,
            }),
        }
    }

    /// Protection against `daemon_uid` (the state directory's owner).
    pub(super) fn protection(&self, daemon_uid: u32) -> WitnessProtection {
        protection_of(self.reader.get_ref(), daemon_uid)
    }

    pub(super) fn next_line(&mut self) -> io::Result<Option<WitnessLine>> {
        use io::BufRead;
        let mut buffer = Vec::new();
        let count = io::Read::take(&mut self.reader, 4096).read_until(b'\n', &mut buffer)?;
        if count == 0 {
            return Ok(None);
        }
        self.line += 1;
        if buffer.last() != Some(&b'\n') && count == 4096 {
            // Skip the rest of an overlong line.
            let mut rest = Vec::new();
            self.reader.read_until(b'\n', &mut rest)?;
            return Ok(Some(WitnessLine::Garbage(self.line)));
        }
        let text = buffer.strip_suffix(b"\n").unwrap_or(&buffer);
        Ok(Some(match parse_entry(text) {
            Some(head) => WitnessLine::Head(WitnessEntry {
                line: self.line,
                head,
            }),
            None => WitnessLine::Garbage(self.line),
        }))
    }
}

/// The default journald native socket.
pub const JOURNALD_SOCKET: &str = "/run/systemd/journal/socket";

/// Longest value sent in one journald field (attacker-influenced values are cut).
const MAX_FIELD_BYTES: usize = 512;

/// journald's native protocol over its datagram socket.
pub(super) struct Journald {
    socket: UnixDatagram,
    path: PathBuf,
    failures: u64,
}

impl Journald {
    /// Connects when `path` is a socket; `None` when there is no journald to talk to.
    pub(super) fn connect(path: &Path) -> Option<Journald> {
        use std::os::unix::fs::FileTypeExt;
        let metadata = std::fs::metadata(path).ok()?;
        if !metadata.file_type().is_socket() {
            return None;
        }
        let socket = UnixDatagram::unbound().ok()?;
        Some(Journald {
            socket,
            path: path.to_owned(),
            failures: 0,
        })
    }

    pub(super) fn failures(&self) -> u64 {
        self.failures
    }

    /// Sends one structured entry for `record`; a failure is counted and logged once.
    pub(super) fn publish(&mut self, record: &Record) {
        let datagram = entry_for(record);
        if let Err(error) = self.socket.send_to(&datagram, &self.path) {
            if self.failures == 0 {
                tracing::warn!(%error, socket = %self.path.display(), "cannot send journal heads to journald");
            }
            self.failures += 1;
        }
    }
}

/// `MESSAGE_ID` of an event kind: the first 128 bits of sha256("verbd/message-id/" + kind), in
/// hex. Stable for as long as the kind's name is.
pub fn message_id(kind: &str) -> String {
    let digest = Sha256::digest(format!("verbd/message-id/{kind}").as_bytes());
    hex(&digest[..16])
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &str) {
    let mut cut = value.len().min(MAX_FIELD_BYTES);
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    let value = &value[..cut];
    out.extend_from_slice(name.as_bytes());
    if value.contains('\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        out.extend_from_slice(value.as_bytes());
    } else {
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
    }
    out.push(b'\n');
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// Top-level event fields a journald `MESSAGE` may show, in the journal's own rendering. An
/// allowlist: a field added to an event later stays out of journald until it is judged here.
/// Left out on purpose: `argv`/`dry_run_argv` (rendered from the args, a content-carrying
/// parameter included), `dry_run_output` (program output), `state` (a snapshot of every
/// proposal, content included) and `env`.
const MESSAGE_FIELDS: &[&str] = &[
    "caller",
    "verb",
    "args",
    "args_hash",
    "decision",
    "reason",
    "proposal",
    "id",
    "by",
    "hash",
    "status",
    "exit_code",
    "signal",
    "timed_out",
    "duration_ms",
    "cause",
    "error",
    "exec_seq",
    "path",
    "size",
    "sha256",
    "created",
    "tool",
    "allowed",
    "outcome",
    "note",
    "ok",
    "policy_hash",
    "message",
    "version",
    "policy",
    "pid",
    "uid",
    "in_flight",
    "epoch",
    "first_seq",
    "records",
    "class",
    "count",
    "first",
    "last",
];

/// Fields of a `proposal_created` record's proposal that its `MESSAGE` shows (in place of the
/// proposal object): `requester` as its uid.
const PROPOSAL_FIELDS: &[&str] = &["verb", "category", "requester", "args", "args_hash"];

/// Hash-valued fields, shown in a `MESSAGE` by their first 16 hex digits (the whole value is in
/// `VERBD_ARGS_HASH`, or in the journal).
const HASH_FIELDS: &[&str] = &["args_hash", "hash", "policy_hash", "sha256"];

/// Argument values longer than this are shown in a `MESSAGE` as their size and hash only.
const MAX_ARG_BYTES: usize = 128;

/// An argument as a journald `MESSAGE` shows it: `content` (what a file verb writes) and any
/// long or structured value only as `<N bytes, sha256 PREFIX>`, the rest as it is (escaped by
/// the rendering). A `content` the daemon already journaled as its size and hash stays so.
fn summarized_arg(name: &str, value: &Value) -> Value {
    let summary = |bytes: &[u8]| {
        Value::String(format!(
            "<{} bytes, sha256 {}>",
            bytes.len(),
            &hex(&Sha256::digest(bytes))[..16]
        ))
    };
    match value {
        Value::String(text) if name == "content" => match size_and_hash(text) {
            Some((size, hash)) => Value::String(format!("<{size} bytes, sha256 {}>", &hash[..16])),
            None => summary(text.as_bytes()),
        },
        Value::String(text) if text.len() > MAX_ARG_BYTES => summary(text.as_bytes()),
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => value.clone(),
        structured => summary(structured.to_string().as_bytes()),
    }
}

/// `<N bytes, sha256 HEX>` as the daemon journals a file verb's content: (N, HEX).
fn size_and_hash(text: &str) -> Option<(&str, &str)> {
    let inner = text.strip_prefix('<')?.strip_suffix('>')?;
    let (size, hash) = inner.split_once(" bytes, sha256 ")?;
    let is_size = !size.is_empty() && size.bytes().all(|b| b.is_ascii_digit());
    let is_hash = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    (is_size && is_hash).then_some((size, hash))
}

fn summarized_args(args: &Value) -> Value {
    match args {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, value)| (name.clone(), summarized_arg(name, value)))
                .collect(),
        ),
        other => summarized_arg("", other),
    }
}

/// The event as a journald `MESSAGE` may show it: [`MESSAGE_FIELDS`] only, arguments
/// summarized, hashes shortened, a proposal replaced by its [`PROPOSAL_FIELDS`].
fn message_event(event: &Value) -> Value {
    let Value::Object(fields) = event else {
        return Value::Null;
    };
    let mut shown = serde_json::Map::new();
    if let Some(kind) = fields.get("kind") {
        shown.insert("kind".into(), kind.clone());
    }
    let mut show = |name: &str, value: &Value| {
        let value = match (name, value) {
            ("args", args) => summarized_args(args),
            (name, Value::String(hash)) if HASH_FIELDS.contains(&name) && hash.len() > 16 => {
                Value::String(hash.chars().take(16).collect())
            }
            (_, value) => value.clone(),
        };
        shown.insert(name.to_string(), value);
    };
    for name in MESSAGE_FIELDS {
        match (*name, fields.get(*name)) {
            (_, None) => {}
            ("proposal", Some(Value::Object(proposal))) => {
                for field in PROPOSAL_FIELDS {
                    match (*field, proposal.get(*field)) {
                        (_, None) => {}
                        ("requester", Some(requester)) => {
                            show("requester_uid", &requester["uid"]);
                        }
                        (field, Some(value)) => show(field, value),
                    }
                }
            }
            (name, Some(value)) => show(name, value),
        }
    }
    Value::Object(shown)
}

/// The human `MESSAGE` of a record's journald entry: the journal's one-line rendering (every
/// requester-written string escaped) of [`message_event`], cut at [`MAX_FIELD_BYTES`].
pub(super) fn journald_message(record: &Record) -> String {
    let shown = Record {
        event: message_event(&record.event),
        ..record.clone()
    };
    let mut message = super::format_record(&shown);
    if message.len() > MAX_FIELD_BYTES {
        let mut cut = MAX_FIELD_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// The native-protocol datagram for one record.
pub(super) fn entry_for(record: &Record) -> Vec<u8> {
    let event = &record.event;
    let kind = event["kind"].as_str().unwrap_or("unknown");
    let proposal = &event["proposal"];
    let mut out = Vec::with_capacity(512);
    push_field(&mut out, "MESSAGE", &journald_message(record));
    push_field(&mut out, "MESSAGE_ID", &message_id(kind));
    let priority = match kind {
        "journal_gap_acknowledged"
        | "journal_witness_lost_acknowledged"
        | "journal_tail_repaired" => "4",
        "refused" | "connect_refused" | "approval_refused" | "notify_failed"
        | "refusals_coalesced" => "5",
        "credential_failed" | "proposal_break_glass" => "4",
        _ => "6",
    };
    push_field(&mut out, "PRIORITY", priority);
    push_field(&mut out, "SYSLOG_IDENTIFIER", "verbd");
    push_field(&mut out, "VERBD_SEQ", &record.seq.to_string());
    if let Some(epoch) = record.epoch {
        push_field(&mut out, "VERBD_EPOCH", &epoch.to_string());
    }
    push_field(&mut out, "VERBD_SEGMENT", &record.segment.to_string());
    push_field(&mut out, "VERBD_EVENT", kind);
    push_field(&mut out, "VERBD_CHAIN", &record.hash);
    let first = |candidates: &[&Value]| -> Option<String> {
        candidates.iter().find_map(|value| scalar(value))
    };
    let proposal_id = if proposal.is_u64() {
        Some(proposal.to_string())
    } else if kind.starts_with("proposal_") || kind == "approval_refused" || kind == "notify_failed"
    {
        scalar(&event["id"])
    } else {
        None
    };
    let optional = [
        ("VERBD_VERB", first(&[&event["verb"], &proposal["verb"]])),
        (
            "VERBD_CALLER_UID",
            first(&[&event["caller"]["uid"], &proposal["requester"]["uid"]]),
        ),
        ("VERBD_DECISION", first(&[&event["decision"]])),
        ("VERBD_PROPOSAL", proposal_id),
        (
            "VERBD_ARGS_HASH",
            first(&[&event["args_hash"], &proposal["args_hash"], &event["hash"]]),
        ),
        ("VERBD_BY_UID", first(&[&event["by"]["uid"]])),
    ];
    for (name, value) in optional {
        if let Some(text) = value {
            push_field(&mut out, name, &text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(event: Value) -> Record {
        Record {
            seq: 9,
            time: "2026-12-01T00:00:00.000Z".into(),
            prev: String::new(),
            epoch: Some(1),
            event,
            mac: String::new(),
            segment: 1,
            line: 9,
            hash: "ab".repeat(32),
        }
    }

    #[test]
    fn a_message_shows_allowlisted_fields_and_summarizes_what_carries_data() {
        let long = "x".repeat(MAX_ARG_BYTES + 1);
        let message = journald_message(&record(json!({
            "kind": "exec",
            "verb": "tee",
            "caller": {"uid": 61000, "user": null, "pid": 7, "roles": ["agent"]},
            "args": {"content": "SECRET-FILE-BODY", "line": long, "list": ["a"], "n": 3},
            "argv": ["/usr/bin/tee", "SECRET-FILE-BODY"],
            "env": {"TOKEN": "${secret:tok}"},
            "future_field": "UNJUDGED",
            "args_hash": "cd".repeat(32),
        })));
        for absent in [
            "SECRET-FILE-BODY",
            "UNJUDGED",
            "argv",
            "env",
            "xxxx",
            &"cd".repeat(9),
        ] {
            assert!(!message.contains(absent), "{absent:?} in {message}");
        }
        let content = format!(
            "<16 bytes, sha256 {}>",
            &hex(&Sha256::digest(b"SECRET-FILE-BODY"))[..16]
        );
        assert!(message.contains(&content), "{message}");
        assert!(message.contains(&format!("line=\"<{} bytes, sha256 ", MAX_ARG_BYTES + 1)));
        assert!(message.contains("list=\"<5 bytes, sha256 "), "{message}");
        assert!(message.contains("n=3"), "{message}");
        assert!(
            message.contains(&format!("args_hash={}", "cd".repeat(8))),
            "{message}"
        );
        assert!(
            message.starts_with("2026-12-01T00:00:00.000Z #9 exec caller=(61000)/pid:7 verb=tee")
        );
    }

    #[test]
    fn snapshots_proposals_and_dry_runs_stay_in_the_journal() {
        let snapshot = journald_message(&record(json!({
            "kind": "journal_snapshot",
            "state": {"proposals": [{"args": {"content": "SNAPSHOT-BODY"}}]},
        })));
        assert_eq!(snapshot, "2026-12-01T00:00:00.000Z #9 journal_snapshot");
        let created = journald_message(&record(json!({
            "kind": "proposal_created",
            "id": 4,
            "proposal": {
                "verb": "drop",
                "category": "destructive",
                "args": {"name": "web"},
                "argv": ["/bin/drop", "web"],
                "dry_run_output": "DRY-RUN-BODY",
                "reason": "please",
                "requester": {"uid": 61000, "gid": 61000, "pid": 1},
                "args_hash": "ef".repeat(32),
            },
        })));
        assert!(
            !created.contains("DRY-RUN-BODY") && !created.contains("/bin/drop"),
            "{created}"
        );
        assert!(created.contains("verb=drop args={name=web}"), "{created}");
        assert!(created.contains("requester_uid=61000"), "{created}");
    }

    #[test]
    fn an_entry_names_the_verb_requester_and_approver_of_proposals() {
        let entry = String::from_utf8(entry_for(&record(json!({
            "kind": "proposal_created",
            "id": 4,
            "proposal": {"verb": "drop", "requester": {"uid": 61000}, "args_hash": "ef".repeat(32)},
        }))))
        .unwrap();
        for field in [
            "VERBD_VERB=drop\n",
            "VERBD_CALLER_UID=61000\n",
            "VERBD_PROPOSAL=4\n",
            &format!("VERBD_ARGS_HASH={}\n", "ef".repeat(32)),
            &format!("MESSAGE_ID={}\n", message_id("proposal_created")),
        ] {
            assert!(entry.contains(field), "{field:?} missing from {entry:?}");
        }
        let approved = String::from_utf8(entry_for(&record(json!({
            "kind": "proposal_approved", "id": 4, "by": {"uid": 61001, "user": null}, "hash": "ef".repeat(32),
        }))))
        .unwrap();
        assert!(approved.contains("VERBD_BY_UID=61001\n"), "{approved}");
        assert!(approved.contains("VERBD_PROPOSAL=4\n"), "{approved}");
    }
}
