//! `verbd policy polkit`: the polkit rule that lets the daemon's user manage exactly the
//! systemd units its policy's verbs name, and nothing else.
//!
//! The packaged unit runs the daemon as an unprivileged user with no capabilities, so a verb
//! running `systemctl restart nginx.service` asks systemd over D-Bus, and systemd asks polkit
//! (`org.freedesktop.systemd1.manage-units`, with the details `unit` and `verb`). The rule
//! generated here answers yes for the daemon's user only, and only for the (unit, verb) pairs
//! the policy's verbs can produce; polkit refuses everything else even if the daemon were
//! tricked into asking.
//!
//! Invariants: the rule is derived from the compiled policy's command templates, never from
//! text matching; a `systemctl` verb whose units or operation the policy does not bound (a
//! unit parameter of type `systemd-unit` with no `values`, an operation polkit cannot limit to
//! units, an operation this generator does not know) makes generation fail and names the verb,
//! so the rule never allows more than the policy does, and no verb is silently left without
//! the authorization it needs.
#![forbid(unsafe_code)]

use crate::policy::params::ParamKind;
use crate::policy::template::{ElementTemplate, Item, Piece};
use crate::policy::{Policy, Verb, VerbAction};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Where the generated rule is installed.
pub const RULE_PATH: &str = "/etc/polkit-1/rules.d/50-verbd.rules";

/// The polkit action systemd checks for starting, stopping, restarting… one unit.
const MANAGE_UNITS: &str = "org.freedesktop.systemd1.manage-units";
/// The polkit action systemd checks for `daemon-reload`.
const RELOAD_DAEMON: &str = "org.freedesktop.systemd1.reload-daemon";

/// What the daemon's user may do, as polkit sees it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Grants {
    /// (unit, systemd's `verb` detail), e.g. ("nginx.service", "restart").
    pub units: BTreeSet<(String, String)>,
    /// Some verb runs `systemctl daemon-reload`.
    pub reload_daemon: bool,
}

/// Why no rule can be generated: the policy lets a verb do something polkit cannot bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolkitError {
    #[error(
        "verb `{verb}`: parameter `{param}` names the unit and may be any unit; narrow it to the units the verb is for (a pack include's `values = {{ {param} = [\"nginx.service\"] }}`, or `type = \"enum\"`), or the rule would let the daemon manage every unit"
    )]
    UnboundedUnit { verb: String, param: String },
    #[error(
        "verb `{verb}`: the systemctl operation comes from parameter `{param}`, which is not an enum; make it an enum of the operations the verb is for"
    )]
    UnboundedOperation { verb: String, param: String },
    #[error(
        "verb `{verb}`: `systemctl {operation}` is authorized by polkit for all units at once (not per unit); run that verb as root (`run_as`) instead of granting it to the daemon's user"
    )]
    NotPerUnit { verb: String, operation: String },
    #[error(
        "verb `{verb}`: `systemctl {operation}` is not an operation this generator knows how to bound; grant it by hand if it needs polkit"
    )]
    UnknownOperation { verb: String, operation: String },
    #[error("verb `{verb}`: unit {unit:?} is a pattern; name the units one by one")]
    UnitPattern { verb: String, unit: String },
}

/// systemctl operations that need no authorization (they only read).
const READING: &[&str] = &[
    "status",
    "show",
    "cat",
    "help",
    "list-units",
    "list-unit-files",
    "list-timers",
    "list-sockets",
    "list-dependencies",
    "list-jobs",
    "list-paths",
    "list-automounts",
    "list-machines",
    "is-active",
    "is-enabled",
    "is-failed",
    "is-system-running",
    "get-default",
    "show-environment",
];

/// systemctl operations polkit authorizes for all units together (`manage-unit-files`,
/// `set-environment`, power actions…).
const NOT_PER_UNIT: &[&str] = &[
    "enable",
    "disable",
    "reenable",
    "preset",
    "preset-all",
    "mask",
    "unmask",
    "link",
    "revert",
    "edit",
    "set-default",
    "isolate",
    "set-environment",
    "unset-environment",
    "import-environment",
    "daemon-reexec",
    "reboot",
    "poweroff",
    "halt",
    "kexec",
    "suspend",
    "hibernate",
    "soft-reboot",
];

