//! Output scrubbing: removes secret values, their encodings and common credential formats from a
//! child's stdout/stderr before anything reaches the caller.
//!
//! Responsibility: a [`Scrubber`] is built once per policy load from the [`SecretStore`], the
//! policy's `[scrub]` patterns and the built-in set. [`Scrubber::scrub`] cleans a whole buffer;
//! [`Scrubber::stream`] cleans output chunk by chunk as it arrives.
//!
//! # What is redacted
//!
//! **Loaded secrets** become `[REDACTED:NAME]`, in each of these forms:
//! - the raw value, and its JSON string escaping (when that differs);
//! - standard base64 (`+/`) and base64url (`-_`), each padded and unpadded, plus the stable core of
//!   the value's encoding at each of the three byte alignments inside a longer base64 blob (cores
//!   shorter than 8 characters are skipped), and the padded encoding wrapped at 76 columns
//!   (coreutils `base64`) and at 64 (`openssl base64`, PEM);
//! - lowercase and uppercase hex;
//! - percent-encoding (RFC 3986 unreserved characters kept) with uppercase and lowercase hex
//!   digits, and form encoding (space as `+`).
//!
//! Literal matching finds every occurrence of every form of every secret at once, overlapping ones
//! included (Aho-Corasick), and redacts the union of them: two secrets that overlap in the output
//! become one marker, and neither leaks a part.
//!
//! **Built-in formats** (when `builtin` is true), in the order they are applied. Where a pattern has
//! a prefix that says what the value is (a key name, a URL scheme and user), only the value is
//! replaced and the prefix is kept.
//!
//! | label | matches |
//! |---|---|
//! | `private-key` | `-----BEGIN … PRIVATE KEY-----` through `-----END … PRIVATE KEY-----` (PEM, OpenSSH, PKCS#8, encrypted, `PGP PRIVATE KEY BLOCK`), across lines; a block without END swallows 64 KiB after its BEGIN marker (or to the end of the output), then output resumes |
//! | `aws-access-key` | `AKIA`/`ASIA` + 16 of `[A-Z0-9]` |
//! | `github-token` | `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` + 20..255 alphanumerics; `github_pat_` + 20..255 of `[A-Za-z0-9_]` |
//! | `gitlab-token` | `glpat-`, `gldt-`, `glrt-`, `glptt-`, `glcbt-`, `glimt-`, `gloas-`, `glsoat-`, `glffct-`, `glagent-` + 20 or more of `[A-Za-z0-9_.-]` |
//! | `slack-token` | `xoxa-`, `xoxb-`, `xoxp-`, `xoxo-`, `xoxr-`, `xoxs-` + 10 or more of `[A-Za-z0-9-]` |
//! | `api-key` | `sk-ant-…`, `sk-proj-…`, `sk-svcacct-…`, `sk-admin-…` (20+), legacy `sk-` + 40 alphanumerics, `sk_live_`/`rk_live_` (16+), Google `AIza` + 35, npm `npm_` + 36 |
//! | `jwt` | `eyJ…` `.` `eyJ…` `.` signature (base64url segments) |
//! | `aws-secret-key` | the value after `aws_secret_access_key`, `aws_secret_key`, `secret_access_key`, `aws_session_token`, `session_token` (any case, `_` optional, e.g. `"SecretAccessKey": "…"`) and `=` or `:` |
//! | `gcp-private-key` | the string value of a JSON `"private_key": "…"` |
//! | `url-credentials` | the password in `scheme://user:password@host` (scheme, user and host kept) |
//! | `authorization` | the credential after `Authorization:`/`Proxy-Authorization:` `Bearer`/`Basic`/`Token`/`Digest` |
//! | `credential-assignment` | the value after a key ending in `password`, `passwd`, `passphrase`, `secret`, `api_key`/`apikey`, `access_token`, `auth_token`, `refresh_token` or `private_token` (any case) and `=` or `:` (e.g. `PGPASSWORD=…`, `"password": "…"`, `--db-password=…`); a quoted value (which may contain spaces) is redacted between its quotes, an unquoted one up to whitespace or a quote |
//!
//! **Policy patterns** (`[scrub]`) are applied after the built-ins, within each line, and replace
//! the whole match with `[REDACTED:NAME]`, or only the capture group named `secret` when the
//! pattern has one (more generally: the first matching group whose name starts with `secret`).
//! A pattern that matches the empty string, or does not compile, is an error naming the pattern.
//!
//! **Order**: private key blocks are cut out of the stream first; then, per segment, loaded
//! secrets (so a secret inside `password=…` is named after the secret), the other built-ins in
//! table order, policy patterns, and at the end of the stream the built-ins' trailing partial
//! forms. A value that is already exactly a `[REDACTED…]` marker is left alone by later patterns.
//!
//! # Not an oracle
//! A caller that can make a verb print bytes it chose (write a note, read it back) must learn
//! nothing about a secret from the answer except whether its bytes held a **whole** form of it.
//! So whether and where output is redacted never depends on a *partial* match of a loaded
//! secret: a proper prefix of a secret form is output as it is, at the end of the output as
//! anywhere else (a child that prints a fragment of a secret on its own defeats any filter; see
//! "Not covered"). Every other rule depends only on public patterns and the bytes themselves.
//!
//! Where the output is **cut** — the child was stopped mid-stream (`max_output` reached, the
//! timeout or a signal ended it) — the kept bytes may end inside a secret that the child was
//! printing whole. [`ScrubStream::finish_cut`] then withholds the last [`Scrubber::withheld_tail`]
//! bytes, whatever they contain (a fixed length: [`CUT_WITHHELD_TAIL`], or, when a secret form
//! is longer, that form's length rounded up to a power of two), moving the cut further back
//! only so that it does not split a whole secret form or a complete token; the caller is told
//! how many bytes were withheld. A natural end ([`ScrubStream::finish`]) withholds nothing.
//!
//! # Live streams
//! A streaming verb's output reaches its caller while the verb runs ([`Scrubber::live_stream`]).
//! Such a stream holds back no fixed tail: it emits every complete line at once, except that a
//! secret form split over lines — or over writes, one byte at a time — must have fully arrived
//! before any line of it goes. So when a loaded secret's value holds k newlines, k complete
//! lines stay behind the last one; and when a secret is long enough for its base64 to wrap
//! (more than 48 bytes), a line that ends with 64 or more base64 characters stays held until a
//! line follows that does not (a log line ending in a long hash waits for the next line).
//! Where a live stream is cut (a bound of its verb, its client gone, a signal),
//! [`ScrubStream::finish_live_cut`] withholds everything still held: the incomplete last line
//! and the lines held behind it. What is held depends only on the bytes (newlines, base64
//! runs) and on where whole secret forms are, never on a partial form.
//!
//! # Invariants
//! - Chunking does not change the result: a secret, an encoded form or a token split across
//!   chunks is caught. The stream holds back the incomplete last line (up to 64 KiB) plus the
//!   withheld tail (at least the length of the longest literal form), and inside an open private
//!   key block only the last few bytes (to find the END marker). A line longer than 64 KiB is
//!   cut, keeping 4 KiB of overlap, never inside a literal or token match (unless a policy
//!   pattern's single match exceeds 1 MiB). Memory per stream is therefore bounded by about the
//!   withheld tail + 1 MiB.
//! - The answer to a caller is a function of the bytes the child wrote, where it was cut, and the
//!   positions of whole secret forms in them; never of a partial secret form.
//! - At the end of the stream, natural or cut, a tail that starts like a built-in token (e.g.
//!   `ghp_12`, `AKIA12`, `eyJhb…`, `scheme://user:pa`) is redacted: a public format, so this
//!   tells the caller nothing about any secret.
//! - Bytes that match nothing pass through unchanged, byte for byte (invalid UTF-8 included).
//! - Built-in patterns never match across a newline; policy patterns are applied line by line.
//! - Not covered (a child that transforms a secret defeats any output filter): other encodings
//!   (gzip, reversed or interleaved text, base64 wrapped at other widths or of a substring),
//!   fragments the child itself cuts out of a secret (`substr(password, 1, 4)`), and token
//!   formats not in the table above. A whole-value guess is still answered by a marker: a
//!   secret an agent can guess whole (a short or dictionary password) is not protected by
//!   scrubbing, which is why short secrets draw a warning.
//! - The scrubber's own copies of secret forms are wiped on drop; the Aho-Corasick automaton's
//!   internal tables cannot be, and live as long as the policy. Held-back output is wiped on drop.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::fmt;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use regex::bytes::{Captures, Regex};
use thiserror::Error;
use zeroize::Zeroizing;

