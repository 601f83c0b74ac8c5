//! Transparent verbs: map one shell command an agent is about to run onto the verb that stands
//! for it, the way `policy coverage` reads recorded commands.
//!
//! The daemon answers `command` requests with this (`verbd hook claude-code` on Bash, `verbd
//! sh`). Three outcomes:
//! - the whole command is one verb call (after `cd DIR &&`, `sudo [-u X]`, `env VAR=…` and the
//!   other wrappers coverage peels), possibly followed by pure client-side filters: [`Mapping::Verb`];
//! - it needs a privilege the caller does not have (`sudo` and its kind, a program or a path the
//!   policy's `[commands]` names) and is not such a call: [`Mapping::Refuse`], whose reason names
//!   the closest verb and the element that differs;
//! - anything else is the agent's own unprivileged work: [`Mapping::Unprivileged`], no decision
//!   (with why it is no verb call, for `verbd sh`, which runs nothing else).
//!
//! Invariants: nothing is run or expanded here; a command is a verb call only when coverage
//! finds it covered for the caller's roles (the policy's own matcher and validators), and only
//! when nothing else in the command would be lost by running just that call: other list items
//! than `cd DIR`, backgrounding, redirections to files and impure downstream stages all keep it
//! from being one. Text that cannot be read as shell is refused if it mentions `sudo` or its
//! kind as a word, and otherwise left alone.
#![forbid(unsafe_code)]

use super::coverage::{self, Status};
use super::shell::{self, Connector, Pipeline, Stage};
use super::sources::{Entry, Format, Recorded};
use crate::policy::{Policy, Role};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Programs that run another program with privileges the agent does not have.
const ELEVATORS: &[&str] = &["sudo", "doas", "su", "pkexec", "run0", "runuser", "setpriv"];

/// The verb call that stands for a whole command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedCall {
    pub verb: String,
    pub args: BTreeMap<String, String>,
    /// The pure text filters after the verb (`grep -i error | tail -n 5`), verbatim.
    pub client_side: Option<String>,
    pub needs_approval: bool,
}

/// What the daemon makes of a shell command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping {
    Verb(MappedCall),
    Refuse {
        reason: String,
    },
    /// The agent's own work; `why` it is no verb call.
    Unprivileged {
        why: String,
    },
}

/// Map `command` (run in `cwd`, when known) for a caller with `roles`.
pub fn map_command(policy: &Policy, roles: &[&Role], command: &str, cwd: Option<&str>) -> Mapping {
    let pipelines = match shell::parse(command) {
        Ok(p) => p,
        Err(e) => {
            return match mentioned_elevator(command) {
                Some(elevator) => Mapping::Refuse {
                    reason: format!(
                        "it runs `{elevator}`, and verbd cannot read it as a shell command ({e}); write it as one simple command (`program args… | filter`) so it can map to a verb"
                    ),
                },
                None => Mapping::Unprivileged {
                    why: format!("it cannot be read as a shell command ({e})"),
                },
            };
        }
    };
    let entry = Entry {
        source: "command".into(),
        format: Format::Plain,
        command: Recorded::Shell(command.to_string()),
    };
    let mut ignored = 0;
    let reports = coverage::analyze_entry(policy, roles, &entry, &mut ignored);
    if let [report] = reports.as_slice()
        && report.status == Status::Covered
        && is_one_call(&pipelines)
        && let Some(verb) = &report.verb
    {
        return Mapping::Verb(MappedCall {
            verb: verb.clone(),
            args: report.args.clone(),
            client_side: report.client_side.clone(),
            needs_approval: report.needs_approval,
        });
    }
    let privileged = privileges_used(policy, &pipelines, cwd);
    let mut why: Vec<String> = reports
        .iter()
        .map(|r| match (&r.verb, &r.reason) {
            (Some(verb), _) => format!(
                "`{}` is verb `{verb}`: run it as a command of its own",
                r.command
            ),
            (None, Some(reason)) => format!("`{}`: {reason}", r.command),
            (None, None) => format!("`{}` maps to no verb", r.command),
        })
        .collect();
    if why.is_empty() {
        why.push("it maps to no verb".into());
    }
    if privileged.is_empty() {
        return Mapping::Unprivileged {
            why: why.join("; "),
        };
    }
    Mapping::Refuse {
        reason: format!(
            "it needs {} and maps to no verb you may call; {}. `verbd list` shows your verbs",
            privileged.join(", "),
            why.join("; ")
        ),
    }
}

/// One pipeline, after nothing but `cd DIR &&` / `cd DIR;` items, not in the background.
fn is_one_call(pipelines: &[Pipeline]) -> bool {
    let Some((last, before)) = pipelines.split_last() else {
        return false;
    };
    let is_cd = |p: &Pipeline| matches!(p.stages.as_slice(), [stage] if stage.words.first().is_some_and(|w| w.text == "cd") && stage.words.len() <= 2 && stage.redirects.is_empty());
    let follows_plainly = |p: &Pipeline| {
        matches!(
            p.after,
            None | Some(Connector::And) | Some(Connector::Sequence)
        )
    };
    before.iter().all(|p| is_cd(p) && follows_plainly(p))
        && follows_plainly(last)
        && !last.stages.is_empty()
}

