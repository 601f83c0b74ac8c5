//! Unit tests of the scrubber: every literal and encoded form of a secret, policy patterns,
//! the private-key block, and the stream's holds and cuts (what a cut may show and withhold).

use super::*;
use crate::secrets::SecretValue;
use std::collections::BTreeMap;

fn store(pairs: &[(&str, &[u8])]) -> SecretStore {
    let values: BTreeMap<String, SecretValue> = pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), SecretValue::new(value.to_vec())))
        .collect();
    SecretStore::from_values(values)
}

/// A scrubber with no secrets and one policy pattern.
fn pattern_scrubber(name: &str, regex: &str) -> Scrubber {
    let pattern = ScrubPattern {
        name: name.to_owned(),
        regex: regex.to_owned(),
    };
    Scrubber::new(&SecretStore::empty(), &[pattern], false).unwrap()
}

#[test]
fn builtins_compile() {
    Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
}

#[test]
fn base64_cores_appear_inside_longer_blobs() {
    let secret = b"correct-horse-battery-staple";
    for prefix_len in 0..6 {
        let mut blob = vec![b'x'; prefix_len];
        blob.extend_from_slice(secret);
        blob.extend_from_slice(b"trailing bytes");
        let encoded = STANDARD.encode(&blob);
        let core = base64_core(&STANDARD_NO_PAD, secret, prefix_len % 3);
        assert!(
            encoded
                .as_bytes()
                .windows(core.len())
                .any(|w| w == core.as_slice()),
            "offset {prefix_len}: core not found in {encoded}"
        );
    }
}

#[test]
fn overlapping_literals_merge_into_one_marker() {
    let scrubber = Scrubber::new(
        &store(&[("a", b"secret-alpha-123"), ("b", b"alpha-123-omega-9")]),
        &[],
        false,
    )
    .unwrap();
    let out = scrubber.scrub(b"x secret-alpha-123-omega-9 y");
    assert_eq!(out, b"x [REDACTED:a] y");
}

#[test]
fn policy_pattern_with_secret_group_keeps_prefix() {
    let scrubber = pattern_scrubber("ticket", r"ticket=(?P<secret>[0-9]{6})");
    assert_eq!(
        scrubber.scrub(b"ok ticket=123456 done\n"),
        b"ok ticket=[REDACTED:ticket] done\n"
    );
}

/// A line too long to hold is cut, but never inside a token: an AWS key straddling the
/// place where the cut would fall, at several offsets, comes out whole as one marker —
/// also when complete lines come before the long one in the same chunk.
#[test]
fn a_long_line_is_never_cut_inside_a_token() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    let key = b"AKIAABCDEFGHIJKLMNOP";
    for (lead, offset) in [&b""[..], b"a first line\n"]
        .into_iter()
        .flat_map(|lead| [0usize, 5, 10, 19].map(|offset| (lead, offset)))
    {
        let total = MAX_HELD_LINE + 2 * LONG_LINE_OVERLAP;
        let mut line = lead.to_vec();
        let total = total + lead.len();
        line.resize(total, b'x');
        line.push(b' ');
        let start = total - LONG_LINE_OVERLAP - offset;
        line[start - 1] = b' ';
        line[start..start + key.len()].copy_from_slice(key);
        line[start + key.len()] = b' ';
        let mut stream = scrubber.stream();
        let mut out = stream.push(&line);
        out.extend(stream.push(b"tail\n"));
        out.extend(stream.finish());
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("AKIA"), "offset {offset}: the key leaked");
        assert_eq!(
            text.matches("[REDACTED:aws-access-key]").count(),
            1,
            "offset {offset}"
        );
    }
}

/// An incomplete line is held whole until its newline, also when a whole secret sits in
/// it: releasing the part before the secret would split the line that line-based patterns
/// need to see at once.
#[test]
fn an_incomplete_line_holding_a_secret_is_held_whole() {
    let scrubber = Scrubber::new(&store(&[("k", b"s3cr3t-value-xyz")]), &[], false).unwrap();
    // Past the withheld tail (the stream always keeps its last bytes), so the first line
    // can go out.
    let filler = "b".repeat(CUT_WITHHELD_TAIL + 300);
    let first = format!("{}\n", "a".repeat(300));
    let open_line = format!("abc s3cr3t-value-xyz {filler}");
    let mut stream = scrubber.stream();
    let released = stream.push(format!("{first}{open_line}").as_bytes());
    assert_eq!(String::from_utf8(released).unwrap(), first);
    let mut rest = stream.push(b" more\n");
    rest.extend(stream.finish());
    assert_eq!(
        String::from_utf8(rest).unwrap(),
        format!("abc [REDACTED:k] {filler} more\n")
    );
}