use crate::secrets::SecretStore;

/// An incomplete line is held back (waiting for its newline) up to this many bytes.
pub const MAX_HELD_LINE: usize = 64 * 1024;
/// When a longer line must be cut, this much of its end stays held for the next scan.
pub const LONG_LINE_OVERLAP: usize = 4096;
/// A single policy-pattern match may delay a long-line cut up to this many bytes, no more.
pub const MAX_HELD_MATCH: usize = 1024 * 1024;
/// An unterminated private key block swallows at most this many bytes.
pub const MAX_PRIVATE_KEY_BLOCK: usize = 64 * 1024;
/// Where output is cut, at least this many of the last bytes kept are withheld from the caller
/// (more only when a loaded secret has a longer form, see [`Scrubber::withheld_tail`]).
pub const CUT_WITHHELD_TAIL: usize = 4096;
/// Line widths at which tools wrap base64: coreutils `base64` (76) and PEM/`openssl base64` (64).
const BASE64_LINE_WIDTHS: [usize; 2] = [76, 64];
/// Base64 alignment cores shorter than this are not matched (too likely in unrelated text).
const MIN_BASE64_CORE: usize = 8;
/// Longer than any BEGIN or END marker can be: the overlap kept when searching for a marker that
/// may be split across chunks.
const PRIVATE_KEY_MARKER_MAX: usize = 96;
const PRIVATE_KEY_LABEL: &[u8] = b"[REDACTED:private-key]";
const PRIVATE_KEY_BEGIN: &str = r"(?-u)-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----";
const PRIVATE_KEY_END: &str = r"(?-u)-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----";

