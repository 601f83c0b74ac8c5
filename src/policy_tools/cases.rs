//! `verbd policy test`: expected verdicts for given calls and callers, checked against the
//! daemon's own evaluation ([`Policy::evaluate`]), for CI.
//!
//! A tests file is TOML:
//!
//! ```toml
//! [caller]                 # default caller of every case (a role, or uid/user/groups)
//! role = "agent"
//!
//! [[case]]
//! name = "agent reads nginx's journal"
//! verb = "journal-unit"
//! args = { unit = "nginx.service", lines = 50 }
//! expect = "run"           # run | propose | refuse
//! argv = ["/usr/bin/journalctl", "…"]   # optional: the exact argv (secrets as placeholders)
//!
//! [[case]]
//! name = "an option is not a unit"
//! verb = "journal-unit"
//! args = { unit = "--since=today" }
//! expect = "refuse"
//! rule = "systemd-unit"    # required for refuse: the rule that must refuse it
//!
//! [[case]]
//! name = "a recorded command is covered"
//! command = "sudo journalctl -u nginx -n 50 | grep -i error"
//! expect = "run"           # run | propose | uncovered
//! verb = "journal-unit"    # optional: the verb that must cover it
//! ```
//!
//! Refusal rules: a parameter rule (`enum`, `pattern`, `range`, `systemd-unit`,
//! `option-injection`, an SQL rule…), or `not-available`, `unknown-param`, `missing`,
//! `headless`, `denied`. A `refuse` case without a rule is itself an error: a test that any
//! refusal satisfies cannot tell one reason from another.
#![forbid(unsafe_code)]

use super::coverage::{self, Status};
use super::sources::{Entry, Format, Recorded};
use crate::policy::{Caller, OfflineVerdict, Policy, Refusal, Role, text_args};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerSpec {
    pub role: Option<String>,
    pub uid: Option<u32>,
    pub user: Option<String>,
    #[serde(default)]
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    Run,
    Propose,
    Refuse,
    Uncovered,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    pub verb: Option<String>,
    #[serde(default)]
    pub args: BTreeMap<String, toml::Value>,
    pub command: Option<String>,
    pub caller: Option<CallerSpec>,
    pub expect: Expect,
    pub rule: Option<String>,
    pub argv: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    #[serde(default)]
    pub caller: CallerSpec,
    #[serde(default, rename = "case")]
    pub cases: Vec<Case>,
}

/// A tests file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CasesError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("case {case:?}: {message}")]
    Case { case: String, message: String },
}

pub fn load(path: &Path) -> Result<Suite, CasesError> {
    let fail = |message: String| CasesError::File {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let suite: Suite = toml::from_str(&text).map_err(|e| fail(e.to_string()))?;
    if suite.cases.is_empty() {
        return Err(fail("no [[case]] in the file".into()));
    }
    Ok(suite)
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub passed: bool,
    pub expected: String,
    pub got: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub passed: usize,
    pub failed: usize,
    pub cases: Vec<CaseResult>,
}

impl Results {
    pub fn passed(&self) -> bool {
        self.failed == 0
    }

    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for c in &self.cases {
            if c.passed {
                out.push_str(&format!("ok    {}\n", c.name));
            } else {
                out.push_str(&format!(
                    "FAIL  {}\n      expected {}\n      got      {}\n",
                    c.name, c.expected, c.got
                ));
            }
        }
        out.push_str(&format!("{} passed, {} failed\n", self.passed, self.failed));
        out
    }

    pub fn render_junit(&self, suite: &str) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        out.push_str(&format!(
            "<testsuites tests=\"{}\" failures=\"{}\">\n  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\">\n",
            self.cases.len(),
            self.failed,
            xml(suite),
            self.cases.len(),
            self.failed
        ));
        for c in &self.cases {
            if c.passed {
                out.push_str(&format!(
                    "    <testcase classname=\"verbd.policy\" name=\"{}\"/>\n",
                    xml(&c.name)
                ));
            } else {
                out.push_str(&format!(
                    "    <testcase classname=\"verbd.policy\" name=\"{}\">\n      <failure message=\"expected {}, got {}\"/>\n    </testcase>\n",
                    xml(&c.name),
                    xml(&c.expected),
                    xml(&c.got)
                ));
            }
        }
        out.push_str("  </testsuite>\n</testsuites>\n");
        out
    }
}

fn xml(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || *c == '\t')
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&apos;".to_string(),
            other => other.to_string(),
        })
        .collect()
}

/// The rule name of a refusal, as cases name it.
pub fn rule_of(refusal: &Refusal) -> String {
    match refusal {
        Refusal::NotAvailable { .. } => "not-available".into(),
        Refusal::UnknownParam { .. } => "unknown-param".into(),
        Refusal::Missing { .. } => "missing".into(),
        Refusal::Invalid(r) => r.rule.to_string(),
        Refusal::Headless { .. } => "headless".into(),
        Refusal::Denied { .. } => "denied".into(),
    }
}