/// Every form of `secret` a live stream must never show a piece of (the forms that leak
/// most when cut: raw, base64 and its 76-column wrap, hex).
fn live_leaks(emitted: &[u8], secret: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(emitted);
    let b64 = STANDARD.encode(secret);
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let mut leaks = Vec::new();
    for (name, form) in [
        ("raw", String::from_utf8_lossy(secret).into_owned()),
        ("base64", b64.clone()),
        ("hex", hex),
    ] {
        // Any 12-byte piece of a form is a leak.
        for start in 0..form.len().saturating_sub(12) {
            if text.contains(&form[start..start + 12]) {
                leaks.push(format!("{name} piece at {start}"));
                break;
            }
        }
    }
    leaks
}

/// The attack on live delivery: a verb writes the secret one byte at a time (each write a
/// chunk of its own), in every form, with lines around it; whatever is emitted while it
/// runs, and whatever a cut at any byte shows, never holds a piece of a form.
#[test]
fn a_live_stream_never_emits_a_piece_of_a_secret_written_byte_by_byte() {
    let secret = b"s3cr3t-live-stream-value-0123456789-abcdefghijklmnop-XYZ-0987654321".to_vec();
    let secrets = store(&[("TOKEN", &secret)]);
    let scrubber = Scrubber::new(&secrets, &[], true).unwrap();
    let wrapped: String = STANDARD
        .encode(&secret)
        .as_bytes()
        .chunks(76)
        .map(|line| String::from_utf8_lossy(line).into_owned() + "\n")
        .collect();
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let output = format!(
        "first line\nraw {} end\nb64 {}\nwrapped:\n{wrapped}hex {hex}\nlast line\n",
        String::from_utf8_lossy(&secret),
        STANDARD.encode(&secret),
    );
    let bytes = output.as_bytes();
    for cut_at in [bytes.len(), bytes.len() / 2, 7, 40, 100, 150, 200] {
        let mut stream = scrubber.live_stream();
        let mut emitted = Vec::new();
        for byte in &bytes[..cut_at] {
            emitted.extend(stream.push(std::slice::from_ref(byte)));
            assert_eq!(live_leaks(&emitted, &secret), Vec::<String>::new());
        }
        if cut_at == bytes.len() {
            emitted.extend(stream.finish());
        } else {
            let cut = stream.finish_live_cut();
            emitted.extend(cut.bytes);
        }
        assert_eq!(
            live_leaks(&emitted, &secret),
            Vec::<String>::new(),
            "cut at {cut_at}: {}",
            String::from_utf8_lossy(&emitted)
        );
    }
}

/// A live stream delivers each complete line at once when no secret form spans lines, and
/// holds one line behind when a form does (a 57+ byte secret wraps in base64); what it
/// emits in total equals the whole-buffer scrub.
#[test]
fn a_live_stream_emits_complete_lines_at_once() {
    let scrubber = Scrubber::new(&store(&[("SHORT", b"short-secret-1")]), &[], true).unwrap();
    let mut stream = scrubber.live_stream();
    assert_eq!(stream.push(b"one\ntw"), b"one\n");
    assert_eq!(
        stream.push(b"o short-secret-1\n"),
        b"two [REDACTED:SHORT]\n"
    );
    assert_eq!(stream.push(b"partial"), b"");
    let cut = stream.finish_live_cut();
    assert_eq!((cut.bytes, cut.withheld), (Vec::new(), 7));

    let long = [b'q'; 64];
    let scrubber = Scrubber::new(&store(&[("LONG", &long)]), &[], true).unwrap();
    let mut stream = scrubber.live_stream();
    assert_eq!(stream.push(b"one\n"), b"one\n");
    let hash_line = format!("sha {}\n", "ab12".repeat(16));
    assert_eq!(stream.push(hash_line.as_bytes()), b"");
    assert_eq!(
        stream.push(b"two\n"),
        [hash_line.as_bytes(), b"two\n"].concat()
    );
    assert_eq!(stream.push(b"three\n"), b"three\n");

    let with_newline = Scrubber::new(&store(&[("PEM", b"line-one\nline-two")]), &[], true).unwrap();
    let mut stream = with_newline.live_stream();
    assert_eq!(stream.push(b"one\n"), b"");
    assert_eq!(stream.push(b"two\n"), b"one\n");
    assert_eq!(stream.finish(), b"two\n");

    let text = b"a\nbb\nqqqq\n".repeat(40);
    let mut stream = scrubber.live_stream();
    let mut emitted = Vec::new();
    for piece in text.chunks(3) {
        emitted.extend(stream.push(piece));
    }
    emitted.extend(stream.finish());
    assert_eq!(emitted, scrubber.scrub(&text));
}