/// A policy `[scrub]` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubPattern {
    pub name: String,
    pub regex: String,
}

/// A pattern the scrubber cannot use.
#[derive(Debug, Error)]
pub enum ScrubError {
    #[error("scrub pattern `{name}`: {error}")]
    BadPattern { name: String, error: regex::Error },
    #[error("scrub pattern `{name}` matches the empty string")]
    MatchesEmpty { name: String },
    #[error("scrub pattern name `{name}` must be non-empty and use only A-Z a-z 0-9 _ . -")]
    BadPatternName { name: String },
    #[error("cannot build the secret matcher: {0}")]
    LiteralMatcher(#[from] aho_corasick::BuildError),
}

/// A built-in credential format: `regex` redacts complete occurrences; `at_end` (applied only at
/// the end of the stream) redacts a truncated occurrence at the very end of the output.
struct Builtin {
    label: &'static str,
    regex: &'static str,
    at_end: Option<&'static str>,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        label: "aws-access-key",
        regex: r"(?-u)\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
        at_end: Some(r"(?-u)\b(?:AKIA|ASIA)[A-Z0-9]{0,15}\z"),
    },
    Builtin {
        label: "github-token",
        regex: r"(?-u)\b(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255})\b",
        at_end: Some(r"(?-u)\b(?:gh[pousr]_[A-Za-z0-9]*|github_pat_[A-Za-z0-9_]*)\z"),
    },
    Builtin {
        label: "gitlab-token",
        regex: r"(?-u)\bgl(?:pat|dt|rt|ptt|cbt|imt|oas|soat|ffct|agent)-[A-Za-z0-9_.-]{20,}",
        at_end: Some(r"(?-u)\bgl(?:pat|dt|rt|ptt|cbt|imt|oas|soat|ffct|agent)-[A-Za-z0-9_.-]*\z"),
    },
    Builtin {
        label: "slack-token",
        regex: r"(?-u)\bxox[abposr]-[A-Za-z0-9-]{10,}",
        at_end: Some(r"(?-u)\bxox[abposr]-[A-Za-z0-9-]*\z"),
    },
    Builtin {
        label: "api-key",
        regex: r"(?-u)\b(?:sk-(?:ant|proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9]{40,}|[sr]k_live_[A-Za-z0-9]{16,}|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{36})",
        at_end: Some(
            r"(?-u)\b(?:sk-(?:ant|proj|svcacct|admin)-[A-Za-z0-9_-]*|[sr]k_live_[A-Za-z0-9]*|AIza[0-9A-Za-z_-]*|npm_[A-Za-z0-9]*)\z",
        ),
    },
    Builtin {
        label: "jwt",
        regex: r"(?-u)\beyJ[A-Za-z0-9_-]{2,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*",
        at_end: Some(r"(?-u)\beyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*){0,2}\z"),
    },
    Builtin {
        label: "aws-secret-key",
        regex: r#"(?i-u)(?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key|aws_?session_?token|session_?token)["']?[ \t]*[:=][ \t]*["']?(?P<secret>[A-Za-z0-9/+=]+)"#,
        at_end: None,
    },
    Builtin {
        label: "gcp-private-key",
        regex: r#"(?-u)"private_key"[ \t]*:[ \t]*"(?P<secret>(?:[^"\\\n]|\\.)+)""#,
        at_end: Some(r#"(?-u)"private_key"[ \t]*:[ \t]*"(?P<secret>(?:[^"\\\n]|\\.)+)\z"#),
    },
    Builtin {
        label: "url-credentials",
        regex: r"(?i-u)\b[a-z][a-z0-9+.-]*://[^\s/?#@:]*:(?P<secret>[^\s/?#@]+)@",
        at_end: Some(r"(?i-u)\b[a-z][a-z0-9+.-]*://[^\s/?#@:]*:(?P<secret>[^\s/?#@]+)\z"),
    },
    Builtin {
        label: "authorization",
        regex: r#"(?i-u)\b(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?(?:bearer|basic|token|digest)[ \t]+(?P<secret>[^\s"',;]+)"#,
        at_end: None,
    },
    Builtin {
        label: "credential-assignment",
        regex: r#"(?i-u)\b[A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token|private[_-]?token)["']?[ \t]*[:=][ \t]*(?:"(?P<secret_dq>(?:[^"\\\n]|\\.)+)"|'(?P<secret_sq>[^'\n]+)'|(?P<secret>[^\s"']+))"#,
        at_end: Some(
            r#"(?i-u)\b[A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token|private[_-]?token)["']?[ \t]*[:=][ \t]*["'](?P<secret>[^"'\n]+)\z"#,
        ),
    },
];

/// One compiled token pattern.
struct TokenPattern {
    label: Vec<u8>,
    regex: Regex,
    at_end: Option<Regex>,
    /// Capture groups whose name starts with `secret`; the first that matched is redacted.
    secret_groups: Vec<usize>,
}

impl TokenPattern {
    fn new(name: &str, regex: Regex, at_end: Option<Regex>) -> TokenPattern {
        let secret_groups = regex
            .capture_names()
            .enumerate()
            .filter(|(_, group)| group.is_some_and(|group| group.starts_with("secret")))
            .map(|(index, _)| index)
            .collect();
        TokenPattern {
            label: redaction_label(name),
            regex,
            at_end,
            secret_groups,
        }
    }