/// The `verb` detail systemd passes to polkit for a systemctl operation on units.
fn unit_verb(operation: &str) -> Option<&'static str> {
    Some(match operation {
        "start" => "start",
        "stop" => "stop",
        "restart" => "restart",
        "reload" => "reload",
        "try-restart" | "condrestart" => "try-restart",
        "reload-or-restart" => "reload-or-restart",
        "try-reload-or-restart" | "force-reload" => "reload-or-try-restart",
        "kill" => "kill",
        "reset-failed" => "reset-failed",
        _ => return None,
    })
}

/// What the policy's verbs may ask systemd for.
pub fn grants(policy: &Policy) -> Result<Grants, PolkitError> {
    let mut grants = Grants::default();
    for verb in policy.verbs.values() {
        add_verb(verb, &mut grants)?;
    }
    Ok(grants)
}

/// The values an element can take, or the parameter that leaves it open. `None` inside: the
/// element can vanish (a false bool flag).
enum Values {
    Known(Vec<Option<String>>),
    Open(String),
}

fn values_of(element: &ElementTemplate, verb: &Verb) -> Values {
    if let Some(name) = element.sole_param() {
        return match verb.params.get(name).map(|p| &p.kind) {
            Some(ParamKind::Enum { values }) => {
                Values::Known(values.iter().cloned().map(Some).collect())
            }
            Some(ParamKind::Bool { flag }) => Values::Known(vec![Some(flag.clone()), None]),
            _ => Values::Open(name.to_string()),
        };
    }
    let mut text = String::new();
    for piece in element.pieces() {
        match piece {
            Piece::Literal(literal) => text.push_str(literal),
            Piece::Param(name) => return Values::Open(name.clone()),
            Piece::Secret(name) | Piece::SecretFile(name) => return Values::Open(name.clone()),
        }
    }
    Values::Known(vec![Some(text)])
}

fn is_option(value: &Option<String>) -> bool {
    value.as_deref().is_none_or(|v| v.starts_with('-'))
}

fn add_verb(verb: &Verb, grants: &mut Grants) -> Result<(), PolkitError> {
    let VerbAction::Command { template, .. } = &verb.action else {
        return Ok(());
    };
    if template.program().file_name().and_then(|n| n.to_str()) != Some("systemctl") {
        return Ok(());
    }
    let elements: Vec<&ElementTemplate> = template
        .items()
        .iter()
        .flat_map(|item| match item {
            Item::Element(element) => std::slice::from_ref(element),
            Item::Group(elements) => elements.as_slice(),
        })
        .collect();
    let mut rest = elements.iter().map(|e| values_of(e, verb));
    // The operation: the first element that is not an option.
    let operations: Vec<String> = loop {
        match rest.next() {
            None => return Ok(()), // only options: `systemctl --failed` lists units
            Some(Values::Known(values)) if values.iter().all(is_option) => continue,
            Some(Values::Known(values)) => break values.into_iter().flatten().collect(),
            Some(Values::Open(param)) => {
                return Err(PolkitError::UnboundedOperation {
                    verb: verb.name.clone(),
                    param,
                });
            }
        }
    };
    let mut units = BTreeSet::new();
    let mut open_unit = None;
    for values in rest {
        match values {
            Values::Known(values) => {
                for unit in values.into_iter().flatten().filter(|v| !v.starts_with('-')) {
                    if unit.contains(['*', '?', '[']) {
                        return Err(PolkitError::UnitPattern {
                            verb: verb.name.clone(),
                            unit,
                        });
                    }
                    units.insert(unit_name(&unit));
                }
            }
            Values::Open(param) => open_unit = open_unit.or(Some(param)),
        }
    }
    for operation in operations {
        let op = operation.as_str();
        if READING.contains(&op) {
            continue;
        }
        if op == "daemon-reload" {
            grants.reload_daemon = true;
            continue;
        }
        if NOT_PER_UNIT.contains(&op) {
            return Err(PolkitError::NotPerUnit {
                verb: verb.name.clone(),
                operation,
            });
        }
        let Some(detail) = unit_verb(op) else {
            return Err(PolkitError::UnknownOperation {
                verb: verb.name.clone(),
                operation,
            });
        };
        if let Some(param) = &open_unit {
            return Err(PolkitError::UnboundedUnit {
                verb: verb.name.clone(),
                param: param.clone(),
            });
        }
        for unit in &units {
            grants.units.insert((unit.clone(), detail.to_string()));
        }
    }
    Ok(())
}