/// A private key block split across chunks is swallowed to its END marker: the body in the
/// second chunk never comes out.
#[test]
fn a_private_key_split_across_chunks_is_swallowed_whole() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    let mut stream = scrubber.stream();
    let mut out = stream.push(b"before\n-----BEGIN PRIVATE KEY-----\n");
    out.extend(stream.push("FIRSTHALF".repeat(200).as_bytes()));
    out.extend(stream.push("SECONDHALF".repeat(200).as_bytes()));
    out.extend(stream.push(b"\n-----END PRIVATE KEY-----\nafter\n"));
    out.extend(stream.finish());
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("HALF"), "{text}");
    assert!(
        text.starts_with("before\n") && text.ends_with("after\n"),
        "{text}"
    );
}

/// An unterminated private key block swallows exactly `MAX_PRIVATE_KEY_BLOCK` bytes, then
/// output flows again (also when the block is fed in pieces that end exactly at the cap).
#[test]
fn an_unterminated_private_key_swallows_exactly_its_cap() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    let mut stream = scrubber.stream();
    let mut out = stream.push(b"-----BEGIN PRIVATE KEY-----\n");
    for _ in 0..(MAX_PRIVATE_KEY_BLOCK / 1024) {
        out.extend(stream.push(&[b'k'; 1024]));
    }
    out.extend(stream.push(b"\nvisible again\n"));
    out.extend(stream.finish());
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("visible again"), "{}", text.len());
    assert!(!text.contains("kkkk"), "the key body leaked");
}

/// A block's cap is where it ends even when an END marker comes later: what follows the
/// cap is output again (scrubbed), however the stream is chunked, and a late END marker does
/// not swallow it.
#[test]
fn a_private_key_block_ends_at_its_cap_when_its_end_marker_comes_later() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], true).unwrap();
    // The cap counts the bytes after the BEGIN marker.
    let mut input = b"-----BEGIN PRIVATE KEY-----".to_vec();
    input.extend(vec![b'k'; MAX_PRIVATE_KEY_BLOCK]);
    input.extend(format!("\nafter the cap {}\n", "v".repeat(200)).as_bytes());
    input.extend(b"-----END PRIVATE KEY-----\ntail\n");
    for chunk in [input.len(), 4096, 1000] {
        let mut stream = scrubber.stream();
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            out.extend(stream.push(piece));
        }
        out.extend(stream.finish());
        let expected = format!(
            "[REDACTED:private-key]\nafter the cap {}\n-----END PRIVATE KEY-----\ntail\n",
            "v".repeat(200)
        );
        assert_eq!(String::from_utf8_lossy(&out), expected, "chunks of {chunk}");
    }
}

/// An empty value (the loader refuses one, but a store can be built without it) has no form to
/// look for: the scrubber builds, and a secret beside it is still redacted in every form.
#[test]
fn an_empty_secret_value_has_no_forms_and_hides_nothing_else() {
    let scrubber = Scrubber::new(
        &store(&[("EMPTY", b""), ("PW", b"hunter2-long")]),
        &[],
        false,
    )
    .unwrap();
    assert_eq!(
        scrubber.scrub(b"plain text, hunter2-long and aHVudGVyMi1sb25n\n"),
        b"plain text, [REDACTED:PW] and [REDACTED:PW]\n"
    );
}

/// Only a whole marker is left alone: a captured value that merely starts like one, or ends
/// in `]`, is a value and is redacted (a loose check would let `pass=hunter2]` through).
#[test]
fn only_a_whole_redaction_marker_is_left_alone() {
    let scrubber = pattern_scrubber("pass", r"pass=(?P<secret>\S+)");
    for value in [
        "hunter2]",
        "[REDACTED-but-not]x",
        "[REDACTED:a]b]",
        "[REDACTEDx",
    ] {
        let line = format!("pass={value} end\n");
        assert_eq!(
            scrubber.scrub(line.as_bytes()),
            b"pass=[REDACTED:pass] end\n",
            "{value}"
        );
    }
    assert_eq!(
        scrubber.scrub(b"pass=[REDACTED:x] end\n"),
        b"pass=[REDACTED:x] end\n"
    );
}

