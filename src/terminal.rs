//! The one escaping function for untrusted text shown to a human on a terminal.
//!
//! Responsibility: an agent controls verb arguments, the `reason` of a proposal, a notifier's
//! stderr and a verb's output. Any of it may reach an approver's screen (`verbd pending`,
//! `verbd result`, `verbd wait`, the messages of `deny`/`resolve`, `verbd audit tail`). [`escape`]
//! makes every character that could change what the human *sees* visible as a `\u{…}` escape:
//! C0/C1 controls (cursor moves, colours, screen clears), bidirectional overrides and isolates
//! (text that reads differently than it runs), zero-width and other invisible format characters
//! (a name that looks like another), line and paragraph separators (a fake new line), and
//! non-ASCII spaces (fake alignment). Everything else passes unchanged, so ordinary non-English
//! text stays readable.
//!
//! Invariant: the output of [`escape`] contains no character for which [`is_hidden`] is true,
//! and no newline, carriage return or tab.
//!
//! The same rule in the two formats the policy tools print for a person to read and paste:
//! [`toml_string`] (a TOML string that loads as the text) and [`json_visible`] (JSON whose
//! values are unchanged).
//!
//! Where values stand side by side (`name=value` pairs on one line, a value after its name), an
//! agent's value could contain what the reader takes for the end of that value: spaces, `=`,
//! quotes, a look-alike of `=`. [`quoted`] writes such a value between `"` with `"` and `\`
//! escaped, so a reader can always tell where it ends; every view of the arguments (`verbd
//! pending`, the notifications of `verbd notify`, `verbd audit tail`) renders values with it.
//!
//! Also here: [`stderr_wants_colour`], whether verbd's own log lines may carry colour escapes.
#![forbid(unsafe_code)]

use crate::protocol::ProposalView;
use std::fmt::Write;

/// Whether verbd's log lines on stderr may be coloured: only on a terminal, and never when
/// `NO_COLOR` is set to anything but the empty string (no-color.org). A file, a pipe or
/// journald gets plain text.
pub fn stderr_wants_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// True for characters that are invisible, reorder text, or act on the terminal: every control
/// character, every format character (Unicode category Cf), the line and paragraph separators,
/// variation selectors, fillers that render as nothing, and whitespace other than the ASCII space.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            // Format characters (Cf): soft hyphen, Arabic number signs and letter mark, Syriac
            // abbreviation mark, Mongolian vowel separator, zero-width space/joiners, LRM/RLM,
            // bidi embeddings/overrides/isolates, word joiner and invisible operators, BOM,
            // interlinear annotation, and the ones outside the BMP.
            '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
            | '\u{0890}'..='\u{0891}' | '\u{08E2}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}' | '\u{110BD}' | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}' | '\u{E0020}'..='\u{E007F}'
            // Line and paragraph separators: a new line to a terminal that honours them.
            | '\u{2028}' | '\u{2029}'
            // Invisible by design: combining grapheme joiner, Mongolian free variation
            // selectors, Khmer inherent vowels, Hangul fillers, variation selectors.
            | '\u{034F}' | '\u{180B}'..='\u{180D}' | '\u{180F}' | '\u{17B4}'..='\u{17B5}'
            | '\u{115F}'..='\u{1160}' | '\u{3164}' | '\u{FFA0}' | '\u{FE00}'..='\u{FE0F}'
            | '\u{E0100}'..='\u{E01EF}'
            // Whitespace that is not the ASCII space: looks like a space, is not one.
            | '\u{00A0}' | '\u{1680}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}'
            | '\u{3000}'
        )
}

