//! Output scrubbing is not an oracle (issue 11, item 1).
//!
//! The attack: a hostile agent uid that can make a verb return bytes it chose (write a note,
//! read it back; `cat` or `tail -f` of a file it can write) ends the output with a guess at the
//! start of a loaded secret, in any encoding the scrubber knows. If whether or where the output
//! is redacted depended on the guess being a prefix of the secret, the agent could recover the
//! secret one character at a time. Each test here sends the guesses as uid 61301 to a real
//! daemon and requires the response to a correct guess to be the response to a wrong guess of
//! the same length: at the natural end of the output (through the one-shot scrubber of
//! `file.read` and the streaming scrubber of an exec verb), at a `max_output` cut and at a
//! timeout cut. Only `duration_ms` (timing is out of scope) is ignored.
use crate::common;
use crate::hostile;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use common::harness::write_secret;
use common::policy::{Category, Policy, Sandbox, Secret, Verb};
use common::*;
use std::collections::BTreeMap;
use verbd::protocol::{Request, Response};

const AGENT: u32 = 61301;
/// 16 characters; `"` gives a distinct JSON form, ` ` a distinct form encoding, `/` and `+`
/// distinct base64url and percent forms.
const SECRET: &str = "Zq7\"vP2 x/m+K9%w";
/// `max_output` of the capped verb.
const CAP: usize = 8192;

fn policy() -> Policy {
    let notes_reader = |command: &str, description: &str| {
        Verb::command(Category::ReadOnly, command)
            .description(description)
            .roles(&["agent"])
            .sandbox("notes")
    };
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .secret("tok", Secret::File("@DIR@/tok".into()))
        .sandbox(
            "notes",
            Sandbox {
                read: Some(
                    ["/usr", "/lib", "/etc", "@DIR@/notes"]
                        .map(String::from)
                        .to_vec(),
                ),
                ..Sandbox::default()
            },
        )
        .verb(
            "note-write",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/notes"])
                .description("write a note")
                .without_approval()
                .roles(&["agent"]),
        )
        .verb(
            "note-read",
            Verb::builtin(Category::ReadOnly, "file.read", &["@DIR@/notes"])
                .description("read a note back")
                .roles(&["agent"]),
        )
        .verb(
            "note-cat",
            notes_reader("/usr/bin/cat @DIR@/notes/end.txt", "cat the end note"),
        )
        .verb(
            "note-cat-capped",
            notes_reader(
                "/usr/bin/cat @DIR@/notes/cut.txt",
                "cat the cut note, capped",
            )
            .max_output("8KiB"),
        )
        .verb(
            "note-follow",
            notes_reader(
                "/usr/bin/tail -c +1 -f @DIR@/notes/end.txt",
                "follow the end note until the timeout",
            )
            .timeout("300ms"),
        )
}

fn start() -> Option<Daemon> {
    if !require_root("scrub oracle") {
        return None;
    }
    let d = Daemon::start_with(&policy().render(), |dir| {
        write_secret(&dir.join("tok"), &format!("{SECRET}\n"));
        std::fs::create_dir(dir.join("notes")).unwrap();
    });
    d.open_socket();
    Some(d)
}

fn percent(value: &[u8], digits: &[u8; 16], space_as_plus: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else if b == b' ' && space_as_plus {
            out.push(b'+');
        } else {
            out.extend_from_slice(&[
                b'%',
                digits[usize::from(b >> 4)],
                digits[usize::from(b & 15)],
            ]);
        }
    }
    out
}

