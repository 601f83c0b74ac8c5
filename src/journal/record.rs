//! The byte format of one journal line: canonical JSON, building a line at append time and
//! parsing one at read time. Everything that decides "is this line well-formed and canonical"
//! lives here so the writer and the readers cannot drift apart; which key authenticates a line is
//! decided by the caller (see `keys`).
//!
//! Two formats exist. The daemon writes only the second:
//!
//! - v1 (journals written before forward-secure sealing):
//!   `{"seq":N,"time":"T","prev":"P","event":E,"hmac":"H"}`, HMAC under the static `journal.key`.
//! - v2: `{"seq":N,"time":"T","prev":"P","epoch":K,"event":E,"mac":"H"}`, MAC under the key of
//!   epoch `K` (see `keys`).
//!
//! In both, the MAC covers the *body*: the line without its last field, closed with `}`.
#![forbid(unsafe_code)]

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{ProblemKind, Record, parse_rfc3339};

/// Longest line the journal writes or reads (a proposal may carry dry-run output).
pub(super) const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

pub(super) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&Sha256::digest(bytes));
    hash
}

pub(super) use crate::digest::hex;

/// Parses exactly 64 lowercase hex digits (the only form the journal writes).
pub(super) fn parse_hash(text: &str) -> Option<[u8; 32]> {
    let mut hash = [0u8; 32];
    parse_hex_into(text, &mut hash).then_some(hash)
}

/// Parses exactly `2 * out.len()` lowercase hex digits into `out`.
pub(super) fn parse_hex_into(text: &str, out: &mut [u8]) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != out.len() * 2 {
        return false;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (index, pair) in bytes.chunks_exact(2).enumerate() {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(high), Some(low)) => out[index] = high << 4 | low,
            _ => return false,
        }
    }
    true
}

/// How strings are written in a canonical line.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Strings {
    /// As serde_json writes them, except U+0085, U+2028 and U+2029 as `\u` escapes: line
    /// separators to many readers (Python's `splitlines`, JavaScript), so a caller's text could
    /// otherwise cut an exported record in two and make its second half read as a record of its
    /// own. What the journal writes.
    NoLineSeparators,
    /// Exactly as serde_json writes them: records written before the escape was added.
    Legacy,
}

/// The characters some line readers split on that serde_json leaves raw in a string.
const LINE_SEPARATORS: [char; 3] = ['\u{85}', '\u{2028}', '\u{2029}'];

