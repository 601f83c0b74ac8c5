//! `verbd policy coverage`: replay recorded agent commands against a policy.
//!
//! Each recorded command is read the way a shell would read it ([`super::shell`]), never run.
//! Lists (`;`, `&&`, `||`, newlines) are split into separate commands; a leading `cd DIR` and
//! shell builtins (`echo`, `true`…) are not commands a verb stands for and are counted as
//! ignored. In each pipeline the first stage is the command that needs the privilege: `sudo
//! [-u X]`, `env VAR=…`, `VAR=… cmd`, `timeout`, `nice`, `stdbuf` and `command` wrappers are
//! peeled off it; the downstream stages must be pure text filters ([`super::filters`]) and are
//! reported as client-side filtering. Substitutions, variables, globs, redirections to files,
//! here-documents, `sh -c`, interpreters, `xargs`, `find -exec` and shell constructs make a
//! command uncovered with that reason — never guessed through.
//!
//! Matching is [`super::matcher`] followed by [`Policy::evaluate`] with the caller's roles: a
//! command is covered only when the daemon itself would run or propose that call. Commands are
//! shown with credentials redacted (assignments such as `PGPASSWORD=…`, `--password=…`, URL
//! passwords, and the built-in token formats of the output scrubber).
#![forbid(unsafe_code)]

use super::danger::{self, Effect};
use super::filters;
use super::matcher::{self, Candidate};
use super::shell::{self, Construct, Pipeline, Stage};
use super::sources::{Collected, Entry, Recorded};
use crate::policy::{OfflineVerdict, Policy, Refusal, Role, VerbAction, text_args};
use crate::terminal::escape as escape_for_terminal;
use serde::Serialize;
use std::collections::BTreeMap;

/// The stable JSON report (`--format json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub summary: Summary,
    pub commands: Vec<CommandReport>,
    /// Lines and files that could not be read.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub commands: usize,
    pub covered: usize,
    pub needs_approval: usize,
    pub uncovered: usize,
    /// Shell builtins and `cd` segments, which no verb stands for.
    pub ignored: usize,
    /// Covered commands that look destructive or credential-reading and would run at once.
    pub dangerous_without_approval: usize,
    /// Uncovered commands a pack covers (set when packs were looked up: `policy coverage`).
    pub uncovered_in_packs: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Covered,
    Uncovered,
}

#[derive(Debug, Clone, Serialize)]
pub struct CommandReport {
    pub command: String,
    pub status: Status,
    pub verb: Option<String>,
    pub args: BTreeMap<String, String>,
    /// The verb's category when covered; `null` when not.
    pub category: Option<String>,
    pub needs_approval: bool,
    pub client_side: Option<String>,
    pub reason: Option<String>,
    /// `file:line` of the recorded command.
    pub source: String,
    /// The program that needed a verb (after peeling `sudo`, `env`…), when there is one.
    pub program: Option<String>,
    /// What the command looks like it does, judged from its argv alone.
    pub effect: Effect,
    /// What the verb adds or changes compared with the recorded command.
    pub notes: Vec<String>,
    /// The peeled argv, when the command was clean enough to be matched against verbs.
    #[serde(skip)]
    pub matched_argv: Option<Vec<String>>,
    /// For an uncovered command: the pack that covers it ([`super::packs`]), when one does.
    pub pack: Option<PackHint>,
}

/// The pack that covers an uncovered command, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackHint {
    /// The pack's file name without `.toml` (`redis`).
    pub pack: String,
    pub path: String,
    pub verb: String,
    pub args: BTreeMap<String, String>,
    /// The parameters among `args` that hold site values (hosts, names, units, strings), the
    /// ones an include narrows with `values`.
    pub site_params: Vec<String>,
    pub needs_approval: bool,
    /// The policy already includes this pack, narrowed (`verbs`, `values`) so the command
    /// falls outside it.
    pub included: bool,
}