/// Every encoded form of the secret the scrubber redacts, named, computed here independently.
fn forms() -> Vec<(String, String)> {
    let value = SECRET.as_bytes();
    let json = serde_json::to_string(SECRET).unwrap();
    let mut forms: Vec<(String, Vec<u8>)> = vec![
        ("raw".into(), value.to_vec()),
        ("json".into(), json.as_bytes()[1..json.len() - 1].to_vec()),
        ("base64".into(), STANDARD.encode(value).into_bytes()),
        (
            "base64-nopad".into(),
            STANDARD_NO_PAD.encode(value).into_bytes(),
        ),
        ("base64url".into(), URL_SAFE.encode(value).into_bytes()),
        (
            "base64url-nopad".into(),
            URL_SAFE_NO_PAD.encode(value).into_bytes(),
        ),
        (
            "hex".into(),
            value
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .into_bytes(),
        ),
        (
            "HEX".into(),
            value
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<String>()
                .into_bytes(),
        ),
        ("percent".into(), percent(value, b"0123456789ABCDEF", false)),
        (
            "percent-lower".into(),
            percent(value, b"0123456789abcdef", false),
        ),
        ("form".into(), percent(value, b"0123456789ABCDEF", true)),
    ];
    // The base64 "cores" of the secret inside a longer blob, at each byte alignment.
    for (name, engine) in [("core", STANDARD_NO_PAD), ("core-url", URL_SAFE_NO_PAD)] {
        for offset in 0..3 {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(value);
            let encoded = engine.encode(&shifted).into_bytes();
            let skip = [0, 2, 3][offset];
            let drop_end = usize::from(shifted.len() % 3 != 0);
            forms.push((
                format!("{name}@{offset}"),
                encoded[skip..encoded.len() - drop_end].to_vec(),
            ));
        }
    }
    let mut unique: Vec<(String, String)> = Vec::new();
    for (name, bytes) in forms {
        let text = String::from_utf8(bytes).unwrap();
        if !unique.iter().any(|(_, known)| *known == text) {
            unique.push((name, text));
        }
    }
    unique
}

/// A wrong guess of `len` bytes: a prefix of no form.
fn wrong_guess(len: usize) -> String {
    "#".repeat(len)
}

/// The response as the caller reads it, with the timing field (out of scope) zeroed.
fn without_timing(answer: &hostile::RawAnswer) -> serde_json::Value {
    let line = answer.as_ref().expect("the daemon answered");
    let mut value: serde_json::Value = serde_json::from_slice(line).unwrap();
    value["duration_ms"] = 0.into();
    value
}

/// A response for a message: its flags and the last 40 characters of its stdout.
fn summary(value: &serde_json::Value) -> String {
    let mut shown = value.clone();
    if let Some(stdout) = value["stdout"].as_str() {
        let tail: String = stdout
            .chars()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        shown["stdout"] = format!("…{tail}").into();
    }
    shown.to_string()
}

/// The note that ends with `guess` (natural end), and the one whose `max_output` cut falls
/// right after `guess`.
fn notes(dir: &str, guess: &str) -> Vec<Request> {
    let end = format!("output of a verb\nlast line: {guess}");
    let mut cut = ".".repeat(CAP - guess.len());
    cut.push_str(guess);
    cut.push_str("~~~~ beyond the cap ~~~~\n");
    vec![
        hostile::call(
            "note-write",
            &[("path", &format!("{dir}/end.txt")), ("content", &end)],
        ),
        hostile::call(
            "note-write",
            &[("path", &format!("{dir}/cut.txt")), ("content", &cut)],
        ),
    ]
}

fn read_back(dir: &str) -> Vec<Request> {
    vec![
        hostile::call("note-read", &[("path", &format!("{dir}/end.txt"))]),
        hostile::call("note-cat", &[]),
        hostile::call("note-cat-capped", &[]),
    ]
}

/// `right` with its stdout's trailing `guess` replaced by `wrong` (the echo of the caller's own
/// bytes is the only difference allowed at a natural end).
fn substitute(mut right: serde_json::Value, guess: &str, wrong: &str) -> serde_json::Value {
    if let Some(stdout) = right["stdout"].as_str()
        && let Some(head) = stdout.strip_suffix(guess)
    {
        right["stdout"] = format!("{head}{wrong}").into();
    }
    right
}