/// The unit's full name, as systemd gives it to polkit: systemctl adds `.service` to a name
/// without a unit type.
fn unit_name(name: &str) -> String {
    let typed = name
        .rsplit_once('.')
        .is_some_and(|(_, suffix)| crate::policy::params::SYSTEMD_UNIT_SUFFIXES.contains(&suffix));
    if typed {
        name.to_string()
    } else {
        format!("{name}.service")
    }
}

/// The rule file: JavaScript for polkitd, allowing `user` exactly `grants`.
pub fn rule(grants: &Grants, user: &str, origin: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// {RULE_PATH}: generated by `verbd policy polkit` from {}.",
        one_line(origin)
    );
    let _ = writeln!(
        out,
        "// Lets the verbd daemon's user `{}` manage exactly the units its verbs name (and nothing",
        one_line(user)
    );
    let _ = writeln!(
        out,
        "// else); polkit refuses every other unit and operation. Generate it again whenever the"
    );
    let _ = writeln!(out, "// policy's systemctl verbs change.");
    let _ = writeln!(out, "polkit.addRule(function (action, subject) {{");
    let _ = writeln!(out, "    if (subject.user !== {}) {{", js_string(user));
    let _ = writeln!(out, "        return polkit.Result.NOT_HANDLED;");
    let _ = writeln!(out, "    }}");
    let mut by_unit: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (unit, verb) in &grants.units {
        by_unit.entry(unit).or_default().push(verb);
    }
    if !by_unit.is_empty() {
        let _ = writeln!(out, "    var allowed = [");
        for (unit, verbs) in &by_unit {
            let verbs: Vec<String> = verbs.iter().map(|v| js_string(v)).collect();
            let _ = writeln!(
                out,
                "        [{}, [{}]],",
                js_string(unit),
                verbs.join(", ")
            );
        }
        let _ = writeln!(out, "    ];");
        let _ = writeln!(out, "    if (action.id === {}) {{", js_string(MANAGE_UNITS));
        let _ = writeln!(out, "        var unit = action.lookup(\"unit\");");
        let _ = writeln!(out, "        var verb = action.lookup(\"verb\");");
        let _ = writeln!(out, "        for (var i = 0; i < allowed.length; i++) {{");
        let _ = writeln!(
            out,
            "            if (allowed[i][0] === unit && allowed[i][1].indexOf(verb) >= 0) {{"
        );
        let _ = writeln!(out, "                return polkit.Result.YES;");
        let _ = writeln!(out, "            }}");
        let _ = writeln!(out, "        }}");
        let _ = writeln!(out, "    }}");
    }
    if grants.reload_daemon {
        let _ = writeln!(
            out,
            "    if (action.id === {}) {{",
            js_string(RELOAD_DAEMON)
        );
        let _ = writeln!(out, "        return polkit.Result.YES;");
        let _ = writeln!(out, "    }}");
    }
    let _ = writeln!(out, "    return polkit.Result.NOT_HANDLED;");
    let _ = writeln!(out, "}});");
    out
}

