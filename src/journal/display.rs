//! One-line human rendering of a record for `verbd audit tail`. Every string that came from an
//! event (arguments are attacker-controlled) is shown as `terminal::quoted` writes it (the one
//! rule for values shown side by side): bare only when it is a plain word, otherwise quoted
//! with `"` and `\` escaped; control characters and invisible/bidirectional formatting
//! characters are always written as escapes (the set `terminal::is_hidden` defines for every
//! view of untrusted text), so a hostile value can neither start a new line,
//! move the cursor, recolour the terminal nor pass itself off as another field.
#![forbid(unsafe_code)]

use std::fmt::Write;

use serde_json::{Map, Value};

use super::Record;

/// Fields shown first, in this order, when the event has them.
const LEADING_FIELDS: &[&str] = &[
    "caller",
    "verb",
    "args",
    "decision",
    "reason",
    "proposal",
    "status",
    "exit_code",
    "exit",
    "signal",
    "duration_ms",
];

/// Longest rendering of one value before it is cut (the full record is in `--json`).
const MAX_VALUE_CHARS: usize = 200;

/// Renders `record` as one line: time, `#seq`, kind, then `name=value` for the event's fields
/// (the common ones first, the rest in key order). Never contains a raw control character.
pub fn format_record(record: &Record) -> String {
    let mut out = String::with_capacity(160);
    push_text(&mut out, &record.time);
    let _ = write!(out, " #{}", record.seq);
    let Value::Object(fields) = &record.event else {
        out.push(' ');
        out.push_str(&render_value(&record.event));
        return out;
    };
    if let Some(kind) = fields.get("kind") {
        out.push(' ');
        out.push_str(&render_value(kind));
    }
    for name in LEADING_FIELDS {
        if let Some(value) = fields.get(*name) {
            push_field(&mut out, name, value);
        }
    }
    for (name, value) in sorted(fields) {
        if name != "kind" && !LEADING_FIELDS.contains(&name.as_str()) {
            push_field(&mut out, name, value);
        }
    }
    out
}

fn sorted(fields: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = fields.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

fn push_field(out: &mut String, name: &str, value: &Value) {
    out.push(' ');
    push_text(out, name);
    out.push('=');
    let rendered = match (name, value) {
        ("caller", Value::Object(caller)) => render_caller(caller),
        _ => render_value(value),
    };
    out.push_str(&rendered);
}

/// `alice(1000) pid 4242`-style caller: `user(uid)` then `/pid`, whatever parts exist.
fn render_caller(caller: &Map<String, Value>) -> String {
    let (Some(uid), user, pid) = (caller.get("uid"), caller.get("user"), caller.get("pid")) else {
        return render_value(&Value::Object(caller.clone()));
    };
    let mut out = String::new();
    if let Some(user) = user.filter(|user| !user.is_null()) {
        out.push_str(&render_value(user));
    }
    let _ = write!(out, "({})", render_value(uid));
    if let Some(pid) = pid {
        let _ = write!(out, "/pid:{}", render_value(pid));
    }
    out
}

fn render_value(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    if out.chars().count() > MAX_VALUE_CHARS {
        let cut: String = out.chars().take(MAX_VALUE_CHARS).collect();
        let omitted = out.len() - cut.len();
        return format!("{cut}…(+{omitted} bytes)");
    }
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::String(text) => push_text(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            out.push('{');
            for (index, (name, item)) in sorted(fields).into_iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                push_text(out, name);
                out.push('=');
                write_value(out, item);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Appends `text` as [`crate::terminal::quoted`] writes it: bare if it is a plain word, else
/// quoted and escaped.
fn push_text(out: &mut String, text: &str) {
    out.push_str(&crate::terminal::quoted(text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_bare_and_others_are_quoted() {
        let mut out = String::new();
        push_text(&mut out, "nginx.service");
        assert_eq!(out, "nginx.service");
        out.clear();
        push_text(&mut out, "a b=c\"\\\u{1b}[2J\u{202e}");
        assert_eq!(out, "\"a b=c\\\"\\\\\\u{1b}[2J\\u{202e}\"");
        out.clear();
        push_text(&mut out, "");
        assert_eq!(out, "\"\"");
    }
}
