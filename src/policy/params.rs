//! Typed parameter validators: the real defence against hostile arguments (invariant 2).
//!
//! Every value arrives as text and leaves either normalized or refused with the parameter's name
//! and the rule that failed. Invariants: NUL, CR and LF are refused in every type except `sql`,
//! which takes LF and TAB (still no NUL, CR or other control character); a string is
//! matched by an anchored pattern; a path is absolute, normalized, has no `..`, and lies under a
//! declared root, reached beneath it without any symlink (`crate::pinned`): an existing file (with
//! a single link) or directory, or — only where the parameter declares `create` — a new entry in
//! an existing directory, which the executor creates itself. The child gets the pinned
//! descriptor, not the name (`policy::template`, `exec`). Option injection (a value that would
//! begin an argv element with `-`) is checked by the template, which knows element positions.
#![forbid(unsafe_code)]

use super::sql::{self, SqlOptions};
use super::units::parse_duration;
use crate::pinned::{PinError, PinKind};
use regex::Regex;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// How far a path value is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathCheck {
    /// Every rule, including the walk beneath the root on this host's filesystem (a call).
    OnThisHost,
    /// The type's rules on the text alone (absolute, normalized, no `..`, under a root): for
    /// replaying history recorded on another host (`policy coverage`, `policy suggest`), where
    /// the files may not exist. A value accepted so is not a pinned path.
    Lexical,
}

/// Who opens a path parameter's file (see [`ParamKind::Path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathOpener {
    /// The verb's program, through the descriptor pinned at validation.
    Child,
    /// A builtin file verb, beneath its root when it runs.
    FileVerb,
}

/// A compiled parameter.
#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub description: String,
    pub kind: ParamKind,
    /// Refused when absent and no default exists.
    pub required: bool,
    /// Normalized default value.
    pub default: Option<String>,
    /// May the value begin an argv element with `-`?
    pub allow_dash: bool,
}

/// The type of a parameter and its constraints.
#[derive(Debug, Clone)]
pub enum ParamKind {
    Enum {
        values: Vec<String>,
    },
    Int {
        min: i64,
        max: i64,
    },
    Str {
        pattern: Regex,
        source: String,
        max_length: usize,
    },
    Bool {
        flag: String,
    },
    Path {
        roots: Vec<PathBuf>,
        /// May name an entry that does not exist yet: the executor creates it as an empty file
        /// just before the run (`crate::pinned::NewEntry::create_file`). Without it, a path
        /// that does not exist is refused.
        create: bool,
        /// Who opens the path. A command verb's path is resolved beneath its root here and
        /// handed to the child as that descriptor; a file verb's own `path` is opened beneath
        /// its root by `crate::files` (openat2, no symlinks), which also refuses protected
        /// names, so here it gets the checks of its text.
        opened_by: PathOpener,
    },
    Duration {
        max: Option<Duration>,
    },
    SystemdUnit,
    K8sName,
    Hostname,
    Sql(SqlOptions),
    /// File content for the builtin file verbs: any text up to a size, newlines allowed. It never
    /// reaches an argv.
    Content {
        max_bytes: u64,
    },
}

/// A refused value: which parameter, which rule, and a message an agent can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamRejection {
    pub param: String,
    pub rule: &'static str,
    pub message: String,
}

impl std::fmt::Display for ParamRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "parameter `{}`: {}", self.param, self.message)
    }
}

/// Hard cap for any value other than file content, checked before any other work.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Longest value accepted by the name types and by strings without `max_length`.
pub const DEFAULT_MAX_LENGTH: usize = 256;

/// The unit types systemd knows (the suffix of a unit's full name).
pub const SYSTEMD_UNIT_SUFFIXES: &[&str] = &[
    "service",
    "socket",
    "timer",
    "target",
    "mount",
    "automount",
    "path",
    "slice",
    "scope",
    "device",
    "swap",
];