impl CommandReport {
    /// Covered, would run without approval, and looks destructive or credential-reading.
    pub fn dangerous_without_approval(&self) -> bool {
        self.status == Status::Covered && !self.needs_approval && self.effect.is_dangerous()
    }
}

/// Replay `collected` against `policy` as a caller with `roles`.
pub fn run(policy: &Policy, roles: &[&Role], collected: &Collected) -> Report {
    let redactor = Redactor::new(policy);
    let mut report = Report {
        summary: Summary::default(),
        commands: Vec::new(),
        problems: collected.problems.clone(),
    };
    for entry in &collected.entries {
        for mut command in analyze_entry(policy, roles, entry, &mut report.summary.ignored) {
            command.command = redactor.redact(&command.command);
            command.client_side = command.client_side.map(|c| redactor.redact(&c));
            command.reason = command.reason.map(|c| redactor.redact(&c));
            report.commands.push(command);
        }
    }
    let s = &mut report.summary;
    s.commands = report.commands.len();
    s.covered = report
        .commands
        .iter()
        .filter(|c| c.status == Status::Covered)
        .count();
    s.uncovered = s.commands - s.covered;
    s.needs_approval = report
        .commands
        .iter()
        .filter(|c| c.status == Status::Covered && c.needs_approval)
        .count();
    s.dangerous_without_approval = report
        .commands
        .iter()
        .filter(|c| c.dangerous_without_approval())
        .count();
    report
}

/// Shell builtins that need no verb.
const LOCAL_BUILTINS: &[&str] = &[
    "cd", "echo", "printf", "true", "false", ":", "sleep", "pwd", "export", "unset", "set", "exit",
    "wait", "clear", "source", ".", "alias", "shopt", "read", "local", "return",
];

fn uncovered(entry: &Entry, text: &str, reason: String) -> CommandReport {
    CommandReport {
        command: text.to_string(),
        status: Status::Uncovered,
        verb: None,
        args: BTreeMap::new(),
        category: None,
        needs_approval: false,
        client_side: None,
        reason: Some(reason),
        source: entry.source.clone(),
        program: None,
        effect: Effect::Unknown,
        notes: Vec::new(),
        matched_argv: None,
        pack: None,
    }
}

/// Split one recorded command into the commands a verb would stand for, and judge each.
pub fn analyze_entry(
    policy: &Policy,
    roles: &[&Role],
    entry: &Entry,
    ignored: &mut usize,
) -> Vec<CommandReport> {
    let (text, pipelines) = match &entry.command {
        Recorded::Shell(text) => match shell::parse(text) {
            Ok(p) => (text.clone(), p),
            Err(e) => {
                return vec![uncovered(
                    entry,
                    text,
                    format!("cannot be read as a shell command: {e}"),
                )];
            }
        },
        Recorded::Argv(argv) => {
            let text = shell_words::join(argv);
            let words = argv
                .iter()
                .map(|w| shell::Word {
                    text: w.clone(),
                    hazards: Vec::new(),
                    quoted: true,
                    unquoted_prefix: 0,
                    span: 0..text.len(),
                })
                .collect();
            let pipeline = Pipeline {
                after: None,
                stages: vec![Stage {
                    words,
                    span: 0..text.len(),
                    ..Stage::default()
                }],
                span: 0..text.len(),
            };
            (text, vec![pipeline])
        }
    };
    // A loop, conditional, subshell or group is one shell program: report it whole, never its
    // pieces.
    let compound = pipelines
        .iter()
        .flat_map(|p| &p.stages)
        .flat_map(|s| &s.constructs)
        .map(Construct::describe)
        .next();
    if let Some(what) = compound {
        return vec![uncovered(
            entry,
            text.trim(),
            format!("{what}: a shell program, not one command"),
        )];
    }
    let mut out = Vec::new();
    let mut cwd: Option<String> = None;
    for pipeline in &pipelines {
        // `cd DIR` (with a literal absolute DIR) sets where the next commands run.
        if let [stage] = pipeline.stages.as_slice()
            && let [cd, dir] = stage.words.as_slice()
            && cd.text == "cd"
            && dir.hazards.is_empty()
            && dir.text.starts_with('/')
        {
            cwd = Some(dir.text.clone());
        }
        let segment = text
            .get(pipeline.span.clone())
            .filter(|_| matches!(entry.command, Recorded::Shell(_)))
            .unwrap_or(&text)
            .trim()
            .to_string();
        if let Some(report) = analyze_pipeline(
            policy,
            roles,
            entry,
            &segment,
            &text,
            pipeline,
            cwd.as_deref(),
        ) {
            out.push(report);
        } else {
            *ignored += 1;
        }
    }
    out
}