/// `text` with every hidden character written as an escape: `\n`, `\r`, `\t` for those three,
/// `\u{hex}` for the others (see the module docs). A literal backslash stays as it is, so an
/// attacker can write text that *looks like* an escape, but never a character that hides.
///
/// ```
/// assert_eq!(verbd::terminal::escape("ok\u{202e}txt.exe\n"), "ok\\u{202e}txt.exe\\n");
/// assert_eq!(verbd::terminal::escape("zero\u{200b}width"), "zero\\u{200b}width");
/// assert_eq!(verbd::terminal::escape("naïve café"), "naïve café");
/// ```
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// `c` as [`escape`] writes it.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        c if is_hidden(c) => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        c => out.push(c),
    }
}

/// Whether `text` may be shown bare among other values: ASCII letters, digits and `._-/:@+%,`
/// only, not empty. No space, `=`, quote, backslash or non-ASCII character (nothing that could
/// end the value, or look like something that does).
pub fn is_plain_word(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"._-/:@+%,".contains(&byte))
}

/// `text` as one unambiguous value among others: bare when it is a plain word
/// ([`is_plain_word`]), otherwise between double quotes with `"` written `\"`, `\` written
/// `\\`, and every hidden character escaped as [`escape`] does. The value ends at the first
/// `"` not preceded by an escaping `\`, so no value can pass for a further `name=value` pair
/// or for the next field of the view.
///
/// ```
/// use verbd::terminal::quoted;
/// assert_eq!(quoted("nginx.service"), "nginx.service");
/// assert_eq!(quoted("/srv/x force=true"), "\"/srv/x force=true\"");
/// assert_eq!(quoted("a\"b\\\u{2028}"), "\"a\\\"b\\\\\\u{2028}\"");
/// assert_eq!(quoted(""), "\"\"");
/// ```
pub fn quoted(text: &str) -> String {
    if is_plain_word(text) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => push_escaped(&mut out, c),
        }
    }
    out.push('"');
    out
}

/// `text` as a TOML basic string (quoted) that decodes to exactly `text` and shows no hidden
/// character: the same characters [`escape`] makes visible are written as TOML escapes (`\n`,
/// `\t`, `\r`, `\u` and four hex digits, `\U` and eight), so a drafted policy line reads on a
/// terminal as it loads. For agent-derived values in TOML that `verbd policy suggest` prints.
///
/// ```
/// assert_eq!(verbd::terminal::toml_string("a\u{202e}b\"c"), "\"a\\u202Eb\\\"c\"");
/// ```
pub fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_hidden(c) && u32::from(c) > 0xFFFF => {
                let _ = write!(out, "\\U{:08X}", u32::from(c));
            }
            c if is_hidden(c) => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// JSON text (as serde_json writes it) with every hidden character inside its strings written as