/// The privileges the command uses that the caller does not have, described for the model.
fn privileges_used(policy: &Policy, pipelines: &[Pipeline], cwd: Option<&str>) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut push = |what: String| {
        if !found.contains(&what) {
            found.push(what);
        }
    };
    let mut dir = cwd.filter(|c| c.starts_with('/')).map(PathBuf::from);
    for pipeline in pipelines {
        for stage in &pipeline.stages {
            if let Some(target) = cd_target(stage) {
                dir = Some(match &dir {
                    Some(d) => d.join(target),
                    None => PathBuf::from(target),
                })
                .filter(|d| d.is_absolute());
            }
            let peeled = coverage::peel(stage);
            if let Some(elevator) = peeled.elevated_by {
                push(format!("`{elevator}`"));
            }
            if let Some(program) = peeled.argv.first() {
                let name = program.rsplit('/').next().unwrap_or(program);
                if ELEVATORS.contains(&name) {
                    push(format!("`{name}`"));
                }
                if policy
                    .commands
                    .privileged_programs
                    .iter()
                    .any(|p| p == name)
                {
                    push(format!("`{name}` (a program reached through verbs)"));
                }
            }
            let words = stage
                .words
                .iter()
                .chain(stage.redirects.iter().map(|r| &r.target))
                .map(|w| w.text.as_str());
            for word in words {
                if let Some(root) = privileged_path(policy, word, dir.as_deref()) {
                    push(format!("{} (beneath {})", word, root.display()));
                }
            }
        }
    }
    found
}

fn cd_target(stage: &Stage) -> Option<&str> {
    match stage.words.as_slice() {
        [cd, dir] if cd.text == "cd" => Some(dir.text.as_str()),
        _ => None,
    }
}

/// The privileged path `word` names (itself, an `--opt=PATH` value, or relative to `cwd`).
fn privileged_path<'p>(policy: &'p Policy, word: &str, cwd: Option<&Path>) -> Option<&'p Path> {
    if policy.commands.privileged_paths.is_empty() {
        return None;
    }
    let value = word.rsplit_once('=').map_or(word, |(_, v)| v);
    let path = if value.starts_with('/') {
        PathBuf::from(value)
    } else if value.starts_with('-') || value.is_empty() {
        return None;
    } else {
        cwd?.join(value)
    };
    let path = normalize(&path);
    policy
        .commands
        .privileged_paths
        .iter()
        .find(|root| path.starts_with(root))
        .map(PathBuf::as_path)
}

/// `..` and `.` applied lexically (the words are never resolved on this host).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// An elevating program named as a word of text that is not readable shell.
fn mentioned_elevator(text: &str) -> Option<&'static str> {
    text.split(|c: char| c.is_whitespace() || ";|&()`$\"'{}<>".contains(c))
        .filter_map(|word| {
            let name = word.rsplit('/').next().unwrap_or(word);
            ELEVATORS.iter().find(|e| **e == name).copied()
        })
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
version = 1
[roles.agent]
users = ["@invoker"]
commands = "rewrite"

[commands]
privileged_programs = ["psql"]
privileged_paths = ["/var/log"]

[verb.journal]
description = "Recent journal lines of a unit"
category = "read-only"
roles = ["agent"]
command = "/usr/bin/journalctl --no-pager -u {unit} [ -n {lines} ]"
params.unit = { type = "enum", values = ["nginx.service"] }
params.lines = { type = "int", min = 1, max = 1000, default = 100 }
"#;

    fn policy() -> Policy {
        crate::policy::compile(POLICY, "<test>").unwrap()
    }

    fn map(command: &str) -> Mapping {
        let policy = policy();
        let roles: Vec<&Role> = policy.roles.values().collect();
        map_command(&policy, &roles, command, Some("/home/agent"))
    }

    #[test]
    fn a_covered_command_with_filters_is_one_verb_call() {
        let Mapping::Verb(call) =
            map("cd /srv && sudo journalctl -u nginx.service -n 50 --no-pager | grep -i error")
        else {
            panic!("not mapped");
        };
        assert_eq!(call.verb, "journal");
        assert_eq!(call.args["unit"], "nginx.service");
        assert_eq!(call.args["lines"], "50");
        assert_eq!(call.client_side.as_deref(), Some("grep -i error"));
    }

    #[test]
    fn privileged_commands_without_a_verb_are_refused_with_the_closest_verb() {
        let Mapping::Refuse { reason } = map("sudo journalctl -u sshd.service -n 5 --no-pager")
        else {
            panic!("not refused");
        };
        assert!(reason.contains("`sudo`"), "{reason}");
        assert!(reason.contains("closest verb `journal`"), "{reason}");
        for refused in [
            "sudo rm -rf /var/lib/x",
            "psql -h db -c 'select 1'",
            "cat /var/log/../log/syslog",
            "cd /var/log && tail syslog",
            "echo hi; sudo journalctl -u nginx.service -n 50 --no-pager",
            "sudo journalctl -u nginx.service -n 50 --no-pager > /tmp/out",
            "ls | sudo tee /etc/x",
            "pkexec id",
            "sudo $(echo rm) -rf /",
            "sudo 'unterminated",
        ] {
            assert!(
                matches!(map(refused), Mapping::Refuse { .. }),
                "{refused}: {:?}",
                map(refused)
            );
        }
    }

    #[test]
    fn the_agents_own_work_gets_no_decision() {
        for own in [
            "ls -la",
            "cargo test --lib",
            "grep -rn sudo src/",
            "cat README.md | head",
            "echo 'unterminated",
            "journalctl --user -n 5",
        ] {
            assert!(
                matches!(map(own), Mapping::Unprivileged { .. }),
                "{own}: {:?}",
                map(own)
            );
        }
    }
}