impl ParamKind {
    /// Short description for `list` and errors, e.g. `int 1..=5000`.
    pub fn describe(&self) -> String {
        match self {
            ParamKind::Enum { values } => format!("enum({})", values.join("|")),
            ParamKind::Int { min, max } => format!("int {min}..={max}"),
            ParamKind::Str {
                source, max_length, ..
            } => format!("string /{source}/ (max {max_length} bytes)"),
            ParamKind::Bool { flag } => format!("bool (true adds {flag})"),
            ParamKind::Path { roots, create, .. } => format!(
                "path under {}{}",
                roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if *create { " (or a new file)" } else { "" }
            ),
            ParamKind::Duration { max } => match max {
                Some(m) => format!("duration (e.g. 30s, 5m; max {}s)", m.as_secs()),
                None => "duration (e.g. 30s, 5m, 1h30m)".into(),
            },
            ParamKind::SystemdUnit => "systemd-unit".into(),
            ParamKind::K8sName => "k8s-name".into(),
            ParamKind::Hostname => "hostname".into(),
            ParamKind::Sql(_) => "sql (one read-only statement)".into(),
            ParamKind::Content { max_bytes } => format!("text (max {max_bytes} bytes)"),
        }
    }

    /// Is this a bool flag (rendered as its flag or as nothing)?
    pub fn is_bool(&self) -> bool {
        matches!(self, ParamKind::Bool { .. })
    }
}

impl Param {
    fn reject(&self, rule: &'static str, message: impl Into<String>) -> ParamRejection {
        ParamRejection {
            param: self.name.clone(),
            rule,
            message: message.into(),
        }
    }

    /// Validate one value and return its normalized form.
    pub fn validate(&self, value: &str) -> Result<String, ParamRejection> {
        self.validate_with(value, PathCheck::OnThisHost)
    }

    /// Validate one value by its type's rules alone: a path is not looked up on this host
    /// ([`PathCheck::Lexical`]). Never the check of a call.
    pub fn validate_lexically(&self, value: &str) -> Result<String, ParamRejection> {
        self.validate_with(value, PathCheck::Lexical)
    }