fn roles_for<'a>(
    policy: &'a Policy,
    spec: &CallerSpec,
    case: &str,
) -> Result<Vec<&'a Role>, CasesError> {
    let fail = |message: String| CasesError::Case {
        case: case.to_string(),
        message,
    };
    if let Some(role) = &spec.role {
        let r = policy
            .roles
            .get(role)
            .ok_or_else(|| fail(format!("role `{role}` is not defined in the policy")))?;
        return Ok(vec![r]);
    }
    if spec.uid.is_none() && spec.user.is_none() && spec.groups.is_empty() {
        return Err(fail(
            "no caller: give caller = { role = … } or uid/user/groups".into(),
        ));
    }
    let invoker = nix::unistd::geteuid().as_raw();
    let uid = spec.uid.unwrap_or(u32::MAX - 1);
    let caller = Caller {
        uid,
        gid: uid,
        pid: 0,
        user: spec.user.clone(),
        groups: spec.groups.clone(),
    };
    Ok(policy.roles_of(&caller, invoker))
}

fn value_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Run every case.
pub fn run(policy: &Policy, suite: &Suite) -> Result<Results, CasesError> {
    let mut cases = Vec::new();
    for case in &suite.cases {
        let spec = case.caller.as_ref().unwrap_or(&suite.caller);
        let roles = roles_for(policy, spec, &case.name)?;
        let fail = |message: &str| CasesError::Case {
            case: case.name.clone(),
            message: message.to_string(),
        };
        let (expected, got) = match (&case.command, &case.verb) {
            (Some(command), verb) => {
                if case.expect == Expect::Refuse || case.rule.is_some() || case.argv.is_some() {
                    return Err(fail(
                        "a command case expects run, propose or uncovered (no rule, no argv)",
                    ));
                }
                command_case(policy, &roles, case, command, verb.as_deref())
            }
            (None, Some(verb)) => {
                if case.expect == Expect::Uncovered {
                    return Err(fail("`uncovered` is for command cases"));
                }
                if case.expect == Expect::Refuse && case.rule.is_none() {
                    return Err(fail("a refuse case must name the rule that refuses it"));
                }
                let mut args = BTreeMap::new();
                for (k, v) in &case.args {
                    let text = value_text(v)
                        .ok_or_else(|| fail(&format!("args.{k}: a string, integer or bool")))?;
                    args.insert(k.clone(), text);
                }
                call_case(policy, &roles, case, verb, &args)
            }
            (None, None) => return Err(fail("give `verb` (with args) or `command`")),
        };
        cases.push(CaseResult {
            name: case.name.clone(),
            passed: expected == got,
            expected,
            got,
        });
    }
    let passed = cases.iter().filter(|c| c.passed).count();
    Ok(Results {
        failed: cases.len() - passed,
        passed,
        cases,
    })
}

fn call_case(
    policy: &Policy,
    roles: &[&Role],
    case: &Case,
    verb: &str,
    args: &BTreeMap<String, String>,
) -> (String, String) {
    let argv_suffix = |argv: &[String]| format!(" {argv:?}");
    let expected = match case.expect {
        Expect::Run => "run".to_string(),
        Expect::Propose => "propose".to_string(),
        _ => format!("refuse({})", case.rule.as_deref().unwrap_or_default()),
    } + &case.argv.as_deref().map(argv_suffix).unwrap_or_default();
    let with_argv = |kind: &str, display_argv: &[String]| {
        if case.argv.is_some() {
            format!("{kind}{}", argv_suffix(display_argv))
        } else {
            kind.to_string()
        }
    };
    let got = match policy.evaluate_offline(roles, verb, &text_args(args)) {
        OfflineVerdict::Run { display_argv } => with_argv("run", &display_argv),
        OfflineVerdict::Propose { display_argv } => with_argv("propose", &display_argv),
        OfflineVerdict::Refuse(refusal) => format!("refuse({})", rule_of(&refusal)),
    };
    (expected, got)
}

fn command_case(
    policy: &Policy,
    roles: &[&Role],
    case: &Case,
    command: &str,
    verb: Option<&str>,
) -> (String, String) {
    let expect = match case.expect {
        Expect::Run => "run",
        Expect::Propose => "propose",
        _ => "uncovered",
    };
    let expected = match verb {
        Some(v) if case.expect != Expect::Uncovered => format!("{expect} via {v}"),
        _ => expect.to_string(),
    };
    let entry = Entry {
        source: case.name.clone(),
        format: Format::Plain,
        command: Recorded::Shell(command.to_string()),
    };
    let mut ignored = 0;
    let reports = coverage::analyze_entry(policy, roles, &entry, &mut ignored);
    let got: Vec<String> = reports
        .iter()
        .map(|r| match (r.status, r.needs_approval) {
            (Status::Uncovered, _) => {
                format!("uncovered ({})", r.reason.as_deref().unwrap_or_default())
            }
            (Status::Covered, approval) => {
                let kind = if approval { "propose" } else { "run" };
                match verb {
                    Some(_) => format!("{kind} via {}", r.verb.as_deref().unwrap_or_default()),
                    None => kind.to_string(),
                }
            }
        })
        .collect();
    let got = match got.as_slice() {
        [one] if one.starts_with("uncovered") && case.expect == Expect::Uncovered => {
            "uncovered".into()
        }
        [one] => one.clone(),
        [] => "no command (only shell builtins)".into(),
        many => many.join(" + "),
    };
    (expected, got)
}