    fn apply(&self, text: Vec<u8>) -> Vec<u8> {
        replace_with(&self.regex, text, &self.secret_groups, &self.label)
    }

    fn apply_at_end(&self, text: Vec<u8>) -> Vec<u8> {
        match &self.at_end {
            Some(regex) => replace_with(regex, text, &self.secret_groups, &self.label),
            None => text,
        }
    }
}

/// Replaces each match (or its first matching `secret*` group) by `label`, leaving values that are
/// already a redaction marker alone.
fn replace_with(regex: &Regex, text: Vec<u8>, secret_groups: &[usize], label: &[u8]) -> Vec<u8> {
    let replaced = regex.replace_all(&text, |caps: &Captures<'_>| {
        let Some(whole) = caps.get(0) else {
            return Vec::new();
        };
        match secret_groups.iter().find_map(|&group| caps.get(group)) {
            Some(secret) if is_redaction_marker(secret.as_bytes()) => whole.as_bytes().to_vec(),
            Some(secret) => {
                let mut out = Vec::with_capacity(whole.len() + label.len());
                out.extend_from_slice(&text[whole.start()..secret.start()]);
                out.extend_from_slice(label);
                out.extend_from_slice(&text[secret.end()..whole.end()]);
                out
            }
            None => label.to_vec(),
        }
    });
    match replaced {
        Cow::Owned(changed) => changed,
        Cow::Borrowed(_) => text,
    }
}

fn is_redaction_marker(bytes: &[u8]) -> bool {
    bytes.starts_with(b"[REDACTED")
        && bytes.ends_with(b"]")
        && !bytes[..bytes.len() - 1].contains(&b']')
}

fn redaction_label(name: &str) -> Vec<u8> {
    format!("[REDACTED:{name}]").into_bytes()
}

/// One literal form of one secret.
struct LiteralForm {
    bytes: Zeroizing<Vec<u8>>,
    secret: usize,
}

/// The private key block markers (present only with the built-in set).
struct PrivateKeyMarkers {
    begin: Regex,
    end: Regex,
}

/// The compiled scrubbing rules of one policy. Cheap to share (`Send + Sync`).
pub struct Scrubber {
    literals: Option<AhoCorasick>,
    forms: Vec<LiteralForm>,
    secret_labels: Vec<Vec<u8>>,
    longest_form: usize,
    /// The most newlines a loaded secret's value holds: how many complete lines a live stream
    /// always holds back (see [`Scrubber::live_stream`]).
    raw_newlines: usize,
    /// Some secret's base64 is longer than a wrap width, so it has forms wrapped over lines.
    wrapped_forms: bool,
    withheld_tail: usize,
    builtin_tokens: Vec<TokenPattern>,
    policy_tokens: Vec<TokenPattern>,
    private_keys: Option<PrivateKeyMarkers>,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubber")
            .field("secrets", &self.secret_labels.len())
            .field("literal_forms", &self.forms.len())
            .field("builtin_patterns", &self.builtin_tokens.len())
            .field("policy_patterns", &self.policy_tokens.len())
            .finish()
    }
}