    fn validate_with(&self, value: &str, path_check: PathCheck) -> Result<String, ParamRejection> {
        if let ParamKind::Content { max_bytes } = &self.kind {
            if value.contains('\0') {
                return Err(self.reject("control-character", "NUL is not allowed in file content"));
            }
            if value.len() as u64 > *max_bytes {
                return Err(self.reject(
                    "max-size",
                    format!("content is {} bytes, the limit is {max_bytes}", value.len()),
                ));
            }
            return Ok(value.to_string());
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(self.reject(
                "max-length",
                format!(
                    "value is {} bytes; no parameter of this type takes more than {MAX_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
        if let ParamKind::Sql(_) = &self.kind {
            self.refuse_sql_control_characters(value)?;
        } else if value.bytes().any(|b| matches!(b, b'\0' | b'\n' | b'\r')) {
            return Err(self.reject(
                "control-character",
                "NUL, CR and LF are not allowed in any parameter",
            ));
        }
        match &self.kind {
            ParamKind::Enum { values } => {
                if values.iter().any(|v| v == value) {
                    Ok(value.to_string())
                } else {
                    Err(self.reject(
                        "enum",
                        format!("{value:?} is not one of: {}", values.join(", ")),
                    ))
                }
            }
            ParamKind::Int { min, max } => {
                let digits = value.strip_prefix('-').unwrap_or(value);
                if digits.is_empty()
                    || digits.len() > 19
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(self.reject("int", format!("{value:?} is not an integer")));
                }
                let n: i64 = value
                    .parse()
                    .map_err(|_| self.reject("int", format!("{value:?} is out of range")))?;
                if n < *min || n > *max {
                    return Err(self.reject(
                        "range",
                        format!("{n} is outside the allowed range {min}..={max}"),
                    ));
                }
                Ok(n.to_string())
            }
            ParamKind::Str {
                pattern,
                source,
                max_length,
            } => {
                if value.len() > *max_length {
                    return Err(self.reject(
                        "max-length",
                        format!("value is {} bytes, the limit is {max_length}", value.len()),
                    ));
                }
                if !pattern.is_match(value) {
                    return Err(self.reject(
                        "pattern",
                        format!("{value:?} does not match the pattern /{source}/"),
                    ));
                }
                Ok(value.to_string())
            }
            ParamKind::Bool { .. } => match value {
                "true" | "yes" | "1" | "on" => Ok("true".into()),
                "false" | "no" | "0" | "off" => Ok("false".into()),
                _ => Err(self.reject("bool", format!("{value:?} is not true or false"))),
            },
            ParamKind::Path {
                roots,
                create,
                opened_by,
            } => {
                let path_check = match opened_by {
                    PathOpener::Child => path_check,
                    PathOpener::FileVerb => PathCheck::Lexical,
                };
                self.validate_path(value, roots, *create, path_check)
            }
            ParamKind::Duration { max } => {
                let d = parse_duration(value).map_err(|e| self.reject("duration", e))?;
                if let Some(max) = max
                    && d > *max
                {
                    return Err(self.reject(
                        "range",
                        format!("{value} is longer than the maximum {}s", max.as_secs()),
                    ));
                }
                Ok(value.to_string())
            }
            ParamKind::SystemdUnit => self.validate_systemd_unit(value),
            ParamKind::K8sName => self.validate_k8s_name(value),
            ParamKind::Hostname => self.validate_hostname(value),
            ParamKind::Content { .. } => Ok(value.to_string()),
            ParamKind::Sql(opts) => match sql::validate(value, opts) {
                Ok(()) => Ok(value.to_string()),
                Err(rejection) => Err(self.reject(rejection.rule, rejection.message)),
            },
        }
    }

    /// A query is one `-c` element, so line breaks are only whitespace to the server: LF and TAB
    /// pass (agents send formatted SQL). NUL cannot reach argv; CR is refused rather than rewritten
    /// (inside a string literal CRLF → LF would change the query), and other control characters
    /// have no place in SQL text.
    fn refuse_sql_control_characters(&self, value: &str) -> Result<(), ParamRejection> {
        match value
            .bytes()
            .find(|b| b.is_ascii_control() && !matches!(b, b'\n' | b'\t'))
        {
            None => Ok(()),
            Some(b'\r') => Err(self.reject(
                "control-character",
                "CR is not allowed in SQL: send LF line endings (convert CRLF to LF)",
            )),
            Some(byte) => Err(self.reject(
                "control-character",
                format!("control character 0x{byte:02x} is not allowed in SQL (LF and TAB are)"),
            )),
        }
    }

    fn validate_path(
        &self,
        value: &str,
        roots: &[PathBuf],
        create: bool,
        path_check: PathCheck,
    ) -> Result<String, ParamRejection> {
        let path = Path::new(value);
        if !path.is_absolute() {
            return Err(self.reject(
                "path-absolute",
                format!("{value:?} is not an absolute path"),
            ));
        }
        if value.len() > 4096 {
            return Err(self.reject("max-length", "path is longer than 4096 bytes"));
        }
        let mut normalized = PathBuf::from("/");
        for component in path.components() {
            match component {
                Component::RootDir => {}
                Component::Normal(part) => normalized.push(part),
                Component::ParentDir => {
                    return Err(self.reject("path-dotdot", format!("{value:?} contains `..`")));
                }
                Component::CurDir | Component::Prefix(_) => {
                    return Err(
                        self.reject("path-normalized", format!("{value:?} is not normalized"))
                    );
                }
            }
        }
        if normalized.as_os_str() != path.as_os_str() {
            return Err(self.reject(
                "path-normalized",
                format!(
                    "{value:?} is not normalized (write {:?})",
                    normalized.display()
                ),
            ));
        }
        let under_root = |p: &Path| roots.iter().any(|r| p.starts_with(r));
        if !under_root(&normalized) {
            return Err(self.reject(
                "path-root",
                format!(
                    "{value:?} is not under an allowed root ({})",
                    roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if path_check == PathCheck::Lexical {
            return Ok(normalized.to_string_lossy().into_owned());
        }
        let root = root_of(roots, &normalized).expect("checked under a root above");
        match crate::pinned::resolve(root, &normalized) {
            Ok(resolution) if !create && resolution.kind == PinKind::NewEntry => {
                return Err(self.reject(
                    "path-exists",
                    format!(
                        "{value:?} does not exist (this parameter names existing files and directories only)"
                    ),
                ));
            }
            Ok(_) => {}
            Err(PinError::Symlink { .. }) => {
                return Err(self.reject(
                    "path-symlink-escape",
                    format!(
                        "{value:?} passes through a symlink below its root; path parameters never follow symlinks (name the target itself)"
                    ),
                ));
            }
            Err(PinError::NoParent { .. }) if !create => {
                return Err(self.reject("path-exists", format!("{value:?} does not exist")));
            }
            Err(PinError::NoParent { .. }) => {
                return Err(self.reject(
                    "path-parent",
                    format!("{value:?} does not exist and neither does its parent directory"),
                ));
            }
            Err(PinError::NotFileOrDirectory { .. }) => {
                return Err(self.reject(
                    "path-type",
                    format!("{value:?} is not a regular file or a directory"),
                ));
            }
            Err(e @ PinError::HardLinked { .. }) => {
                return Err(self.reject("path-hardlink", e.to_string()));
            }
            Err(e) => return Err(self.reject("path-open", e.to_string())),
        }
        Ok(normalized.to_string_lossy().into_owned())
    }

    fn validate_systemd_unit(&self, value: &str) -> Result<String, ParamRejection> {
        let ok_chars = value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":_.@\\-".contains(&b));
        let suffix_ok = match value.rsplit_once('.') {
            Some((stem, suffix)) => !stem.is_empty() && SYSTEMD_UNIT_SUFFIXES.contains(&suffix),
            None => true,
        };
        if value.is_empty()
            || value.len() > DEFAULT_MAX_LENGTH
            || !ok_chars
            || value.starts_with(['-', '.'])
            || !suffix_ok
        {
            return Err(self.reject(
                "systemd-unit",
                format!(
                    "{value:?} is not a systemd unit name (letters, digits, `:_.@\\-`, optional suffix such as .service)"
                ),
            ));
        }
        Ok(value.to_string())
    }

    fn validate_k8s_name(&self, value: &str) -> Result<String, ParamRejection> {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if value.is_empty() || value.len() > 253 || !value.split('.').all(label_ok) {
            return Err(self.reject(
                "k8s-name",
                format!(
                    "{value:?} is not a Kubernetes name (lower-case letters, digits, `-` and `.`, starting and ending alphanumeric, max 253)"
                ),
            ));
        }
        Ok(value.to_string())
    }

    fn validate_hostname(&self, value: &str) -> Result<String, ParamRejection> {
        let trimmed = value.strip_suffix('.').unwrap_or(value);
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if trimmed.is_empty() || trimmed.len() > 253 || !trimmed.split('.').all(label_ok) {
            return Err(self.reject(
                "hostname",
                format!("{value:?} is not a hostname (RFC 1123 labels of letters, digits and `-`)"),
            ));
        }
        Ok(trimmed.to_ascii_lowercase())
    }
}

/// The root a normalized path lies under: the longest (most specific) matching one.
pub fn root_of<'a>(roots: &'a [PathBuf], path: &Path) -> Option<&'a Path> {
    roots
        .iter()
        .filter(|r| path.starts_with(r))
        .max_by_key(|r| r.as_os_str().len())
        .map(PathBuf::as_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(kind: ParamKind) -> Param {
        Param {
            name: "p".into(),
            description: String::new(),
            kind,
            required: true,
            default: None,
            allow_dash: false,
        }
    }

    /// The limits hold exactly at their boundary: the longest allowed value passes, one byte
    /// (or digit) more is refused by the limit's own rule, and the message names the parameter.
    #[test]
    fn length_limits_hold_at_their_boundary() {
        let int = param(ParamKind::Int {
            min: i64::MIN,
            max: i64::MAX,
        });
        assert_eq!(
            int.validate("9223372036854775807").unwrap(),
            "9223372036854775807"
        );
        assert_eq!(
            int.validate("-9223372036854775808").unwrap(),
            "-9223372036854775808"
        );
        assert_eq!(
            int.validate("10000000000000000000").unwrap_err().rule,
            "int"
        );

        let unit = param(ParamKind::SystemdUnit);
        let longest = format!("{}.service", "a".repeat(DEFAULT_MAX_LENGTH - 8));
        assert_eq!(unit.validate(&longest).unwrap(), longest);
        let too_long = format!("a{longest}");
        assert!(unit.validate(&too_long).is_err());

        let path = param(ParamKind::Path {
            roots: vec![PathBuf::from("/")],
            create: false,
            opened_by: PathOpener::Child,
        });
        // Exactly 4096 bytes is within the limit (refused, if at all, for another reason).
        let at_limit = format!("/{}", "a".repeat(4095));
        if let Err(rejection) = path.validate(&at_limit) {
            assert_ne!(rejection.rule, "max-length", "{rejection}");
        }
        let long_path = format!("/{}", "a/".repeat(2500));
        let rejection = path.validate(&long_path).unwrap_err();
        assert_eq!(rejection.rule, "max-length", "{rejection}");
        assert_eq!(
            rejection.to_string(),
            "parameter `p`: path is longer than 4096 bytes"
        );
    }

    #[test]
    fn control_characters_refused_everywhere() {
        let kinds = [
            ParamKind::Enum {
                values: vec!["a\nb".into()],
            },
            ParamKind::Str {
                pattern: Regex::new("^(?:.*)$").unwrap(),
                source: ".*".into(),
                max_length: 100,
            },
            ParamKind::SystemdUnit,
            ParamKind::Hostname,
        ];
        for kind in kinds {
            let p = param(kind);
            for bad in ["a\nb", "a\0b", "a\rb"] {
                assert_eq!(p.validate(bad).unwrap_err().rule, "control-character");
            }
        }
    }

    #[test]
    fn sql_takes_lf_and_tab_but_no_cr_nul_or_other_controls() {
        let p = param(ParamKind::Sql(SqlOptions::default()));
        let multi_line = "SELECT id,\n\tname\nFROM t\nWHERE id > 1";
        assert_eq!(p.validate(multi_line).unwrap(), multi_line);
        for (bad, reason) in [
            ("SELECT 1\r\nFROM t", "CR is not allowed in SQL"),
            ("SELECT 1\rFROM t", "CR is not allowed in SQL"),
            ("SELECT 1\0", "control character 0x00"),
            ("SELECT 1\x1b[2J", "control character 0x1b"),
            ("SELECT 1\x0bFROM t", "control character 0x0b"),
        ] {
            let rejection = p.validate(bad).unwrap_err();
            assert_eq!(rejection.rule, "control-character", "{bad:?}");
            assert!(
                rejection.message.contains(reason),
                "{bad:?}: {}",
                rejection.message
            );
        }
    }

    #[test]
    fn ints_normalize_and_range_check() {
        let p = param(ParamKind::Int { min: 1, max: 5000 });
        assert_eq!(p.validate("050").unwrap(), "50");
        assert_eq!(p.validate("0").unwrap_err().rule, "range");
        assert_eq!(p.validate("99999999999999999999").unwrap_err().rule, "int");
        assert_eq!(p.validate("1e3").unwrap_err().rule, "int");
        assert_eq!(p.validate(" 5").unwrap_err().rule, "int");
    }

    #[test]
    fn names() {
        let unit = param(ParamKind::SystemdUnit);
        assert!(unit.validate("nginx.service").is_ok());
        assert!(unit.validate("getty@tty1.service").is_ok());
        assert!(unit.validate("nginx").is_ok());
        for bad in ["--since=today", "-x", "a b", "nginx.exe", "$(id)"] {
            assert!(unit.validate(bad).is_err(), "{bad}");
        }
        let k8s = param(ParamKind::K8sName);
        assert!(k8s.validate("web-7d9f").is_ok());
        for bad in ["Web", "-web", "web-", "a_b", ""] {
            assert!(k8s.validate(bad).is_err(), "{bad}");
        }
        let host = param(ParamKind::Hostname);
        assert_eq!(host.validate("DB1.Internal").unwrap(), "db1.internal");
        for bad in ["-db", "db..x", "db_1", "a;b"] {
            assert!(host.validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("ok.txt"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        let p = param(ParamKind::Path {
            roots: vec![root.clone()],
            create: false,
            opened_by: PathOpener::Child,
        });
        let ok = root.join("ok.txt");
        assert!(p.validate(ok.to_str().unwrap()).is_ok());
        let rules = |v: String| p.validate(&v).unwrap_err().rule;
        assert_eq!(rules(format!("{}/../etc", root.display())), "path-dotdot");
        assert_eq!(
            rules(format!("{}/./ok.txt", root.display())),
            "path-normalized"
        );
        assert_eq!(
            rules(format!("{}//ok.txt", root.display())),
            "path-normalized"
        );
        assert_eq!(rules("relative".into()), "path-absolute");
        assert_eq!(rules("/etc/passwd".into()), "path-root");
        assert_eq!(
            rules(format!("{}/link", root.display())),
            "path-symlink-escape"
        );
        let new = format!("{}/new.txt", root.display());
        assert_eq!(rules(new.clone()), "path-exists");
        std::fs::hard_link(&ok, root.join("second-name")).unwrap();
        assert_eq!(rules(ok.display().to_string()), "path-hardlink");
        // Only a parameter that declares `create` names a new entry (in an existing directory).
        let output = param(ParamKind::Path {
            roots: vec![root.clone()],
            create: true,
            opened_by: PathOpener::Child,
        });
        assert_eq!(output.validate(&new).unwrap(), new);
        let orphan = format!("{}/no/such/new.txt", root.display());
        assert_eq!(output.validate(&orphan).unwrap_err().rule, "path-parent");
    }

    #[test]
    fn a_lexical_check_keeps_every_rule_of_the_text_and_skips_only_the_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        let p = param(ParamKind::Path {
            roots: vec![root.clone()],
            create: false,
            opened_by: PathOpener::Child,
        });
        let absent = format!("{}/no/such/file.log", root.display());
        assert_eq!(p.validate(&absent).unwrap_err().rule, "path-exists");
        assert_eq!(p.validate_lexically(&absent).unwrap(), absent);
        // The lookup is what a lexical check skips: a symlink is only seen on this host.
        let link = format!("{}/link", root.display());
        assert_eq!(p.validate(&link).unwrap_err().rule, "path-symlink-escape");
        assert!(p.validate_lexically(&link).is_ok());
        let lexical = |v: String| p.validate_lexically(&v).unwrap_err().rule;
        assert_eq!(lexical(format!("{}/../etc", root.display())), "path-dotdot");
        assert_eq!(lexical(format!("{}//x", root.display())), "path-normalized");
        assert_eq!(lexical("relative".into()), "path-absolute");
        assert_eq!(lexical("/etc/passwd".into()), "path-root");
        assert_eq!(lexical("/etc/\npasswd".into()), "control-character");
    }
}