/// Runs every guess of every form through the end and cap scenarios; returns the mismatches.
fn sweep(d: &Daemon, guesses: &[(String, String)]) -> Vec<String> {
    let dir = d.path("notes").display().to_string();
    let mut requests = Vec::new();
    for (_, guess) in guesses {
        requests.extend(notes(&dir, guess));
        requests.extend(read_back(&dir));
    }
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    let mut by_guess = BTreeMap::new();
    for (index, (label, guess)) in guesses.iter().enumerate() {
        let chunk = &answers[index * 5..index * 5 + 5];
        for write in &chunk[..2] {
            assert!(
                matches!(hostile::decode(write), Response::Ok { .. }),
                "{label}: the note was not written: {:?}",
                hostile::decode(write)
            );
        }
        by_guess.insert(label.clone(), (guess.clone(), chunk[2..].to_vec()));
    }
    let mut mismatches = Vec::new();
    for (label, (guess, answers)) in &by_guess {
        if label.starts_with("wrong/") {
            continue;
        }
        let wrong = wrong_guess(guess.len());
        let (_, wrong_answers) = &by_guess[&format!("wrong/{}", guess.len())];
        for (scenario, (right, wrong_answer)) in ["file.read end", "exec end", "max_output cut"]
            .iter()
            .zip(answers.iter().zip(wrong_answers))
        {
            let right = without_timing(right);
            let wrong_value = without_timing(wrong_answer);
            let comparable = if scenario.ends_with("end") {
                substitute(right.clone(), guess, &wrong)
            } else {
                right.clone()
            };
            if comparable != wrong_value {
                mismatches.push(format!(
                    "{label} ({scenario}): guess {guess:?} got {} but a wrong guess got {}",
                    summary(&right),
                    summary(&wrong_value)
                ));
            }
        }
    }
    mismatches
}

/// Every proper prefix of every form, except those that hold a whole form themselves (the
/// 21-character prefix of the base64 form is the whole 21-character base64 "core": a whole form
/// is redacted, by design).
fn prefixes() -> Vec<(String, String)> {
    let forms = forms();
    let mut guesses = Vec::new();
    let mut longest = 0;
    for (name, form) in &forms {
        longest = longest.max(form.len());
        for len in 1..form.len() {
            let guess = &form[..len];
            if forms
                .iter()
                .any(|(_, whole)| guess.contains(whole.as_str()))
            {
                continue;
            }
            guesses.push((format!("{name}/{len}"), guess.to_string()));
        }
    }
    for len in 1..longest {
        guesses.push((format!("wrong/{len}"), wrong_guess(len)));
    }
    guesses
}

