//! The JSON Schema of one parameter's values, as `list` sends it (and `verbd mcp` turns into a
//! tool's input schema).
//!
//! Responsibility: say, in JSON Schema, what [`Param::validate`](super::params::Param::validate)
//! accepts. Invariants: the schema is a *description* for clients, never a check the daemon
//! relies on — every value is validated by the daemon's own validator whatever a client did with
//! the schema; it never refuses a value the validator accepts in the JSON type it names (so no
//! valid call is made impossible), and it states every rule JSON Schema can state (enum, integer
//! range, anchored pattern, length). What it cannot state (path roots and symlinks, the SQL
//! validator, byte rather than character lengths, label lengths) is left to the validator and
//! named in the parameter's description (`kind.describe()`).
//!
//! Patterns: a `string` parameter's pattern is sent anchored (`^(?:…)$`, as the daemon compiles
//! it) when it uses only syntax that reads the same in ECMA-262 and Rust's `regex`; a pattern
//! with inline flags, named groups, Unicode classes, POSIX classes or Rust-only escapes is not
//! sent (the description carries it). One known difference is left: Rust's `\d`, `\w` and `\s`
//! are Unicode-aware, ECMA-262's `\d` and `\w` are ASCII-only, so such a schema may refuse a
//! non-ASCII digit or letter the daemon accepts.
#![forbid(unsafe_code)]

use super::params::{DEFAULT_MAX_LENGTH, Param, ParamKind};
use serde_json::{Value, json};

/// Longest path the path validator accepts.
const MAX_PATH_BYTES: usize = 4096;

/// One RFC 1123 label: letters, digits and `-`, not starting or ending with `-`.
const HOSTNAME_PATTERN: &str =
    r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*\.?$";
const K8S_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Characters of a unit name; it may not begin with `-` or `.`.
const SYSTEMD_UNIT_PATTERN: &str = r"^[A-Za-z0-9:_@\\][A-Za-z0-9:_.@\\-]*$";
/// `30s`, `5m`, `1h30m`, … (the parser trims surrounding white space).
const DURATION_PATTERN: &str = r"^\s*([0-9]{1,12}(ms|s|m|h|d))+\s*$";

impl ParamKind {
    /// The JSON Schema of this parameter's values (without description or default).
    ///
    /// ```
    /// use verbd::policy::params::ParamKind;
    /// let kind = ParamKind::Int { min: 1, max: 5000 };
    /// assert_eq!(
    ///     kind.json_schema(),
    ///     serde_json::json!({"type": "integer", "minimum": 1, "maximum": 5000})
    /// );
    /// ```
    pub fn json_schema(&self) -> Value {
        match self {
            ParamKind::Enum { values } => json!({ "type": "string", "enum": values }),
            ParamKind::Int { min, max } => {
                json!({ "type": "integer", "minimum": min, "maximum": max })
            }
            ParamKind::Str {
                source, max_length, ..
            } => {
                let mut schema = json!({ "type": "string", "maxLength": max_length });
                if is_portable_pattern(source) {
                    schema["pattern"] = Value::String(format!("^(?:{source})$"));
                }
                schema
            }
            ParamKind::Bool { .. } => json!({ "type": "boolean" }),
            ParamKind::Path { .. } => {
                json!({ "type": "string", "pattern": "^/", "maxLength": MAX_PATH_BYTES })
            }
            ParamKind::Duration { .. } => json!({ "type": "string", "pattern": DURATION_PATTERN }),
            ParamKind::SystemdUnit => json!({
                "type": "string",
                "pattern": SYSTEMD_UNIT_PATTERN,
                "maxLength": DEFAULT_MAX_LENGTH,
            }),
            ParamKind::K8sName => json!({
                "type": "string",
                "pattern": K8S_NAME_PATTERN,
                "maxLength": 253,
            }),
            ParamKind::Hostname => json!({
                "type": "string",
                "pattern": HOSTNAME_PATTERN,
                "maxLength": 254,
            }),
            ParamKind::Sql(opts) => json!({ "type": "string", "maxLength": opts.max_length }),
            ParamKind::Content { max_bytes } => json!({ "type": "string", "maxLength": max_bytes }),
        }
    }

    /// A default value (kept as text by the policy) in this parameter's JSON type.
    fn json_default(&self, default: &str) -> Value {
        match self {
            ParamKind::Int { .. } => default
                .parse::<i64>()
                .map_or_else(|_| Value::String(default.into()), Value::from),
            ParamKind::Bool { .. } => Value::Bool(default == "true"),
            _ => Value::String(default.into()),
        }
    }
}