impl Scrubber {
    /// Compiles the literal forms of every secret in `store`, the policy's patterns and (when
    /// `builtin`) the built-in formats.
    pub fn new(
        store: &SecretStore,
        extra: &[ScrubPattern],
        builtin: bool,
    ) -> Result<Scrubber, ScrubError> {
        let mut forms = Vec::new();
        let mut secret_labels = Vec::new();
        for (index, (name, value)) in store.iter().enumerate() {
            secret_labels.push(redaction_label(name));
            for bytes in literal_forms(value.expose()) {
                forms.push(LiteralForm {
                    bytes,
                    secret: index,
                });
            }
        }
        let longest_form = forms.iter().map(|form| form.bytes.len()).max().unwrap_or(0);
        let raw_newlines = store
            .iter()
            .map(|(_, value)| value.expose().iter().filter(|&&b| b == b'\n').count())
            .max()
            .unwrap_or(0);
        let wrapped_forms = store.iter().any(|(_, value)| {
            base64::encoded_len(value.expose().len(), true).unwrap_or(usize::MAX)
                > BASE64_LINE_WIDTHS.into_iter().min().unwrap_or(0)
        });
        // Not the exact length: the tail a caller sees withheld must not tell it how long a
        // secret is (beyond "longer than CUT_WITHHELD_TAIL / 3 bytes").
        let withheld_tail = CUT_WITHHELD_TAIL.max(longest_form.next_power_of_two());
        let literals = if forms.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::Standard)
                    .build(forms.iter().map(|form| form.bytes.as_slice()))?,
            )
        };

        let mut builtin_tokens = Vec::new();
        let mut private_keys = None;
        if builtin {
            for pattern in BUILTINS {
                let regex = compile_builtin(pattern.regex);
                let at_end = pattern.at_end.map(compile_builtin);
                builtin_tokens.push(TokenPattern::new(pattern.label, regex, at_end));
            }
            private_keys = Some(PrivateKeyMarkers {
                begin: compile_builtin(PRIVATE_KEY_BEGIN),
                end: compile_builtin(PRIVATE_KEY_END),
            });
        }

        let mut policy_tokens = Vec::new();
        for pattern in extra {
            let valid_name = !pattern.name.is_empty()
                && pattern
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            if !valid_name {
                return Err(ScrubError::BadPatternName {
                    name: pattern.name.clone(),
                });
            }
            let regex = Regex::new(&pattern.regex).map_err(|error| ScrubError::BadPattern {
                name: pattern.name.clone(),
                error,
            })?;
            let matches_empty = [&b""[..], b"a b-c\n1.", b"\n"]
                .iter()
                .any(|probe| regex.find_iter(probe).any(|m| m.is_empty()));
            if matches_empty {
                return Err(ScrubError::MatchesEmpty {
                    name: pattern.name.clone(),
                });
            }
            policy_tokens.push(TokenPattern::new(&pattern.name, regex, None));
        }

        Ok(Scrubber {
            literals,
            forms,
            secret_labels,
            longest_form,
            raw_newlines,
            wrapped_forms,
            withheld_tail,
            builtin_tokens,
            policy_tokens,
            private_keys,
        })
    }

    /// How many of the last bytes kept are withheld where output is cut: [`CUT_WITHHELD_TAIL`],
    /// or the longest secret form's length rounded up to a power of two when that is longer.
    pub fn withheld_tail(&self) -> usize {
        self.withheld_tail
    }

    /// Scrubs a complete output (one that ended naturally, not cut).
    pub fn scrub(&self, data: &[u8]) -> Vec<u8> {
        let mut stream = self.stream();
        let mut out = stream.push(data);
        out.extend(stream.finish());
        out
    }

    /// A scrubber for one output stream (one per stdout/stderr of one call).
    pub fn stream(&self) -> ScrubStream<'_> {
        self.stream_of(false)
    }

    /// A scrubber for one output stream delivered while it runs (a streaming verb): complete
    /// lines go out as soon as they cannot begin a secret form that has not fully arrived (see
    /// the module docs, "Live streams"); end it with [`ScrubStream::finish`] or
    /// [`ScrubStream::finish_live_cut`].
    pub fn live_stream(&self) -> ScrubStream<'_> {
        self.stream_of(true)
    }

    fn stream_of(&self, live: bool) -> ScrubStream<'_> {
        ScrubStream {
            scrubber: self,
            live,
            pending: Zeroizing::new(Vec::new()),
            newline_free: 0,
            begin_searched: 0,
            in_private_key: false,
            private_key_swallowed: 0,
        }
    }

    /// Scrubs a segment that ends at a line boundary, at a safe long-line cut, before a private
    /// key marker, or (`at_end`) at the end of the output.
    fn scrub_segment(&self, text: &[u8], at_end: bool) -> Vec<u8> {
        let mut current = self.replace_literals(text);
        for token in &self.builtin_tokens {
            current = token.apply(current);
        }
        if !self.policy_tokens.is_empty() {
            current = self.apply_policy_tokens(&current);
        }
        if at_end {
            for token in &self.builtin_tokens {
                current = token.apply_at_end(current);
            }
        }
        current
    }

    fn apply_policy_tokens(&self, text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        for line in text.split_inclusive(|&b| b == b'\n') {
            let (content, newline) = match line.split_last() {
                Some((b'\n', content)) => (content, &b"\n"[..]),
                _ => (line, &b""[..]),
            };
            let mut current = content.to_vec();
            for token in &self.policy_tokens {
                current = token.apply(current);
            }
            out.extend_from_slice(&current);
            out.extend_from_slice(newline);
        }
        out
    }

    /// Replaces every whole occurrence of a literal form (never a partial one: see the module
    /// docs, "Not an oracle").
    fn replace_literals(&self, text: &[u8]) -> Vec<u8> {
        let Some(literals) = &self.literals else {
            return text.to_vec();
        };
        let mut spans: Vec<(usize, usize, usize)> = literals
            .find_overlapping_iter(text)
            .map(|m| {
                (
                    m.start(),
                    m.end(),
                    self.forms[m.pattern().as_usize()].secret,
                )
            })
            .collect();
        if spans.is_empty() {
            return text.to_vec();
        }
        // Earliest first; at the same start the longest first, so its secret names the marker.
        spans.sort_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
        let mut out = Vec::with_capacity(text.len());
        let mut written = 0;
        let mut spans = spans.into_iter().peekable();
        while let Some((start, mut end, secret)) = spans.next() {
            while let Some(&(next_start, next_end, _)) = spans.peek() {
                if next_start >= end {
                    break;
                }
                end = end.max(next_end);
                spans.next();
            }
            let start = start.max(written);
            out.extend_from_slice(&text[written..start]);
            out.extend_from_slice(&self.secret_labels[secret]);
            written = end.max(written);
        }
        out.extend_from_slice(&text[written..]);
        out
    }

    /// How much of `pending` (no private key marker in it) can be scrubbed and emitted now,
    /// such that no literal or token occurrence can straddle the cut. `newline_free` is how much
    /// of `pending`'s start is already known to hold no newline (so a long line fed in small
    /// chunks is not rescanned on every push); it is updated here.
    fn safe_cut(&self, pending: &[u8], newline_free: &mut usize) -> usize {
        let len = pending.len();
        // A literal starting before this point is entirely inside `pending`; everything after
        // it stays held, so a cut can still withhold it.
        let literal_limit = len.saturating_sub(self.withheld_tail);
        let search_from = (*newline_free).min(literal_limit);
        let line_cut = match pending[search_from..literal_limit]
            .iter()
            .rposition(|&b| b == b'\n')
        {
            Some(newline) => search_from + newline + 1,
            None => {
                *newline_free = literal_limit;
                0
            }
        };
        if literal_limit - line_cut <= MAX_HELD_LINE {
            return if line_cut == 0 {
                0
            } else {
                self.back_off_literals(pending, line_cut)
            };
        }
        // The incomplete line is too long to keep waiting for its end: cut inside it, but not
        // inside a token or literal occurrence.
        let line = &pending[line_cut..];
        let token_spans: Vec<(usize, usize)> = self
            .builtin_tokens
            .iter()
            .chain(&self.policy_tokens)
            .flat_map(|token| token.regex.find_iter(line))
            .map(|m| (line_cut + m.start(), line_cut + m.end()))
            .collect();
        let forced = literal_limit.min(len - LONG_LINE_OVERLAP);
        let mut cut = forced;
        loop {
            let next = self.back_off_literals(pending, back_off(cut, &token_spans));
            if next == cut {
                break;
            }
            cut = next;
        }
        if cut <= line_cut && len - line_cut > MAX_HELD_MATCH {
            // A single policy-pattern match longer than the cap: bound memory instead.
            cut = self.back_off_literals(pending, forced);
        }
        cut
    }

    /// Where a live stream may cut `pending` now: at a line start with [`Self::raw_newlines`]
    /// complete lines behind it, where no wrapped base64 form can continue and no whole
    /// literal occurrence straddles it.
    ///
    /// Why that is enough: an occurrence straddling a line start holds the newline just before
    /// it. A raw value with k newlines then has at most k - 1 after it, so it ends within the
    /// k complete lines held: it has fully arrived and is found whole (and the cut moves back
    /// before it). A wrapped base64 form has a newline only after a full wrap width (64 or 76)
    /// of base64 characters, so it cannot straddle a cut whose line does not end with 64 of
    /// them; such a line is held until a line that cannot continue a form follows it.
    /// Tokens and policy patterns never cross a newline. The cut depends only on the bytes
    /// (newline positions, base64 runs) and on whole occurrences, never on a partial form
    /// (module docs, "Not an oracle").
    fn live_cut(&self, pending: &[u8]) -> usize {
        let Some(mut cut) = pending
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, byte)| **byte == b'\n')
            .nth(self.raw_newlines)
            .map(|(at, _)| at + 1)
        else {
            return 0;
        };
        let line_start = |end: usize| {
            pending[..end]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |at| at + 1)
        };
        while cut > 0 {
            if self.wrapped_forms && ends_in_base64_run(&pending[..cut - 1]) {
                cut = line_start(cut - 1);
                continue;
            }
            let backed = self.back_off_literals(pending, cut);
            if backed == cut {
                return cut;
            }
            cut = line_start(backed);
        }
        0
    }

    /// Moves `cut` left until no literal occurrence straddles it. Only the window of one
    /// literal length on either side can hold such an occurrence.
    fn back_off_literals(&self, pending: &[u8], mut cut: usize) -> usize {
        let Some(literals) = &self.literals else {
            return cut;
        };
        loop {
            let window_start = cut.saturating_sub(self.longest_form);
            let window_end = (cut + self.longest_form).min(pending.len());
            let straddling = literals
                .find_overlapping_iter(&pending[window_start..window_end])
                .map(|m| (window_start + m.start(), window_start + m.end()))
                .filter(|&(start, end)| start < cut && end > cut)
                .map(|(start, _)| start)
                .min();
            match straddling {
                Some(start) => cut = start,
                None => return cut,
            }
        }
    }
}