#[test]
fn every_proper_prefix_in_every_encoding_answers_like_a_wrong_guess() {
    let Some(d) = start() else { return };
    // Control: the whole form of every encoding, written and read back the same ways, is
    // redacted. Without it a scrubber that redacts nothing would pass the comparison below (a
    // right prefix and a wrong guess would both come back unchanged).
    let dir = d.path("notes").display().to_string();
    let mut requests = Vec::new();
    let forms = forms();
    for (_, form) in &forms {
        requests.extend(notes(&dir, form));
        requests.extend(read_back(&dir)[..2].to_vec());
    }
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    for ((name, form), chunk) in forms.iter().zip(answers.chunks(4)) {
        for (scenario, answer) in ["file.read end", "exec end"].iter().zip(&chunk[2..]) {
            let stdout = match hostile::decode(answer) {
                Response::Ok { result, .. } => result.stdout,
                other => panic!("{name} ({scenario}): {other:?}"),
            };
            assert!(
                stdout.ends_with("last line: [REDACTED:tok]") && !stdout.contains(form.as_str()),
                "{name} ({scenario}): the whole form was not redacted: {stdout:?}"
            );
        }
    }
    let guesses = prefixes();
    let mismatches = sweep(&d, &guesses);
    assert!(
        mismatches.is_empty(),
        "{} answers (of {} guesses × 3 scenarios) are distinguishable from a wrong guess's:\n{}",
        mismatches.len(),
        guesses.len(),
        mismatches
            .iter()
            .filter(|m| !m.contains("/1 ") && !m.contains("/2 ") && !m.contains("/3 "))
            .take(6)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn a_cut_withholds_a_fixed_tail_and_says_so() {
    let Some(d) = start() else { return };
    let dir = d.path("notes").display().to_string();
    let mut requests = notes(&dir, "harmless");
    requests.push(hostile::call("note-cat-capped", &[]));
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    let Response::Ok { result, .. } = hostile::decode(&answers[2]) else {
        panic!("{:?}", hostile::decode(&answers[2]));
    };
    assert!(result.stdout_truncated, "the cut is flagged");
    assert_eq!(
        result.stdout_withheld,
        verbd::scrub::CUT_WITHHELD_TAIL as u64,
        "a fixed tail is withheld"
    );
    assert_eq!(
        result.stdout,
        ".".repeat(CAP - verbd::scrub::CUT_WITHHELD_TAIL)
    );
    // Positive control: the same note read whole (no cut) is returned whole.
    let answers = hostile::requests_as(
        AGENT,
        &d.socket,
        &[hostile::call(
            "note-read",
            &[("path", &format!("{dir}/cut.txt"))],
        )],
    );
    let Response::Ok { result, .. } = hostile::decode(&answers[0]) else {
        panic!("{:?}", hostile::decode(&answers[0]));
    };
    assert!(!result.stdout_truncated && result.stdout_withheld == 0);
    assert!(
        result
            .stdout
            .ends_with("harmless~~~~ beyond the cap ~~~~\n")
    );
    // A whole secret is still redacted wherever it is.
    let whole = format!("before {SECRET} after");
    let answers = hostile::requests_as(
        AGENT,
        &d.socket,
        &[
            hostile::call(
                "note-write",
                &[("path", &format!("{dir}/end.txt")), ("content", &whole)],
            ),
            hostile::call("note-cat", &[]),
        ],
    );
    assert_eq!(
        common::stdout_of(&hostile::decode(&answers[1])),
        "before [REDACTED:tok] after"
    );
}

#[test]
fn a_timeout_cut_answers_a_prefix_like_a_wrong_guess() {
    let Some(d) = start() else { return };
    let dir = d.path("notes").display().to_string();
    let raw = SECRET;
    let hex: String = SECRET.bytes().map(|b| format!("{b:02x}")).collect();
    let mut cases = Vec::new();
    for form in [raw, hex.as_str()] {
        for len in [4, 8, form.len() - 1] {
            cases.push(form[..len].to_string());
            cases.push(wrong_guess(len));
        }
    }
    let mut requests = Vec::new();
    for guess in &cases {
        requests.push(notes(&dir, guess).remove(0));
        requests.push(hostile::call("note-follow", &[]));
    }
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    for (pair, guesses) in answers.chunks(4).zip(cases.chunks(2)) {
        let right = without_timing(&pair[1]);
        let wrong = without_timing(&pair[3]);
        assert_eq!(
            right["exit"]["timed_out"], true,
            "tail was not cut by the timeout: {right}"
        );
        assert!(
            right == wrong,
            "timeout cut: guess {:?} got {} but a wrong guess got {}",
            guesses[0],
            summary(&right),
            summary(&wrong)
        );
    }
}

#[test]
fn a_max_output_below_the_withheld_tail_draws_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let policy = |max_output: &str| {
        let path = dir.path().join(format!("p-{max_output}.toml"));
        std::fs::write(
            &path,
            format!(
                "version = 1\n[roles.a]\nuids = [1]\n[verb.tiny]\ndescription = \"x\"\ncategory = \"read-only\"\nroles = [\"a\"]\ncommand = \"/usr/bin/true\"\nmax_output = \"{max_output}\"\n"
            ),
        )
        .unwrap();
        let out = std::process::Command::new(BIN)
            .args(["policy", "check"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let warned = policy("4KiB");
    assert!(
        warned
            .contains("verb `tiny`: max_output (4096 bytes) is not above the 4096 bytes withheld"),
        "{warned}"
    );
    assert!(!policy("8KiB").contains("withheld"));
}