/// Policy patterns are applied line by line: a pattern that may match whitespace (`\s*`)
/// ends its match before the newline, so no line break is ever replaced or joined.
#[test]
fn a_policy_pattern_never_takes_the_line_break() {
    let scrubber = pattern_scrubber("tok", r"tok=\S+\s*");
    assert_eq!(
        scrubber.scrub(b"a tok=abc  \nb tok=def\nc\n"),
        b"a [REDACTED:tok]\nb [REDACTED:tok]\nc\n"
    );
}

/// The debug form (what a log at trace level may show) counts what the scrubber holds and
/// shows none of it.
#[test]
fn the_debug_form_counts_and_shows_no_secret() {
    let pattern = ScrubPattern {
        name: "tok".into(),
        regex: "tok=\\S+".into(),
    };
    let scrubber = Scrubber::new(
        &store(&[("db", b"hunter2-horse-battery")]),
        &[pattern],
        false,
    )
    .unwrap();
    let debug = format!("{scrubber:?}");
    assert!(
        debug.starts_with("Scrubber { secrets: 1, literal_forms: ")
            && debug.ends_with(", builtin_patterns: 0, policy_patterns: 1 }"),
        "{debug}"
    );
    assert!(
        !debug.contains("hunter2") && !debug.contains("tok="),
        "{debug}"
    );
    // A stream holding part of a line shows how much it holds, never what.
    let mut stream = scrubber.stream();
    assert!(stream.push(b"tok=abc hunter2-horse").is_empty());
    let debug = format!("{stream:?}");
    assert_eq!(
        debug,
        "ScrubStream { held_bytes: 21, in_private_key: false }"
    );
}

/// An incomplete line is held, not cut, until it is longer than [`MAX_HELD_LINE`]: so
/// line-based patterns see it whole.
#[test]
fn an_incomplete_line_is_held_whole_up_to_the_line_limit() {
    let scrubber = Scrubber::new(&SecretStore::empty(), &[], false).unwrap();
    // 32 KiB past the withheld tail: half the documented 64 KiB limit.
    let open_line = "b".repeat(32 * 1024 + CUT_WITHHELD_TAIL);
    // Complete lines before it (40 KiB) go out; they do not count against its limit.
    let complete = format!("{}\n", "a".repeat(1023)).repeat(40);
    let mut stream = scrubber.stream();
    let released = stream.push(format!("{complete}{open_line}").as_bytes());
    assert_eq!(String::from_utf8(released).unwrap(), complete);
    let mut rest = stream.push(b"\n");
    rest.extend(stream.finish());
    assert_eq!(rest, format!("{open_line}\n").into_bytes());
}

/// One policy-pattern match longer than a line may be held whole (up to
/// [`MAX_HELD_MATCH`]) is still replaced whole: the cut of the long line waits for it
/// instead of splitting it and letting its tail through.
#[test]
fn a_policy_match_longer_than_a_held_line_is_replaced_whole() {
    let scrubber = pattern_scrubber("blob", r"blob=[a-z]+");
    // 128 KiB alone in small chunks, and 600 KiB after 600 KiB of complete lines, all in
    // one chunk (the complete lines do not count against the 1 MiB a match may hold).
    let complete = format!("{}\n", "a".repeat(1023)).repeat(600);
    let cases = [
        ("", 128 * 1024, 4096),
        (complete.as_str(), 600 * 1024, usize::MAX),
    ];
    for (lead, value_len, chunk_len) in cases {
        let value = "q".repeat(value_len);
        let text = format!("{lead}blob={value} end\n");
        let mut stream = scrubber.stream();
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(chunk_len) {
            out.extend(stream.push(chunk));
        }
        out.extend(stream.finish());
        let out = String::from_utf8(out).unwrap();
        assert!(
            out == format!("{lead}[REDACTED:blob] end\n"),
            "a match of {value_len} bytes was not replaced whole: {} q's left",
            out.matches('q').count()
        );
    }
}