impl Scrubber {
    /// Moves `cut` left until it splits neither a whole literal form nor a complete token
    /// match on its line (the positions of whole matches only, never partial ones).
    fn back_off_whole_matches(&self, pending: &[u8], mut cut: usize) -> usize {
        loop {
            let line_start = pending[..cut]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |newline| newline + 1);
            let line_end = pending[cut..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(pending.len(), |newline| cut + newline);
            let line = &pending[line_start..line_end];
            let token_spans: Vec<(usize, usize)> = self
                .builtin_tokens
                .iter()
                .chain(&self.policy_tokens)
                .flat_map(|token| token.regex.find_iter(line))
                .map(|m| (line_start + m.start(), line_start + m.end()))
                .collect();
            let next = self.back_off_literals(pending, back_off(cut, &token_spans));
            if next == cut {
                return cut;
            }
            cut = next;
        }
    }
}

/// Moves `cut` left until no span straddles it.
fn back_off(mut cut: usize, spans: &[(usize, usize)]) -> usize {
    loop {
        let straddling = spans
            .iter()
            .filter(|&&(start, end)| start < cut && end > cut)
            .map(|&(start, _)| start)
            .min();
        match straddling {
            Some(start) => cut = start,
            None => return cut,
        }
    }
}

fn compile_builtin(pattern: &str) -> Regex {
    // The built-in patterns are constants covered by the tests; failing here is a build defect.
    Regex::new(pattern).expect("built-in scrub pattern compiles")
}