fn push_json_string(text: &str, strings: Strings, out: &mut String) {
    let json = Value::String(text.to_owned()).to_string();
    if strings == Strings::Legacy || !json.contains(LINE_SEPARATORS) {
        out.push_str(&json);
        return;
    }
    for c in json.chars() {
        if LINE_SEPARATORS.contains(&c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
}

/// Writes `value` as canonical JSON: no whitespace, object keys sorted by their UTF-8 bytes at
/// every depth, numbers exactly as serde_json writes them, strings too except as [`Strings`]
/// says. Independent of serde_json's `preserve_order` feature.
pub(super) fn write_canonical(value: &Value, strings: Strings, out: &mut String) {
    match value {
        Value::Object(map) => write_canonical_object(map, strings, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, strings, out);
            }
            out.push(']');
        }
        Value::String(text) => push_json_string(text, strings, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_canonical_object(map: &Map<String, Value>, strings: Strings, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (index, (key, item)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        push_json_string(key, strings, out);
        out.push(':');
        write_canonical(item, strings, out);
    }
    out.push('}');
}

/// The MAC input of a record. `epoch` is `None` for v1 (no epoch field).
pub(super) fn record_body(
    seq: u64,
    time: &str,
    prev: &str,
    epoch: Option<u64>,
    event: &Map<String, Value>,
    strings: Strings,
) -> String {
    let mut body = String::with_capacity(160);
    body.push_str("{\"seq\":");
    body.push_str(&seq.to_string());
    body.push_str(",\"time\":");
    body.push_str(&Value::String(time.to_owned()).to_string());
    body.push_str(",\"prev\":\"");
    body.push_str(prev);
    if let Some(epoch) = epoch {
        body.push_str("\",\"epoch\":");
        body.push_str(&epoch.to_string());
        body.push_str(",\"event\":");
    } else {
        body.push_str("\",\"event\":");
    }
    write_canonical_object(event, strings, &mut body);
    body.push('}');
    body
}

/// The full line (without its newline): the body with `,"mac":"H"` (v2) or `,"hmac":"H"` (v1)
/// before the closing brace.
pub(super) fn seal_line(body: &str, field: &str, tag: &[u8; 32]) -> String {
    let mut line = String::with_capacity(body.len() + 80);
    line.push_str(&body[..body.len() - 1]);
    line.push_str(",\"");
    line.push_str(field);
    line.push_str("\":\"");
    line.push_str(&hex(tag));
    line.push_str("\"}");
    line
}

/// Why one line is not a well-formed record.
pub(super) struct LineFault {
    pub(super) kind: ProblemKind,
    pub(super) seq: Option<u64>,
    pub(super) message: String,
}

/// A well-formed line whose MAC has not been checked yet.
pub(super) struct ParsedLine {
    pub(super) record: Record,
    pub(super) prev: [u8; 32],
    /// The MAC input.
    pub(super) body: String,
    pub(super) tag: [u8; 32],
    /// The line's bytes are exactly what the journal writes for this content.
    pub(super) canonical: bool,
}

impl ParsedLine {
    /// `None` for a v1 line.
    pub(super) fn epoch(&self) -> Option<u64> {
        self.record.epoch
    }

    /// The event's `kind`, when it has one.
    pub(super) fn kind(&self) -> &str {
        self.record.event["kind"].as_str().unwrap_or_default()
    }
}

/// Parses one line (without its newline) and checks its shape. `segment` and `line` are stored in
/// the returned record.
pub(super) fn parse_line(bytes: &[u8], segment: u64, line: u64) -> Result<ParsedLine, LineFault> {
    let bad_json = |seq: Option<u64>, message: String| LineFault {
        kind: ProblemKind::BadJson,
        seq,
        message,
    };
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|error| bad_json(None, format!("not valid JSON ({error})")))?;
    let Value::Object(mut fields) = value else {
        return Err(bad_json(None, "not a JSON object".to_owned()));
    };
    let seq = fields.get("seq").and_then(Value::as_u64);
    let Some(seq) = seq.filter(|seq| *seq >= 1) else {
        return Err(bad_json(
            None,
            "no \"seq\" field holding an integer ≥ 1".to_owned(),
        ));
    };
    let (version, mac_field) = match (fields.len(), fields.contains_key("mac")) {
        (6, true) => (2, "mac"),
        (5, false) => (1, "hmac"),
        _ => {
            return Err(bad_json(
                Some(seq),
                "expected exactly the fields seq, time, prev, epoch, event and mac".to_owned(),
            ));
        }
    };
    let take_string = |fields: &mut Map<String, Value>, name: &str| match fields.remove(name) {
        Some(Value::String(text)) => Ok(text),
        _ => Err(bad_json(
            Some(seq),
            format!("\"{name}\" is missing or not a string"),
        )),
    };
    let time = take_string(&mut fields, "time")?;
    let prev_text = take_string(&mut fields, "prev")?;
    let tag_text = take_string(&mut fields, mac_field)?;
    let epoch = if version == 2 {
        match fields.remove("epoch").as_ref().and_then(Value::as_u64) {
            Some(epoch) => Some(epoch),
            None => {
                return Err(bad_json(
                    Some(seq),
                    "\"epoch\" is missing or not an integer".to_owned(),
                ));
            }
        }
    } else {
        None
    };
    let Some(Value::Object(event)) = fields.remove("event") else {
        return Err(bad_json(
            Some(seq),
            "\"event\" is missing or not an object".to_owned(),
        ));
    };
    if parse_rfc3339(&time).is_none() {
        return Err(bad_json(
            Some(seq),
            "\"time\" is not an RFC 3339 timestamp".to_owned(),
        ));
    }
    let Some(prev) = parse_hash(&prev_text) else {
        return Err(bad_json(
            Some(seq),
            "\"prev\" is not 64 lowercase hex digits".to_owned(),
        ));
    };
    let Some(tag) = parse_hash(&tag_text) else {
        return Err(bad_json(
            Some(seq),
            format!("\"{mac_field}\" is not 64 lowercase hex digits"),
        ));
    };
    // A line is canonical in the form the journal writes now, or (written before line
    // separators were escaped) in the legacy form; the MAC input is the form that matched.
    let mut body = record_body(
        seq,
        &time,
        &prev_text,
        epoch,
        &event,
        Strings::NoLineSeparators,
    );
    let mut canonical = seal_line(&body, mac_field, &tag).as_bytes() == bytes;
    if !canonical {
        let legacy = record_body(seq, &time, &prev_text, epoch, &event, Strings::Legacy);
        if legacy != body && seal_line(&legacy, mac_field, &tag).as_bytes() == bytes {
            body = legacy;
            canonical = true;
        }
    }
    Ok(ParsedLine {
        record: Record {
            seq,
            time,
            prev: prev_text,
            epoch,
            event: Value::Object(event),
            mac: tag_text,
            segment,
            line,
            hash: hex(&sha256(bytes)),
        },
        prev,
        body,
        tag,
        canonical,
    })
}

/// The `seq` of a line, read cheaply (for export and seeking); `None` if the line has none.
pub(super) fn peek_seq(bytes: &[u8]) -> Option<u64> {
    let rest = bytes.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Map<String, Value> {
        let value = serde_json::json!({
            "kind": "refused",
            "verb": "echo\u{2028}{\"seq\":1}\u{85}x\u{2029}",
        });
        value.as_object().unwrap().clone()
    }

    #[test]
    fn line_separators_are_escaped_and_legacy_lines_stay_canonical() {
        let prev = "ab".repeat(32);
        let tag = [7u8; 32];
        let body = record_body(
            3,
            "2026-01-01T00:00:00.000Z",
            &prev,
            Some(1),
            &event(),
            Strings::NoLineSeparators,
        );
        let line = seal_line(&body, "mac", &tag);
        assert!(!line.contains(LINE_SEPARATORS), "{line}");
        assert!(line.contains("\\u2028") && line.contains("\\u0085") && line.contains("\\u2029"));
        let parsed = parse_line(line.as_bytes(), 1, 1).ok().unwrap();
        assert!(parsed.canonical);
        assert_eq!(parsed.body, body);
        assert_eq!(parsed.record.event["verb"], event()["verb"]);
        // A line written before the escape: still canonical, with its own bytes as MAC input.
        let legacy = record_body(
            3,
            "2026-01-01T00:00:00.000Z",
            &prev,
            Some(1),
            &event(),
            Strings::Legacy,
        );
        assert_ne!(legacy, body);
        let old_line = seal_line(&legacy, "mac", &tag);
        let parsed = parse_line(old_line.as_bytes(), 1, 1).ok().unwrap();
        assert!(parsed.canonical);
        assert_eq!(parsed.body, legacy);
        // Anything else is still not canonical.
        let edited = old_line.replacen("\u{2028}", "\\u2028 ", 1);
        assert!(!parse_line(edited.as_bytes(), 1, 1).ok().unwrap().canonical);
    }
}