impl Param {
    /// The JSON Schema of this parameter's values, with its default (in the parameter's JSON
    /// type) when it has one.
    pub fn json_schema(&self) -> Value {
        let mut schema = self.kind.json_schema();
        if let Some(default) = &self.default {
            schema["default"] = self.kind.json_default(default);
        }
        schema
    }
}

/// Does `source` use only regex syntax that means the same in ECMA-262 as in Rust's `regex`?
/// Conservative: any group other than `(?:`, any Unicode/POSIX class and the Rust-only escapes
/// make it not portable.
fn is_portable_pattern(source: &str) -> bool {
    let groups_ok = source
        .match_indices("(?")
        .all(|(at, _)| source[at..].starts_with("(?:"));
    let rust_only = [
        r"\p", r"\P", "[[:", r"\A", r"\z", r"\Z", r"\Q", r"\E", r"\h", r"\H", r"\x{", r"\b{",
        r"\<", r"\>", "[[", "&&", "--", "~~",
    ];
    groups_ok && !rust_only.iter().any(|s| source.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

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

    /// The schema's pattern, compiled with Rust's regex (ECMA-262 and Rust agree on what is
    /// sent; see the module documentation).
    fn pattern_of(kind: &ParamKind) -> Option<Regex> {
        kind.json_schema()["pattern"]
            .as_str()
            .map(|p| Regex::new(p).unwrap())
    }

    #[test]
    fn string_patterns_are_anchored_and_sent_only_when_portable() {
        let str_kind = |source: &str| ParamKind::Str {
            pattern: Regex::new(&format!("^(?:{source})$")).unwrap(),
            source: source.into(),
            max_length: 64,
        };
        assert_eq!(
            str_kind("[a-z]+|x").json_schema(),
            json!({ "type": "string", "maxLength": 64, "pattern": "^(?:[a-z]+|x)$" })
        );
        for rust_only in [
            r"(?i)abc",
            r"\p{L}+",
            r"[[:alpha:]]+",
            r"(?P<n>a)",
            r"[a-z&&[^x]]",
        ] {
            assert_eq!(
                str_kind(rust_only).json_schema(),
                json!({ "type": "string", "maxLength": 64 }),
                "{rust_only}"
            );
        }
    }

    /// The schema never refuses what the validator accepts, and refuses what it states: checked
    /// value by value against the daemon's own validator.
    #[test]
    fn named_type_patterns_agree_with_the_validators() {
        let cases: &[(ParamKind, &[&str], &[&str])] = &[
            (
                ParamKind::SystemdUnit,
                &["nginx.service", "getty@tty1.service", "nginx", "a:b_c\\x2d"],
                &["-x", ".hidden", "a b", "$(id)"],
            ),
            (
                ParamKind::K8sName,
                &["web-7d9f", "a.b-c", "x"],
                &["Web", "-web", "web-", "a_b", ""],
            ),
            (
                ParamKind::Hostname,
                &["db1.internal", "DB1.Internal", "example.com."],
                &["-db", "db..x", "db_1", "a;b"],
            ),
            (
                ParamKind::Duration { max: None },
                &["30s", "5m", "1h30m", "500ms", " 5m"],
                &["90", "5 m", "m5", ""],
            ),
        ];
        for (kind, good, bad) in cases {
            let pattern = pattern_of(kind).unwrap();
            let p = param(kind.clone());
            for value in *good {
                assert!(p.validate(value).is_ok(), "validator refuses {value:?}");
                assert!(pattern.is_match(value), "schema refuses {value:?}");
            }
            for value in *bad {
                assert!(p.validate(value).is_err(), "validator accepts {value:?}");
                assert!(!pattern.is_match(value), "schema accepts {value:?}");
            }
        }
    }

    #[test]
    fn defaults_take_the_parameter_type() {
        let with_default = |kind: ParamKind, default: &str| Param {
            default: Some(default.into()),
            ..param(kind)
        };
        let int = with_default(ParamKind::Int { min: 1, max: 9 }, "5");
        assert_eq!(
            int.json_schema(),
            json!({ "type": "integer", "minimum": 1, "maximum": 9, "default": 5 })
        );
        let flag = ParamKind::Bool {
            flag: "--all".into(),
        };
        assert_eq!(
            with_default(flag, "false").json_schema()["default"],
            json!(false)
        );
        let mode = ParamKind::Enum {
            values: vec!["0640".into()],
        };
        assert_eq!(
            with_default(mode, "0640").json_schema()["default"],
            json!("0640")
        );
        assert!(
            param(ParamKind::Hostname)
                .json_schema()
                .get("default")
                .is_none()
        );
    }
}