/// What peeling wrappers off a stage found.
pub(crate) struct Peeled {
    pub(crate) argv: Vec<String>,
    /// What cannot be known offline: substitutions, variables, globs, redirections, constructs.
    pub(crate) hazards: Vec<String>,
    /// The program hands a string or its input to another program (`sh -c`, `xargs`, `-exec`).
    pub(crate) wrapper: Option<String>,
    run_as: Option<String>,
    /// `sudo` or `doas` when the stage ran through one (the privilege the agent asked for).
    pub(crate) elevated_by: Option<&'static str>,
}

/// Peel `sudo`, `env`, assignments and exec wrappers; collect what cannot be known offline.
pub(crate) fn peel(stage: &Stage) -> Peeled {
    let mut hazards: Vec<String> = Vec::new();
    for construct in &stage.constructs {
        hazards.push(construct.describe());
    }
    for (name, value) in &stage.assignments {
        for h in &value.hazards {
            hazards.push(format!("{} in {name}=", h.describe()));
        }
    }
    for redirect in &stage.redirects {
        if !redirect.is_harmless() {
            hazards.push(redirect.describe());
        }
    }
    // Variables that make the next program run a command they name (`LESSOPEN='|cmd %s' less`,
    // `GIT_SSH_COMMAND=…`, `LD_PRELOAD=…`): what runs is the variable's, not the argv's.
    let mut command_variable = stage
        .assignments
        .iter()
        .find(|(name, value)| names_a_command(name, &value.text))
        .map(|(name, _)| name.clone());
    let mut run_as = None;
    let mut elevated_by = None;
    let mut i = 0;
    let words = &stage.words;
    while let Some(word) = words.get(i) {
        let name = word.text.rsplit('/').next().unwrap_or(&word.text);
        match name {
            "sudo" | "doas" => {
                elevated_by = Some(if name == "sudo" { "sudo" } else { "doas" });
                i += 1;
                while let Some(w) = words.get(i) {
                    let t = w.text.as_str();
                    match t {
                        "-u" | "--user" | "-g" | "--group" | "-C" | "-h" | "--host" | "-p"
                        | "--prompt" | "-D" | "--chdir" | "-r" | "-t" | "-U" | "-T" => {
                            if matches!(t, "-u" | "--user") {
                                run_as = words.get(i + 1).map(|w| w.text.clone());
                            }
                            i += 2;
                        }
                        "-i" | "--login" | "-s" | "--shell" | "-e" | "--edit" | "-l" | "--list"
                        | "-v" | "-k" | "-K" => {
                            hazards.push(format!(
                                "`sudo {t}` opens a shell, an editor or manages sudo itself"
                            ));
                            i += 1;
                        }
                        "--" => {
                            i += 1;
                            break;
                        }
                        _ if t.starts_with("--user=") => {
                            run_as = Some(t["--user=".len()..].to_string());
                            i += 1;
                        }
                        _ if t.starts_with("-u") && t.len() > 2 => {
                            run_as = Some(t[2..].to_string());
                            i += 1;
                        }
                        _ if t.starts_with('-') => i += 1,
                        _ => break,
                    }
                }
            }
            "env" if words.len() > i + 1 => {
                i += 1;
                while let Some(w) = words.get(i) {
                    let t = w.text.as_str();
                    if matches!(
                        t,
                        "-u" | "--unset" | "-C" | "--chdir" | "-S" | "--split-string"
                    ) {
                        if matches!(t, "-S" | "--split-string") {
                            hazards.push("`env -S` splits a string into a command".into());
                        }
                        i += 2;
                    } else if t.starts_with('-') || (t.contains('=') && !t.starts_with('=')) {
                        if let Some((name, value)) = t.split_once('=')
                            && names_a_command(name, value)
                        {
                            command_variable.get_or_insert_with(|| name.to_string());
                        }
                        i += 1;
                    } else {
                        break;
                    }
                }
            }
            "timeout" => {
                i += 1;
                while let Some(w) = words.get(i) {
                    let t = w.text.as_str();
                    if matches!(t, "-s" | "--signal" | "-k" | "--kill-after") {
                        i += 2;
                    } else if t.starts_with('-') {
                        i += 1;
                    } else {
                        i += 1; // the duration
                        break;
                    }
                }
            }
            "nice" | "ionice" | "stdbuf" | "command" | "exec" | "nohup" | "time" => {
                i += 1;
                while let Some(w) = words.get(i) {
                    let t = w.text.as_str();
                    if matches!(
                        t,
                        "-n" | "-c" | "-p" | "--adjustment" | "--class" | "--classdata"
                    ) {
                        i += 2;
                    } else if t.starts_with('-') {
                        i += 1;
                    } else {
                        break;
                    }
                }
            }
            _ => break,
        }
    }
    let mut argv = Vec::new();
    for word in &words[i.min(words.len())..] {
        for h in &word.hazards {
            let what = h.describe();
            if !hazards.contains(&what) {
                hazards.push(what);
            }
        }
        argv.push(word.text.clone());
    }
    // Wrappers and shapes that hand a string or stdin to another program.
    let mut wrapper = None;
    if let Some(program) = argv.first() {
        let name = program.rsplit('/').next().unwrap_or(program);
        let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        if crate::policy::compile::interpreter_name(std::path::Path::new(program)).is_some()
            || matches!(
                stem,
                "python" | "perl" | "ruby" | "node" | "php" | "watch" | "parallel"
            )
        {
            let how = if argv
                .iter()
                .skip(1)
                .any(|a| a == "-c" || a == "-lc" || a == "-e")
            {
                format!("`{name} -c`: a command string run by a shell or interpreter")
            } else if name == "xargs" {
                "`xargs`: builds commands from its input".to_string()
            } else if name == "watch" {
                "`watch`: runs its argument through `sh -c`".to_string()
            } else {
                format!("`{name}`: a shell, interpreter or exec wrapper")
            };
            wrapper = Some(how);
        }
        if argv
            .iter()
            .any(|a| matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
        {
            wrapper = Some("`-exec`: runs a command per file found".into());
        }
    }
    if let Some(name) = command_variable {
        wrapper = Some(format!(
            "`{name}=`: the variable names a command the program runs"
        ));
    }
    Peeled {
        argv,
        hazards,
        wrapper,
        run_as,
        elevated_by,
    }
}

/// Whether `name=value` names a command (or code) the program runs: an empty value or `cat`
/// (`SYSTEMD_PAGER=`, `PAGER=cat`: no pager) runs nothing new.
fn names_a_command(name: &str, value: &str) -> bool {
    !matches!(value, "" | "cat" | "/bin/cat" | "/usr/bin/cat") && names_a_command_variable(name)
}

fn names_a_command_variable(name: &str) -> bool {
    matches!(
        name,
        "LESSOPEN"
            | "LESSCLOSE"
            | "LESSEDIT"
            | "LESSKEY"
            | "PAGER"
            | "MANPAGER"
            | "SYSTEMD_PAGER"
            | "EDITOR"
            | "VISUAL"
            | "SYSTEMD_EDITOR"
            | "GIT_SSH"
            | "GIT_SSH_COMMAND"
            | "GIT_PAGER"
            | "GIT_EDITOR"
            | "GIT_EXTERNAL_DIFF"
            | "GIT_PROXY_COMMAND"
            | "GIT_ASKPASS"
            | "SSH_ASKPASS"
            | "RSYNC_RSH"
            | "TAR_OPTIONS"
            | "BASH_ENV"
            | "ENV"
            | "PROMPT_COMMAND"
            | "LD_PRELOAD"
            | "LD_LIBRARY_PATH"
            | "LD_AUDIT"
            | "PYTHONSTARTUP"
            | "PERL5OPT"
            | "NODE_OPTIONS"
    ) || name.starts_with("GIT_CONFIG")
}

fn analyze_pipeline(
    policy: &Policy,
    roles: &[&Role],
    entry: &Entry,
    segment: &str,
    full_text: &str,
    pipeline: &Pipeline,
    cwd: Option<&str>,
) -> Option<CommandReport> {
    let mut stages: Vec<Peeled> = pipeline.stages.iter().map(peel).collect();
    let is_local = |p: &Peeled, stage: &Stage| {
        stage.words.is_empty()
            && stage.constructs.is_empty()
            && stage.redirects.iter().all(|r| r.is_harmless())
            || p.argv
                .first()
                .is_some_and(|w| LOCAL_BUILTINS.contains(&w.as_str()))
                && p.hazards.is_empty()
    };
    // The privileged stage: the first one that is not a local builtin.
    let head = stages
        .iter()
        .zip(&pipeline.stages)
        .position(|(p, s)| !is_local(p, s));
    let head = head?;
    let mut notes = Vec::new();
    // `cd DIR && git …` is `git -C DIR …`: the one program whose working directory is an option
    // with exactly that meaning.
    if let Some(dir) = cwd
        && stages[head]
            .argv
            .first()
            .is_some_and(|p| p == "git" || p.ends_with("/git"))
        && !stages[head].argv.iter().any(|a| a == "-C")
    {
        stages[head]
            .argv
            .splice(1..1, ["-C".to_string(), dir.to_string()]);
        notes.push(format!("ran in {dir} (cd): read as git -C {dir}"));
    }
    let stage = &stages[head];
    let mut report = uncovered(entry, segment, String::new());
    report.notes = notes;
    report.program = stage.argv.first().cloned();
    report.effect = danger::classify(&stage.argv).0;
    if let Some(user) = &stage.run_as
        && user != "root"
    {
        report
            .notes
            .push(format!("the agent ran it as `{user}` (sudo -u)"));
    }
    let mut problems: Vec<String> = stage.hazards.clone();
    problems.extend(stage.wrapper.clone());
    if head > 0 {
        let producer = text_of(full_text, &pipeline.stages[head - 1]);
        problems.push(format!(
            "reads its input from `{producer}`; a verb has no stdin"
        ));
    }
    if pipeline.stages[head]
        .constructs
        .iter()
        .any(|c| matches!(c, Construct::Compound(_)))
        && stage.argv.is_empty()
    {
        problems.push("a shell construct".into());
    }
    let mut client_side = Vec::new();
    for (index, downstream) in pipeline.stages.iter().enumerate().skip(head + 1) {
        let peeled = &stages[index];
        let text = text_of(full_text, downstream);
        let dangerous_hazard = downstream.words.iter().flat_map(|w| &w.hazards).next();
        let verdict = if let Some(h) = dangerous_hazard {
            Err(h.describe())
        } else if !peeled.hazards.is_empty() {
            Err(peeled.hazards.join("; "))
        } else if downstream.words.first().is_some_and(|w| w.text == "sudo") {
            Err("runs with sudo".into())
        } else {
            filters::check(&peeled.argv)
        };
        match verdict {
            Ok(()) => client_side.push(text),
            Err(why) => problems.push(format!(
                "downstream `{text}` is not a pure text filter: {why}"
            )),
        }
    }
    if !client_side.is_empty() {
        report.client_side = Some(client_side.join(" | "));
    }
    if stage.argv.is_empty() {
        problems.push("no command to run".into());
    }
    if !problems.is_empty() {
        report.reason = Some(problems.join("; "));
        return Some(report);
    }
    report.matched_argv = Some(stage.argv.clone());
    match best_verb(policy, roles, &stage.argv) {
        Ok((verb, candidate, needs_approval)) => {
            let v = &policy.verbs[&verb];
            report.status = Status::Covered;
            report.category = Some(v.category_label().to_string());
            report.needs_approval = needs_approval;
            report.args = candidate.args;
            report.reason = None;
            if !candidate.added.is_empty() {
                report
                    .notes
                    .push(format!("the verb adds: {}", candidate.added.join(" ")));
            }
            if let Some(user) = &stage.run_as
                && user != "root"
                && let Some(note) = run_as_note(policy, &verb, user)
            {
                report.notes.push(note);
            }
            report.verb = Some(verb);
        }
        Err(reason) => report.reason = Some(reason),
    }
    Some(report)
}

fn text_of(full: &str, stage: &Stage) -> String {
    full.get(stage.span.clone())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| shell_words::join(stage.words.iter().map(|w| w.text.as_str())))
}

