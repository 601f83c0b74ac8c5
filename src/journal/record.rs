//! The byte format of one journal line: canonical JSON, the HMAC key, building a line at append
//! time and checking a line at read time. Everything that decides "is this line authentic" lives
//! here so the writer and the readers cannot drift apart.
#![forbid(unsafe_code)]

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{ProblemKind, Record, parse_rfc3339};

/// Length of the HMAC key in bytes.
pub(super) const KEY_BYTES: usize = 32;
/// Hash of "no previous line", the `prev` of seq 1.
pub(super) const ZERO_HASH: [u8; 32] = [0; 32];
/// Longest line the journal writes or reads (a proposal may carry dry-run output).
pub(super) const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// The journal's HMAC-SHA256 key, kept only as the keyed MAC state.
pub(super) struct JournalKey {
    mac: Hmac<Sha256>,
}

impl JournalKey {
    pub(super) fn new(key: &[u8; KEY_BYTES]) -> JournalKey {
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
            .expect("HMAC-SHA256 accepts keys of any length");
        JournalKey { mac }
    }

    pub(super) fn tag(&self, body: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(body);
        let mut tag = [0u8; 32];
        tag.copy_from_slice(&mac.finalize().into_bytes());
        tag
    }

    /// Constant-time comparison of `tag` with the HMAC of `body`.
    pub(super) fn verify(&self, body: &[u8], tag: &[u8; 32]) -> bool {
        let mut mac = self.mac.clone();
        mac.update(body);
        mac.verify_slice(tag).is_ok()
    }
}

pub(super) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&Sha256::digest(bytes));
    hash
}

pub(super) use crate::digest::hex;

/// Parses exactly 64 lowercase hex digits (the only form the journal writes).
pub(super) fn parse_hash(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut hash = [0u8; 32];
    for (index, pair) in bytes.chunks_exact(2).enumerate() {
        hash[index] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(hash)
}

/// Writes `value` as canonical JSON: no whitespace, object keys sorted by their UTF-8 bytes at
/// every depth, strings and numbers exactly as serde_json writes them. Independent of serde_json's
/// `preserve_order` feature.
pub(super) fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_canonical_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The HMAC input of a record: `{"seq":N,"time":"T","prev":"P","event":E}` with `E` canonical.
pub(super) fn record_body(seq: u64, time: &str, prev: &str, event: &Map<String, Value>) -> String {
    let mut body = String::with_capacity(128);
    body.push_str("{\"seq\":");
    body.push_str(&seq.to_string());
    body.push_str(",\"time\":");
    body.push_str(&Value::String(time.to_owned()).to_string());
    body.push_str(",\"prev\":\"");
    body.push_str(prev);
    body.push_str("\",\"event\":");
    write_canonical_object(event, &mut body);
    body.push('}');
    body
}

fn write_canonical_object(map: &Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (index, (key, item)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push(':');
        write_canonical(item, out);
    }
    out.push('}');
}

/// The full line (without its newline): the body with `,"hmac":"H"` before the closing brace.
pub(super) fn seal(body: &str, tag: &[u8; 32]) -> String {
    let mut line = String::with_capacity(body.len() + 80);
    line.push_str(&body[..body.len() - 1]);
    line.push_str(",\"hmac\":\"");
    line.push_str(&hex(tag));
    line.push_str("\"}");
    line
}

/// Why one line is not an authentic record.
pub(super) struct LineFault {
    pub(super) kind: ProblemKind,
    pub(super) seq: Option<u64>,
    pub(super) message: String,
}

/// What a line claims, before its HMAC is trusted.
pub(super) struct CheckedLine {
    pub(super) record: Record,
    pub(super) prev: [u8; 32],
}

/// Parses one line (without its newline) and checks its shape, canonical form and HMAC.
/// `line` is the 1-based line number stored in the returned record.
pub(super) fn check_line(
    bytes: &[u8],
    line: u64,
    key: &JournalKey,
) -> Result<CheckedLine, LineFault> {
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
    if fields.len() != 5 {
        return Err(bad_json(
            Some(seq),
            "expected exactly the fields seq, time, prev, event and hmac".to_owned(),
        ));
    }
    let take_string = |fields: &mut Map<String, Value>, name: &str| match fields.remove(name) {
        Some(Value::String(text)) => Ok(text),
        _ => Err(bad_json(
            Some(seq),
            format!("\"{name}\" is missing or not a string"),
        )),
    };
    let time = take_string(&mut fields, "time")?;
    let prev_text = take_string(&mut fields, "prev")?;
    let hmac_text = take_string(&mut fields, "hmac")?;
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
    let Some(tag) = parse_hash(&hmac_text) else {
        return Err(bad_json(
            Some(seq),
            "\"hmac\" is not 64 lowercase hex digits".to_owned(),
        ));
    };

    let body = record_body(seq, &time, &prev_text, &event);
    if !key.verify(body.as_bytes(), &tag) {
        return Err(LineFault {
            kind: ProblemKind::BadHmac,
            seq: Some(seq),
            message: format!("record seq {seq} was altered or forged: its HMAC does not match"),
        });
    }
    if seal(&body, &tag).as_bytes() != bytes {
        return Err(LineFault {
            kind: ProblemKind::NotCanonical,
            seq: Some(seq),
            message: format!(
                "record seq {seq} was re-formatted (its bytes are not the canonical form the \
                 journal writes; the content still matches its HMAC)"
            ),
        });
    }
    Ok(CheckedLine {
        record: Record {
            seq,
            time,
            prev: prev_text,
            event: Value::Object(event),
            hmac: hmac_text,
            line,
            hash: hex(&sha256(bytes)),
        },
        prev,
    })
}