/// Every form of `value` that is matched literally (deduplicated, non-empty).
fn literal_forms(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let mut forms: Vec<Zeroizing<Vec<u8>>> = Vec::new();
    let mut add = |form: Vec<u8>| {
        let form = Zeroizing::new(form);
        if !form.is_empty() && !forms.iter().any(|known| **known == *form) {
            forms.push(form);
        }
    };
    add(value.to_vec());
    if let Ok(text) = std::str::from_utf8(value) {
        let quoted = Zeroizing::new(serde_json::Value::from(text).to_string());
        add(quoted.as_bytes()[1..quoted.len() - 1].to_vec());
    }
    for (padded, unpadded) in [(STANDARD, STANDARD_NO_PAD), (URL_SAFE, URL_SAFE_NO_PAD)] {
        let encoded = Zeroizing::new(padded.encode(value).into_bytes());
        for width in BASE64_LINE_WIDTHS {
            if encoded.len() > width {
                add(wrap_lines(&encoded, width));
            }
        }
        add(encoded.to_vec());
        add(unpadded.encode(value).into_bytes());
        for offset in 0..3 {
            let core = base64_core(&unpadded, value, offset);
            if core.len() >= MIN_BASE64_CORE {
                add(core);
            }
        }
    }
    add(hex(value, b"0123456789abcdef"));
    add(hex(value, b"0123456789ABCDEF"));
    add(percent_encode(value, b"0123456789ABCDEF", false));
    add(percent_encode(value, b"0123456789abcdef", false));
    add(percent_encode(value, b"0123456789ABCDEF", true));
    forms
}

/// `line` ends with at least the narrowest wrap width of base64 or base64url characters: it
/// could be a full line of a wrapped base64 form.
fn ends_in_base64_run(line: &[u8]) -> bool {
    let run = line
        .iter()
        .rev()
        .take_while(|&&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_'))
        .count();
    run >= BASE64_LINE_WIDTHS.into_iter().min().unwrap_or(0)
}

/// The base64 characters that encode only bytes of `value` when it starts `offset` bytes into a
/// 3-byte group of a longer encoded stream.
fn base64_core(engine: &impl Engine, value: &[u8], offset: usize) -> Vec<u8> {
    let mut shifted = Zeroizing::new(vec![0u8; offset]);
    shifted.extend_from_slice(value);
    let encoded = Zeroizing::new(engine.encode(shifted.as_slice()).into_bytes());
    // Leading characters that mix in the bytes before the value.
    let skip = [0, 2, 3][offset];
    // A trailing partial group's last character mixes in the byte after the value.
    let drop_end = usize::from(!shifted.len().is_multiple_of(3));
    if encoded.len() < skip + drop_end {
        return Vec::new();
    }
    encoded[skip..encoded.len() - drop_end].to_vec()
}

/// `encoded` with a newline after every `width` characters (as `base64` and `openssl` print it).
fn wrap_lines(encoded: &[u8], width: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded.len() + encoded.len() / width);
    for (index, line) in encoded.chunks(width).enumerate() {
        if index > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(line);
    }
    out
}

fn hex(value: &[u8], digits: &[u8; 16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() * 2);
    for &byte in value {
        out.push(digits[usize::from(byte >> 4)]);
        out.push(digits[usize::from(byte & 0x0f)]);
    }
    out
}

/// RFC 3986 percent-encoding (unreserved characters kept); `space_as_plus` gives form encoding.
fn percent_encode(value: &[u8], digits: &[u8; 16], space_as_plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() * 3);
    for &byte in value {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else if byte == b' ' && space_as_plus {
            out.push(b'+');
        } else {
            out.push(b'%');
            out.push(digits[usize::from(byte >> 4)]);
            out.push(digits[usize::from(byte & 0x0f)]);
        }
    }
    out
}

/// What a cut stream returns: the scrubbed visible bytes and how many bytes were withheld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutOutput {
    pub bytes: Vec<u8>,
    /// Bytes the child wrote before the cut that the caller does not see.
    pub withheld: u64,
}

/// Scrubs one output stream chunk by chunk; see the module docs for what is held back.
pub struct ScrubStream<'a> {
    scrubber: &'a Scrubber,
    /// Delivered while it runs: cut at line boundaries, not behind a withheld tail.
    live: bool,
    pending: Zeroizing<Vec<u8>>,
    /// `pending[..newline_free]` holds no newline.
    newline_free: usize,
    /// `pending[..begin_searched]` was searched for a private key BEGIN marker, without a match.
    begin_searched: usize,
    in_private_key: bool,
    private_key_swallowed: usize,
}