/// Past [`MAX_HELD_MATCH`] the stream bounds its memory instead: a match that never ends
/// is cut (its first part replaced), and output flows before the stream ends.
#[test]
fn a_match_longer_than_the_match_limit_is_cut_to_bound_memory() {
    let scrubber = pattern_scrubber("blob", r"blob=[a-z]+");
    let mut stream = scrubber.stream();
    let mut released = stream.push(b"blob=");
    let chunk = vec![b'q'; 64 * 1024];
    // 1.5 MiB of one match, no newline.
    for _ in 0..24 {
        released.extend(stream.push(&chunk));
    }
    assert!(
        released.starts_with(b"[REDACTED:blob]"),
        "nothing of a 1.5 MiB line went out before its end: {} bytes",
        released.len()
    );
}

/// A secret holding a quote and a backslash is redacted where it appears JSON-escaped,
/// whatever follows it: its escaped form is the escaped value alone, not the quoted string.
#[test]
fn a_json_escaped_secret_is_redacted_wherever_it_ends() {
    let scrubber = Scrubber::new(&store(&[("Q", br#"pa"ss\word-1234"#)]), &[], false).unwrap();
    assert_eq!(
        scrubber.scrub(br#"{"a": "x pa\"ss\\word-1234 y"}"#),
        br#"{"a": "x [REDACTED:Q] y"}"#
    );
}

/// What a cut stream shows, pushed in chunks of 1,000 bytes, and how much it withholds.
fn shown_at_a_cut(scrubber: &Scrubber, output: &[u8]) -> (Vec<u8>, u64) {
    let mut stream = scrubber.stream();
    let mut shown = Vec::new();
    for chunk in output.chunks(1000) {
        shown.extend(stream.push(chunk));
    }
    let cut = stream.finish_cut();
    shown.extend(cut.bytes);
    (shown, cut.withheld)
}

/// Where a stream is cut, the withheld tail ends exactly where a whole secret form or a
/// complete token begins that its fixed length would split: nothing of the secret or the
/// token is shown, and nothing before it is withheld. Each for every place the fixed cut
/// can fall inside it, on a line with lines before and after it; a cut that falls just
/// before it or just after it moves nothing (the form shown whole is redacted).
#[test]
fn a_cut_withholds_from_the_start_of_a_form_or_token_it_would_split_and_no_more() {
    let secret: &[u8] = b"hunter2-correct-horse-battery";
    let key: &[u8] = b"AKIAABCDEFGHIJKLMNOP";
    let scrubber = Scrubber::new(&store(&[("DB", secret)]), &[], true).unwrap();
    assert_eq!(scrubber.withheld_tail(), CUT_WITHHELD_TAIL);
    for (whole, marker) in [
        (secret, "[REDACTED:DB]"),
        (key, "[REDACTED:aws-access-key]"),
    ] {
        for inside in 0..=whole.len() {
            let mut output = b"a first line\nand a second\n".repeat(40);
            output.extend_from_slice(b"value: ");
            let start = output.len();
            output.extend_from_slice(whole);
            output.extend_from_slice(b" and the rest of its line\n");
            // The fixed cut falls `inside` bytes into the form.
            let total = start + inside + CUT_WITHHELD_TAIL;
            while output.len() < total {
                output.extend_from_slice(b"more output\n");
            }
            output.truncate(total);
            let (shown, withheld) = shown_at_a_cut(&scrubber, &output);
            let name = String::from_utf8_lossy(whole);
            let mut expected = String::from_utf8_lossy(&output[..start]).into_owned();
            let withheld_from = if inside == whole.len() {
                expected.push_str(marker);
                start + inside
            } else {
                start
            };
            assert_eq!(
                String::from_utf8_lossy(&shown),
                expected,
                "{name}, cut {inside} bytes in: shown"
            );
            assert_eq!(
                withheld,
                (total - withheld_from) as u64,
                "{name}, cut {inside} bytes in: withheld"
            );
        }
    }
}

/// A live stream that holds back a line ending in a base64 run (a wrapped form may go on)
/// releases the lines before it whole, newline included: never a cut inside one, which
/// would split a token at its end (an AWS key without its last character is no key).
#[test]
fn a_live_stream_holding_a_base64_line_releases_the_lines_before_it_whole() {
    let scrubber = Scrubber::new(&store(&[("LONG", &[b'q'; 64])]), &[], true).unwrap();
    let hash_line = format!("sha {}\n", "ab12".repeat(16));
    let mut stream = scrubber.live_stream();
    let released = stream.push(format!("key AKIAABCDEFGHIJKLMNOP\n{hash_line}").as_bytes());
    assert_eq!(
        String::from_utf8(released).unwrap(),
        "key [REDACTED:aws-access-key]\n"
    );
    assert_eq!(stream.finish(), hash_line.as_bytes());
}