fn run_as_note(policy: &Policy, verb: &str, user: &str) -> Option<String> {
    let v = policy.verbs.get(verb)?;
    let sandbox = policy.sandboxes.get(&v.sandbox)?;
    let wanted = nix::unistd::User::from_name(user)
        .ok()
        .flatten()?
        .uid
        .as_raw();
    match &sandbox.run_as {
        Some(r) if r.uid == wanted => None,
        _ => Some(format!(
            "the verb does not run as `{user}` (sandbox `{}` has no matching run_as)",
            v.sandbox
        )),
    }
}

/// The verb that would run `argv`: runs-at-once first, then needs-approval; otherwise why not
/// (the closest verb and the element that differs).
fn best_verb(
    policy: &Policy,
    roles: &[&Role],
    argv: &[String],
) -> Result<(String, Candidate, bool), String> {
    let mut found: Vec<(u8, usize, String, Candidate)> = Vec::new();
    let mut closest: Option<(usize, String, String)> = None;
    let mut same_program = 0usize;
    for verb in policy.verbs_for(roles) {
        let candidate = match matcher::match_verb(verb, argv) {
            Ok(c) => c,
            Err(miss) => {
                if miss.depth > 0 {
                    same_program += 1;
                }
                let score = miss.depth * 100 + shared_literals(verb, argv);
                if miss.depth > 0 && closest.as_ref().is_none_or(|(d, _, _)| score > *d) {
                    closest = Some((score, verb.name.clone(), miss.detail));
                }
                continue;
            }
        };
        same_program += 1;
        match policy.evaluate_offline(roles, &verb.name, &text_args(&candidate.args)) {
            OfflineVerdict::Run { .. } => {
                found.push((0, candidate.added.len(), verb.name.clone(), candidate))
            }
            OfflineVerdict::Propose { .. } => {
                found.push((1, candidate.added.len(), verb.name.clone(), candidate))
            }
            OfflineVerdict::Refuse(Refusal::Headless { .. }) => {
                found.push((2, candidate.added.len(), verb.name.clone(), candidate))
            }
            OfflineVerdict::Refuse(refusal) => {
                let depth = (argv.len() + 1) * 100 + shared_literals(verb, argv);
                if closest.as_ref().is_none_or(|(d, _, _)| depth >= *d) {
                    closest = Some((depth, verb.name.clone(), refusal.message()));
                }
            }
        }
    }
    found.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
    if let Some((rank, _, name, candidate)) = found.into_iter().next() {
        return Ok((name, candidate, rank > 0));
    }
    let program = argv.first().map(String::as_str).unwrap_or_default();
    Err(match closest {
        Some((_, verb, detail)) => format!("closest verb `{verb}`: {detail}"),
        None if same_program == 0 => {
            let available_elsewhere = policy.verbs.values().any(|v| match &v.action {
                VerbAction::Command { template, .. } => {
                    matcher::same_program(template.program(), program)
                }
                VerbAction::File(_) => false,
            });
            if available_elsewhere {
                format!("the verbs that run `{program}` are not available to these roles")
            } else {
                format!("no verb runs `{program}`")
            }
        }
        None => format!("no verb runs `{program}` this way"),
    })
}