impl fmt::Debug for ScrubStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrubStream")
            .field("held_bytes", &self.pending.len())
            .field("in_private_key", &self.in_private_key)
            .finish()
    }
}

impl ScrubStream<'_> {
    /// Feeds the next chunk; returns the scrubbed bytes that are now safe to emit.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        self.drain(false, &mut out);
        out
    }

    /// Natural end of the stream: scrubs and returns everything still held (a trailing
    /// partial built-in token is redacted; a partial secret form is not special).
    pub fn finish(mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.drain(true, &mut out);
        out
    }

    /// The stream was cut (see the module docs): withholds the last
    /// [`Scrubber::withheld_tail`] bytes held, or a little more so that no whole secret form or
    /// complete token is split, then scrubs and returns the rest as at a natural end.
    pub fn finish_cut(mut self) -> CutOutput {
        let held = self.pending.len();
        let visible = if self.in_private_key {
            // Everything held is swallowed by the open key block anyway.
            held
        } else {
            self.scrubber.back_off_whole_matches(
                &self.pending,
                held.saturating_sub(self.scrubber.withheld_tail),
            )
        };
        let withheld = (held - visible) as u64;
        self.pending.truncate(visible);
        self.newline_free = self.newline_free.min(visible);
        self.begin_searched = self.begin_searched.min(visible);
        let mut bytes = Vec::new();
        self.drain(true, &mut bytes);
        CutOutput { bytes, withheld }
    }

    /// A live stream was cut (a bound of its verb, the client gone, a signal): everything
    /// still held — the incomplete last line, and the complete lines held behind it while a
    /// secret form could span them — is withheld; nothing more is emitted (except that an open
    /// private key block stays swallowed).
    pub fn finish_live_cut(mut self) -> CutOutput {
        if self.in_private_key {
            let mut bytes = Vec::new();
            self.drain(true, &mut bytes);
            return CutOutput { bytes, withheld: 0 };
        }
        CutOutput {
            bytes: Vec::new(),
            withheld: self.pending.len() as u64,
        }
    }

    fn drain(&mut self, at_end: bool, out: &mut Vec<u8>) {
        let scrubber = self.scrubber;
        loop {
            if let (true, Some(markers)) = (self.in_private_key, &scrubber.private_keys) {
                // The block ends at its END marker or after MAX_PRIVATE_KEY_BLOCK bytes, at the
                // same offset however the output is chunked.
                let budget = MAX_PRIVATE_KEY_BLOCK - self.private_key_swallowed;
                let reach = self.pending.len().min(budget + PRIVATE_KEY_MARKER_MAX);
                if let Some(end) = markers.end.find(&self.pending[..reach]).map(|m| m.end()) {
                    self.consume(end);
                    self.in_private_key = false;
                    continue;
                }
                let swallow = if at_end {
                    self.pending.len().min(budget)
                } else {
                    // Keep enough to find an END marker split across chunks.
                    let keep = self.pending.len().saturating_sub(PRIVATE_KEY_MARKER_MAX);
                    keep.min(budget)
                };
                self.consume(swallow);
                self.private_key_swallowed += swallow;
                if self.private_key_swallowed < MAX_PRIVATE_KEY_BLOCK {
                    return;
                }
                self.in_private_key = false;
            }
            if let Some((start, end)) = self.find_private_key_begin() {
                out.extend(scrubber.scrub_segment(&self.pending[..start], false));
                out.extend_from_slice(PRIVATE_KEY_LABEL);
                self.consume(end);
                self.in_private_key = true;
                self.private_key_swallowed = 0;
                continue;
            }
            if at_end {
                out.extend(scrubber.scrub_segment(&self.pending, true));
                self.pending.clear();
                return;
            }
            let mut cut = scrubber.safe_cut(&self.pending, &mut self.newline_free);
            if self.live {
                cut = cut.max(scrubber.live_cut(&self.pending));
            }
            if cut > 0 {
                out.extend(scrubber.scrub_segment(&self.pending[..cut], false));
                self.consume(cut);
            }
            return;
        }
    }

    /// The first private key BEGIN marker in `pending`, searching only what may hold one that
    /// was not complete at the previous search.
    fn find_private_key_begin(&mut self) -> Option<(usize, usize)> {
        let markers = self.scrubber.private_keys.as_ref()?;
        let from = self.begin_searched.saturating_sub(PRIVATE_KEY_MARKER_MAX);
        let found = markers
            .begin
            .find(&self.pending[from..])
            .map(|m| (from + m.start(), from + m.end()));
        if found.is_none() {
            self.begin_searched = self.pending.len();
        }
        found
    }

    /// Drops the first `count` held bytes (already emitted or swallowed).
    fn consume(&mut self, count: usize) {
        self.pending.drain(..count);
        self.newline_free = 0;
        self.begin_searched = 0;
    }
}

#[cfg(test)]
mod tests;