/// a `\u` escape of four hex digits (a surrogate pair beyond the BMP), so the values are
/// unchanged for a parser and a person who prints the report sees no character that acts on the
/// terminal. serde_json escapes the C0 controls itself; this adds DEL, C1, bidi, invisible and separator characters.
/// Outside strings JSON has only ASCII punctuation and whitespace, which pass unchanged.
pub fn json_visible(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c != '\n' && c != '\t' && c != '\r' && is_hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A copy of `view` with every string a requester (or a verb's output) controls passed through
/// [`escape`]: what the approval notifier gets on stdin, so a notifier that shows the payload to a
/// person shows what `verbd pending` shows.
pub fn escaped_view(view: &ProposalView) -> ProposalView {
    let mut v = view.clone();
    let p = &mut v.proposal;
    p.args = p
        .args
        .iter()
        .map(|(k, val)| (escape(k), escape(val)))
        .collect();
    p.argv = p.argv.iter().map(|a| escape(a)).collect();
    p.pins = p.pins.iter().map(|a| escape(a)).collect();
    if let Some(argv) = &mut p.dry_run_argv {
        *argv = argv.iter().map(|a| escape(a)).collect();
    }
    for text in [
        &mut p.dry_run_output,
        &mut p.reason,
        &mut p.note,
        &mut p.idempotency_key,
        &mut p.requester.user,
    ]
    .into_iter()
    .flatten()
    {
        *text = escape(text);
    }
    if let Some(result) = &mut v.result {
        result.stdout = escape(&result.stdout);
        result.stderr = escape(&result.stderr);
    }
    v
}

/// A proposal as a person reads it (`verbd pending`, `verbd result`, `verbd wait`): every value
/// that is not the daemon's own passes through [`escape`] (argument values through [`quoted`]), so a hostile argument or reason cannot
/// move the cursor, clear the screen, fake lines of this view or hide characters. `socket` is
/// the `--socket` the `approve:` and `deny:` commands need to reach the same daemon (none when
/// they find it by default).
pub fn proposal_text(view: &ProposalView, socket: Option<&std::path::Path>) -> String {
    let p = &view.proposal;
    let mut out = String::new();
    let _ = writeln!(out, "─── proposal {} ({}) ───", p.id, p.state);
    let _ = writeln!(
        out,
        "  verb:        {} ({}) — {}",
        escape(&p.verb),
        escape(&p.category),
        escape(&p.description)
    );
    let user = p
        .requester
        .user
        .as_deref()
        .map_or_else(|| "no user name".to_string(), escape);
    let _ = writeln!(
        out,
        "  requested:   uid {} ({user}) pid {} at {}",
        p.requester.uid, p.requester.pid, view.created_at
    );
    let _ = writeln!(out, "  expires:     {}", view.expires_at);
    for (k, v) in &p.args {
        let _ = writeln!(out, "  arg {:<9} {}", escape(k), quoted(v));
    }
    let _ = writeln!(
        out,
        "  will run:    {}",
        escape(&shell_words::join(&p.argv))
    );
    for pin in &p.pins {
        let _ = writeln!(out, "  path:        {}", escape(pin));
    }
    if let Some(reason) = &p.reason {
        let _ = writeln!(
            out,
            "  reason (UNTRUSTED, written by the requester): {}",
            escape(reason)
        );
    }
    if let Some(output) = &p.dry_run_output {
        let _ = writeln!(out, "  dry run output:");
        for line in output.lines() {
            let _ = writeln!(out, "    | {}", escape(line));
        }
    }
    if p.break_glass {
        let _ = writeln!(
            out,
            "  BREAK-GLASS: run without approval by its requester, in a break_glass role"
        );
    }
    if let Some(quorum) = &p.quorum {
        let _ = writeln!(
            out,
            "  quorum:      {} distinct people{}{}",
            quorum.count,
            if quorum.from.is_empty() {
                String::new()
            } else {
                format!(" from {}", quorum.from.join(", "))
            },
            quorum
                .max_per_role
                .map_or_else(String::new, |m| format!(", at most {m} per role"))
        );
    }
    for a in &p.approvals {
        let who = a
            .user
            .as_deref()
            .map_or_else(String::new, |u| format!(" ({})", escape(u)));
        let role = a
            .role
            .as_deref()
            .map_or_else(String::new, |r| format!(" as {}", escape(r)));
        let _ = writeln!(out, "  approved by: uid {}{who}{role}", a.uid);
    }
    if p.state == crate::proposal::State::Pending
        && let Some(quorum) = &p.quorum
    {
        let _ = writeln!(
            out,
            "  missing:     {} (not the requester, nobody twice)",
            quorum.missing(p.approvals.len())
        );
    }
    if let Some(by) = &p.decided_by {
        let who = by
            .user
            .as_deref()
            .map_or_else(String::new, |u| format!(" ({})", escape(u)));
        let _ = writeln!(out, "  decided by:  uid {}{who}", by.uid);
    }
    if let Some(outcome) = p.outcome {
        let _ = writeln!(out, "  resolved as: {outcome}");
    }
    if let Some(note) = &p.note {
        let _ = writeln!(out, "  note:        {}", escape(note));
    }
    let hash = &p.args_hash;
    let _ = writeln!(out, "  hash:        {hash}");
    if p.state == crate::proposal::State::Pending {
        let socket = socket
            .map(|s| {
                format!(
                    " --socket {}",
                    escape(&shell_words::quote(&s.to_string_lossy()))
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  approve:     verbd approve {} --hash {}{socket}",
            p.id,
            &hash[..hash.len().min(16)]
        );
        let _ = writeln!(
            out,
            "  deny:        verbd deny {} --reason '…'{socket}",
            p.id
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_forms_decode_to_the_text_and_show_nothing_hidden() {
        let text = "a\u{1b}[2K\r\n\t\"\\\u{202e}\u{200b}\u{7f}\u{85}\u{e0041}é end";
        let quoted = toml_string(text);
        assert!(!quoted.chars().any(is_hidden), "{quoted}");
        let table: toml::Table = toml::from_str(&format!("v = {quoted}")).unwrap();
        assert_eq!(table["v"].as_str(), Some(text));
        let json = serde_json::to_string_pretty(&serde_json::json!({ "v": text })).unwrap();
        let visible = json_visible(&json);
        assert!(
            !visible.chars().any(|c| c != '\n' && is_hidden(c)),
            "{visible}"
        );
        let back: serde_json::Value = serde_json::from_str(&visible).unwrap();
        assert_eq!(back["v"].as_str(), Some(text));
    }

    #[test]
    fn every_character_that_hides_is_escaped() {
        for c in [
            '\u{1b}',
            '\u{7f}',
            '\u{9b}',
            '\u{200f}',
            '\u{200b}',
            '\u{2028}',
            '\u{2029}',
            '\u{061c}',
            '\u{00ad}',
            '\u{202e}',
            '\u{2066}',
            '\u{feff}',
            '\u{e0041}',
            '\u{fe0f}',
            '\u{3164}',
            '\u{00a0}',
            '\u{3000}',
        ] {
            let escaped = escape(&format!("a{c}b"));
            assert_eq!(escaped, format!("a\\u{{{:x}}}b", u32::from(c)), "{c:?}");
        }
        assert_eq!(escape("a\nb\tc\rd"), "a\\nb\\tc\\rd");
    }

    /// A reader that knows the quoting: one value from the start of `line` (a `\\u{…}` escape
    /// kept as written, as [`escape`] writes it), and the rest.
    fn read_value(line: &str) -> (String, &str) {
        let Some(inner) = line.strip_prefix('"') else {
            let end = line.find(' ').unwrap_or(line.len());
            return (line[..end].to_string(), &line[end..]);
        };
        let mut value = String::new();
        let mut chars = inner.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'u')) => value.push_str("\\u"),
                    Some((_, c)) => value.push(c),
                    None => panic!("a lone backslash ends {line}"),
                },
                '"' => return (value, &inner[at + 1..]),
                c => value.push(c),
            }
        }
        panic!("unterminated value: {line}")
    }

    #[test]
    fn a_quoted_value_ends_where_it_ends() {
        for hostile in [
            "/srv/app/cache force=false dry_run=true",
            "ok\" requester: uid 0 (root); hash: 0000000000000000",
            "x\\\" y=\"z",
            "force\u{ff1d}true 'q', a;b",
            "trailing backslash \\",
            "line\u{2028}approve: verbd approve 9",
            "",
        ] {
            let shown = quoted(hostile);
            assert!(shown.starts_with('"'), "{shown}");
            assert!(!shown.chars().any(is_hidden), "{shown}");
            let line = format!("{shown} next=1");
            let (value, rest) = read_value(&line);
            assert_eq!(value, escape(hostile), "{shown}");
            assert_eq!(rest, " next=1", "{shown}");
        }
        for plain in ["nginx.service", "/srv/app", "web-7", "a,b:c@d+e%f"] {
            assert_eq!(quoted(plain), plain);
        }
    }

    #[test]
    fn readable_text_passes_unchanged() {
        for text in [
            "nginx.service",
            "scale web to 3",
            "Grüße, 東京, مرحبا",
            "a\\u{202e}",
        ] {
            assert_eq!(escape(text), text);
        }
    }
}