/// How many words of `argv` are literal elements of the verb's template (ranks near misses).
fn shared_literals(verb: &crate::policy::Verb, argv: &[String]) -> usize {
    let VerbAction::Command { template, .. } = &verb.action else {
        return 0;
    };
    let literals: Vec<String> = template
        .elements()
        .filter(|(e, _)| e.params().next().is_none() && e.secrets().next().is_none())
        .map(|(e, _)| matcher::element_text(e))
        .collect();
    argv.iter().skip(1).filter(|w| literals.contains(w)).count()
}

/// Credentials written in command text: `NAME=…` assignments whose name says password, token,
/// secret…; `--password …`-like options; URL passwords. Compiled once per process.
static CREDENTIAL_TEXT: std::sync::LazyLock<[(regex::Regex, &'static str); 3]> =
    std::sync::LazyLock::new(|| {
        let compile = |pattern: &str| regex::Regex::new(pattern).expect("static regex");
        [
            (
                compile(
                    r"(?i)\b([A-Z0-9_]*(?:PASS|PASSWD|PASSWORD|TOKEN|SECRET|APIKEY|API_KEY|PRIVATE_KEY|CREDENTIALS?)[A-Z0-9_]*=)('[^']*'|\x22[^\x22]*\x22|\S+)",
                ),
                "${1}***",
            ),
            (
                compile(
                    r"(?i)(--(?:password|passwd|token|secret|client-secret|api-key|auth-token)(?:=|\s+))('[^']*'|\x22[^\x22]*\x22|\S+)",
                ),
                "${1}***",
            ),
            (compile(r"(://[^:/@\s]+:)([^@\s]+)@"), "${1}***@"),
        ]
    });

/// `text` with the credentials written in it replaced by `***`, then through `scrubber` (token
/// formats, the policy's patterns; the daemon's scrubber also knows its secrets' values).
pub(crate) fn redact(scrubber: Option<&crate::scrub::Scrubber>, text: &str) -> String {
    let mut text = text.to_string();
    for (pattern, replacement) in CREDENTIAL_TEXT.iter() {
        text = pattern.replace_all(&text, *replacement).into_owned();
    }
    match scrubber {
        Some(s) => String::from_utf8_lossy(&s.scrub(text.as_bytes())).into_owned(),
        None => text,
    }
}

/// Redaction of credentials in recorded command text before it is shown.
struct Redactor {
    scrubber: Option<crate::scrub::Scrubber>,
}

impl Redactor {
    fn new(policy: &Policy) -> Redactor {
        let store = crate::secrets::SecretStore::empty();
        Redactor {
            scrubber: crate::scrub::Scrubber::new(&store, &policy.scrub_patterns, true).ok(),
        }
    }

    fn redact(&self, text: &str) -> String {
        redact(self.scrubber.as_ref(), text)
    }
}

/// What to do about an uncovered command a pack covers.
fn pack_line(hint: &PackHint) -> String {
    let approval = if hint.needs_approval {
        ", with approval"
    } else {
        ""
    };
    if hint.included {
        format!(
            "pack `{}` covers it (verb `{}`{approval}), but this policy narrows it out: widen the include's `verbs`/`values` for {}",
            hint.pack, hint.verb, hint.path
        )
    } else {
        format!(
            "pack `{}` covers it (verb `{}`{approval}): include {}",
            hint.pack, hint.verb, hint.path
        )
    }
}

/// The text report: the percentage, uncovered commands grouped by program with counts (and
/// the pack that covers each, when one does), and every destructive or credential-reading
/// command a verb would run without approval.
///
/// Recorded commands come from transcripts an agent wrote: every one passes through
/// [`escape_for_terminal`], so a hostile line cannot move the cursor or fake lines of the report.
pub fn render_text(report: &Report) -> String {
    use std::fmt::Write;
    let esc = |t: &str| escape_for_terminal(t);
    let s = &report.summary;
    let mut out = String::new();
    let percent = if s.commands == 0 {
        0.0
    } else {
        s.covered as f64 * 100.0 / s.commands as f64
    };
    let _ = writeln!(
        out,
        "coverage: {}/{} commands covered ({percent:.1} %), {} of them need approval; {} uncovered; {} shell builtins ignored",
        s.covered, s.commands, s.needs_approval, s.uncovered, s.ignored
    );
    let dangerous: Vec<&CommandReport> = report
        .commands
        .iter()
        .filter(|c| c.dangerous_without_approval())
        .collect();
    if !dangerous.is_empty() {
        let _ = writeln!(
            out,
            "\n!!! DANGER: {} destructive or credential-reading command(s) would run WITHOUT approval:",
            dangerous.len()
        );
        for c in dangerous {
            let _ = writeln!(
                out,
                "!!!   {} [{}] via verb `{}` — {}",
                esc(&c.command),
                c.effect.as_str(),
                c.verb.as_deref().unwrap_or_default(),
                esc(&c.source)
            );
        }
    }
    if s.uncovered_in_packs > 0 {
        let mut by_pack: BTreeMap<&str, usize> = BTreeMap::new();
        for hint in report.commands.iter().filter_map(|c| c.pack.as_ref()) {
            *by_pack.entry(hint.pack.as_str()).or_default() += 1;
        }
        let list: Vec<String> = by_pack
            .iter()
            .map(|(pack, n)| format!("{} ({n})", esc(pack)))
            .collect();
        let _ = writeln!(
            out,
            "\n{} of the uncovered commands are covered by packs: {}",
            s.uncovered_in_packs,
            list.join(", ")
        );
    }
    let mut by_program: BTreeMap<String, Vec<&CommandReport>> = BTreeMap::new();
    for c in report
        .commands
        .iter()
        .filter(|c| c.status == Status::Uncovered)
    {
        let program = c
            .program
            .as_deref()
            .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
            .unwrap_or_else(|| "(unreadable)".into());
        by_program.entry(program).or_default().push(c);
    }
    if !by_program.is_empty() {
        let mut groups: Vec<(String, Vec<&CommandReport>)> = by_program.into_iter().collect();
        groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let _ = writeln!(out, "\nuncovered, by program:");
        for (program, commands) in groups {
            let _ = writeln!(out, "  {} ({})", esc(&program), commands.len());
            for c in commands.iter().take(5) {
                let _ = writeln!(
                    out,
                    "    {}\n      {}",
                    esc(&c.command),
                    esc(c.reason.as_deref().unwrap_or_default())
                );
                if let Some(hint) = &c.pack {
                    let _ = writeln!(out, "      {}", esc(&pack_line(hint)));
                }
            }
            if commands.len() > 5 {
                let _ = writeln!(out, "    … and {} more", commands.len() - 5);
            }
        }
    }
    for p in &report.problems {
        let _ = writeln!(out, "warning: {}", esc(p));
    }
    out
}