/// A JavaScript string literal: JSON's escaping, plus the two line separators JSON allows raw
/// and older JavaScript engines do not.
fn js_string(text: &str) -> String {
    serde_json::Value::String(text.to_string())
        .to_string()
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// `text` fit for a `//` comment: no line breaks.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(verbs: &str) -> Policy {
        let text = format!(
            r#"
version = 1
[roles.agent]
uids = [62850]
[sandbox.sd]
read = ["/usr"]
{verbs}
"#
        );
        crate::policy::compile(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    fn verb(name: &str, command: &str, params: &str) -> String {
        format!(
            "[verb.{name}]\ncategory = \"mutating\"\nroles = [\"agent\"]\nsandbox = \"sd\"\ncommand = {command:?}\n{params}\n"
        )
    }

    fn pairs(grants: &Grants) -> Vec<(&str, &str)> {
        grants
            .units
            .iter()
            .map(|(u, v)| (u.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn an_enum_of_units_grants_exactly_those_units_for_that_operation() {
        let p = policy(&verb(
            "restart",
            "/usr/bin/systemctl restart {unit}",
            r#"params.unit = { type = "enum", values = ["nginx.service", "postgresql"] }"#,
        ));
        let g = grants(&p).unwrap();
        assert_eq!(
            pairs(&g),
            [
                ("nginx.service", "restart"),
                ("postgresql.service", "restart")
            ]
        );
        assert!(!g.reload_daemon);
    }

    #[test]
    fn operations_map_to_the_verb_systemd_gives_polkit() {
        let p = policy(&format!(
            "{}{}{}",
            verb(
                "act",
                "/usr/bin/systemctl {op} --no-block nginx.socket",
                r#"params.op = { type = "enum", values = ["status", "force-reload", "try-restart"] }"#,
            ),
            verb("dr", "/usr/bin/systemctl daemon-reload", ""),
            verb("lst", "/usr/bin/systemctl --failed --no-pager", ""),
        ));
        let g = grants(&p).unwrap();
        assert_eq!(
            pairs(&g),
            [
                ("nginx.socket", "reload-or-try-restart"),
                ("nginx.socket", "try-restart")
            ]
        );
        assert!(g.reload_daemon);
    }

    #[test]
    fn a_unit_parameter_that_may_be_any_unit_is_refused() {
        let p = policy(&verb(
            "restart",
            "/usr/bin/systemctl restart {unit}",
            r#"params.unit = { type = "systemd-unit" }"#,
        ));
        assert_eq!(
            grants(&p),
            Err(PolkitError::UnboundedUnit {
                verb: "restart".into(),
                param: "unit".into()
            })
        );
        // Reading any unit needs no authorization: nothing to bound.
        let p = policy(&verb(
            "status",
            "/usr/bin/systemctl status {unit}",
            r#"params.unit = { type = "systemd-unit" }"#,
        ));
        assert_eq!(grants(&p), Ok(Grants::default()));
    }

    #[test]
    fn operations_polkit_cannot_limit_to_units_are_refused() {
        for (command, wanted) in [
            (
                "/usr/bin/systemctl enable nginx.service",
                PolkitError::NotPerUnit {
                    verb: "v".into(),
                    operation: "enable".into(),
                },
            ),
            (
                "/usr/bin/systemctl frobnicate nginx.service",
                PolkitError::UnknownOperation {
                    verb: "v".into(),
                    operation: "frobnicate".into(),
                },
            ),
            (
                "/usr/bin/systemctl restart nginx*",
                PolkitError::UnitPattern {
                    verb: "v".into(),
                    unit: "nginx*".into(),
                },
            ),
        ] {
            assert_eq!(grants(&policy(&verb("v", command, ""))), Err(wanted));
        }
        let p = policy(&verb(
            "v",
            "/usr/bin/systemctl {op} nginx.service",
            r#"params.op = { type = "string", pattern = "[a-z]+" }"#,
        ));
        assert!(matches!(
            grants(&p),
            Err(PolkitError::UnboundedOperation { .. })
        ));
    }

    #[test]
    fn verbs_of_other_programs_grant_nothing() {
        let p = policy(&verb("echo", "/bin/echo restart nginx", ""));
        assert_eq!(grants(&p), Ok(Grants::default()));
    }

    #[test]
    fn the_rule_names_the_user_and_each_pair_as_javascript_strings() {
        let mut g = Grants::default();
        g.units.insert(("nginx.service".into(), "restart".into()));
        g.units.insert(("nginx.service".into(), "reload".into()));
        let text = rule(&g, "verbd", "/etc/verbd/policy.toml");
        assert!(text.contains("if (subject.user !== \"verbd\") {"), "{text}");
        assert!(
            text.contains(r#"["nginx.service", ["reload", "restart"]],"#),
            "{text}"
        );
        assert!(text.contains(MANAGE_UNITS));
        assert!(!text.contains(RELOAD_DAEMON));
        assert!(text.trim_end().ends_with("});"));
        let odd = rule(&Grants::default(), "a\"b\u{2028}", "x\ny");
        assert!(odd.contains(r#""a\"b\u2028""#), "{odd}");
        assert!(odd.lines().all(|l| !l.starts_with('y')), "{odd}");
    }
}
