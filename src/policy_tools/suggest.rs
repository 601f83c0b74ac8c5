//! `verbd policy suggest`: draft verbs, to review and paste, from the commands a coverage run
//! found uncovered.
//!
//! Packs first: a command a pack covers ([`super::packs`]) is proposed as that pack's include
//! entry (its verbs, and the values seen to narrow it to), never drafted as a verb of its own.
//!
//! Commands are grouped by program, subcommand and shape (which options, where the operands
//! are). Within a group, a position whose value never changed becomes a literal element and a
//! varying one a typed parameter inferred from the values seen: `sql` after `psql -c`, `int`
//! with the range seen, `duration`, an `enum` of at most five values, `systemd-unit`,
//! `k8s-name`, `hostname`, a `path` with the directories seen as roots, or an anchored string
//! pattern built only from the character classes seen (letters, digits and `._:@/+=,-`). A psql
//! draft runs as the postgresql pack does: `-X` (no psqlrc), `--no-password`, and when read-only
//! a read-only session (`PGOPTIONS`). A name taken already gets what tells the shape apart, its
//! last parameter or option (`journalctl-lines`), a number only when nothing does.
//!
//! Invariants: never a shell, an interpreter or an exec wrapper, nor a command one of whose
//! options runs a command (`danger::runs_code`: `tar --checkpoint-action=exec=`, `zip -TT`,
//! `git -c`, `awk 'BEGIN{system(…)}'`, `sed 's/…/…/e'`, …); never a string parameter
//! without a pattern (values with other characters become an enum, or the group is skipped);
//! never a credential read; the category is `read-only` only when every command of the group is
//! known to be read-only, `destructive` (with a dry run that shows the argv) when any is, and
//! `mutating` otherwise. Every suggestion is compiled together with the policy and must cover
//! the commands it came from, or it is not printed.
#![forbid(unsafe_code)]

use super::coverage::{CommandReport, Report, Status};
use super::danger::{self, Effect};
use crate::policy::params::{Param, ParamKind};
use crate::policy::units::parse_duration;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The draft: packs to include, verbs as TOML, and what was left out with why.
#[derive(Debug, Clone, Default)]
pub struct Suggestions {
    /// Packs that cover uncovered commands, proposed before any drafted verb.
    pub packs: Vec<SuggestedPack>,
    pub verbs: Vec<SuggestedVerb>,
    pub skipped: Vec<String>,
    /// What the reading of the history skipped or could not read (links, FIFOs, caps, bad lines).
    pub warnings: Vec<String>,
}

/// A pack that covers some of the uncovered commands: include it (or widen its include).
#[derive(Debug, Clone)]
pub struct SuggestedPack {
    pub name: String,
    pub path: String,
    /// The policy includes it already, narrowed so these commands fall outside.
    pub included: bool,
    /// The pack's verbs the commands map to.
    pub verbs: BTreeSet<String>,
    /// Per site parameter (host, name, unit, string), the values the commands gave it: what
    /// to narrow the include's `values` to.
    pub values: BTreeMap<String, BTreeSet<String>>,
    /// The recorded commands (`file:line`) and one of them.
    pub sources: Vec<String>,
    pub example: String,
}

impl SuggestedPack {
    /// Comment lines: what the pack covers, and the include entry to add (or widen).
    fn render(&self) -> String {
        let verbs: Vec<String> = self.verbs.iter().map(|v| quote(v)).collect();
        let mut out = format!(
            "# pack `{}` covers {} recorded command(s), e.g. `{}` ({}):\n",
            comment(&self.name),
            self.sources.len(),
            comment(&self.example),
            comment(&self.sources[0])
        );
        if self.included {
            out.push_str(
                "#   the policy includes it, narrowed so these fall outside: widen its include to\n",
            );
        }
        out.push_str(&format!(
            "#   {{ path = {}, verbs = [{}] }},\n",
            comment(&quote(&self.path)),
            comment(&verbs.join(", "))
        ));
        for (param, values) in &self.values {
            let list: Vec<String> = values.iter().take(8).map(|v| quote(v)).collect();
            let more = if values.len() > 8 { ", …" } else { "" };
            out.push_str(&format!(
                "#   values seen for {}: [{}{more}] (narrow with values = {{ {} = [...] }})\n",
                comment(param),
                comment(&list.join(", ")),
                comment(param)
            ));
        }
        out
    }
}

#[derive(Debug, Clone)]
pub struct SuggestedVerb {
    pub name: String,
    pub toml: String,
    /// The recorded commands it stands for (`file:line`).
    pub sources: Vec<String>,
    /// Their argv, which the verb must cover.
    argvs: Vec<Vec<String>>,
}

impl Suggestions {
    /// TOML to paste into the policy (comments say where each verb came from). Every string that
    /// came from the history (commands, file names, programs, values) is shown through the one
    /// escaping rule of [`crate::terminal`]: `escape` in comments, `toml_string` in TOML strings,
    /// so what the operator reads on a terminal is what the bytes say.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# Suggested by `verbd policy suggest`. Review every verb before pasting it into the\n# policy: the program path, the category, the parameter types and ranges, the roles and the\n# sandbox (none is set: the default profile has no network and no writes).\n",
        );
        if !self.packs.is_empty() {
            out.push_str(
                "\n# Packs first: these commands are covered by packs. Add each entry to the policy's\n# `include = [...]` (before any table) instead of drafting verbs for them.\n",
            );
            for pack in &self.packs {
                out.push_str(&pack.render());
            }
        }
        for verb in &self.verbs {
            out.push('\n');
            out.push_str(&verb.toml);
        }
        if !self.skipped.is_empty() {
            out.push_str("\n# Not suggested:\n");
            for s in &self.skipped {
                out.push_str(&format!("#   {}\n", comment(s)));
            }
        }
        if !self.warnings.is_empty() {
            out.push_str("\n# Not read from the history:\n");
            for w in &self.warnings {
                out.push_str(&format!("#   {}\n", comment(w)));
            }
        }
        out
    }
}

/// How deep the subcommand path of a program goes (`kubectl get pods` → 2).
fn subcommand_depth(program: &str) -> usize {
    match program {
        "kubectl" | "ip" | "ctr" | "docker" => 2,
        "systemctl" | "helm" | "git" | "crictl" | "podman" | "nerdctl" | "resolvectl"
        | "networkctl" | "loginctl" | "timedatectl" | "hostnamectl" => 1,
        _ => 0,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Literal(String),
    /// A varying operand; the string is a literal prefix (`--since=`) it carries.
    Slot(String),
}

struct Sample<'a> {
    report: &'a CommandReport,
    argv: Vec<String>,
}

/// Draft verbs for the uncovered commands of `report`.
pub fn suggest(
    policy: &crate::policy::Policy,
    policy_text: &str,
    base: Option<&Path>,
    roles: &[String],
    report: &Report,
) -> Suggestions {
    let mut out = Suggestions {
        warnings: report.problems.clone(),
        ..Suggestions::default()
    };
    let mut groups: BTreeMap<(String, Vec<String>, Vec<Shape>), Vec<Sample<'_>>> = BTreeMap::new();
    let mut packs: BTreeMap<String, SuggestedPack> = BTreeMap::new();
    for c in report
        .commands
        .iter()
        .filter(|c| c.status == Status::Uncovered)
    {
        if let Some(hint) = &c.pack {
            let pack = packs
                .entry(hint.path.clone())
                .or_insert_with(|| SuggestedPack {
                    name: hint.pack.clone(),
                    path: hint.path.clone(),
                    included: hint.included,
                    verbs: BTreeSet::new(),
                    values: BTreeMap::new(),
                    sources: Vec::new(),
                    example: c.command.clone(),
                });
            pack.verbs.insert(hint.verb.clone());
            for (param, value) in hint
                .args
                .iter()
                .filter(|(param, _)| hint.site_params.contains(param))
            {
                pack.values
                    .entry(param.clone())
                    .or_default()
                    .insert(value.clone());
            }
            pack.sources.push(c.source.clone());
            continue;
        }
        let Some(argv) = &c.matched_argv else {
            out.skipped.push(format!(
                "`{}`: {}",
                c.command,
                c.reason.as_deref().unwrap_or("not one plain command")
            ));
            continue;
        };
        let program = argv[0].rsplit('/').next().unwrap_or(&argv[0]).to_string();
        if crate::policy::compile::is_interpreter(Path::new(&argv[0])).is_some() {
            out.skipped.push(format!(
                "`{}`: {program} is a shell, interpreter or exec wrapper",
                c.command
            ));
            continue;
        }
        if let Some(why) = danger::runs_code(argv) {
            out.skipped.push(format!(
                "`{}`: runs code its arguments choose: {why}",
                c.command
            ));
            continue;
        }
        if c.effect == Effect::CredentialRead {
            out.skipped.push(format!(
                "`{}`: reads credentials; give the verb that needs them a [secrets] entry instead",
                c.command
            ));
            continue;
        }
        let depth = subcommand_depth(&program);
        let mut subcommands = Vec::new();
        let mut shape = Vec::new();
        for word in &argv[1..] {
            if subcommands.len() < depth && shape.is_empty() && is_identifier(word) {
                subcommands.push(word.clone());
            } else if word.starts_with('-') {
                match word.split_once('=') {
                    Some((opt, _)) if opt.starts_with("--") => {
                        shape.push(Shape::Slot(format!("{opt}=")));
                    }
                    _ => shape.push(Shape::Literal(word.clone())),
                }
            } else {
                shape.push(Shape::Slot(String::new()));
            }
        }
        groups
            .entry((program, subcommands, shape))
            .or_default()
            .push(Sample {
                report: c,
                argv: argv.clone(),
            });
    }
    out.packs = packs.into_values().collect();
    let mut names: BTreeSet<String> = policy.verbs.keys().cloned().collect();
    for ((program, subcommands, shape), samples) in groups {
        match draft(&program, &subcommands, &shape, &samples, roles, &mut names) {
            Ok(verb) => out.verbs.push(verb),
            Err(why) => out.skipped.push(why),
        }
    }
    verify(policy_text, base, roles, &mut out);
    out
}

fn is_identifier(word: &str) -> bool {
    word.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Compile the policy with each suggestion and replay its commands through it: a suggestion
/// that does not load, or does not cover every command it came from, is dropped with why.
fn verify(policy_text: &str, base: Option<&Path>, roles: &[String], out: &mut Suggestions) {
    let mut kept = Vec::new();
    for verb in std::mem::take(&mut out.verbs) {
        let text = format!("{policy_text}\n{}", verb.toml);
        let policy = match crate::policy::compile_in(&text, "<policy + suggestion>", base) {
            Ok(p) => p,
            Err(e) => {
                out.skipped
                    .push(format!("verb `{}` would not load: {e}", verb.name));
                continue;
            }
        };
        let role_refs: Vec<&crate::policy::Role> =
            roles.iter().filter_map(|r| policy.roles.get(r)).collect();
        let compiled = &policy.verbs[&verb.name];
        let uncovered = verb.argvs.iter().find(|argv| {
            match super::matcher::match_verb(compiled, argv) {
                Ok(candidate) => matches!(
                    policy.evaluate_offline(&role_refs, &verb.name, &crate::policy::text_args(&candidate.args)),
                    crate::policy::OfflineVerdict::Refuse(ref r) if !matches!(r, crate::policy::Refusal::Headless { .. })
                ),
                Err(_) => true,
            }
        });
        match uncovered {
            None => kept.push(verb),
            Some(argv) => out.skipped.push(format!(
                "verb `{}` would not cover `{}`",
                verb.name,
                shell_words::join(argv)
            )),
        }
    }
    out.verbs = kept;
}

/// A TOML string holding `s` exactly, with nothing hidden on a terminal.
fn quote(s: &str) -> String {
    crate::terminal::toml_string(s)
}

/// Text from the history, fit for one comment line: hidden characters and newlines escaped.
fn comment(s: &str) -> String {
    crate::terminal::escape(s)
}

/// Escape a literal for the template syntax (`{`/`}` are placeholders).
fn literal(s: &str) -> String {
    s.replace('{', "{{").replace('}', "}}")
}

fn resolve_program(name: &str) -> (PathBuf, bool) {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs = path.split(':').map(str::to_string).chain(
        [
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ]
        .map(String::from),
    );
    for dir in dirs {
        if !dir.starts_with('/') {
            continue;
        }
        let candidate = Path::new(&dir).join(name);
        if candidate.is_file() {
            return (candidate, true);
        }
    }
    (PathBuf::from("/usr/bin").join(name), false)
}

/// A parameter name from the option before it, or the type.
fn param_name(program: &str, option: Option<&str>, kind: &str, taken: &BTreeSet<String>) -> String {
    let known = match (program, option) {
        ("kubectl" | "helm", Some("-n")) => Some("namespace"),
        ("journalctl", Some("-n")) | ("tail" | "head", Some("-n")) => Some("lines"),
        ("journalctl" | "systemctl", Some("-u")) => Some("unit"),
        ("psql", Some("-c")) => Some("sql"),
        ("psql", Some("-d")) => Some("database"),
        ("psql", Some("-U")) => Some("user"),
        ("psql", Some("-h")) => Some("host"),
        (_, Some("-l")) => Some("selector"),
        (_, Some("-o")) => Some("output"),
        (_, Some("-p")) => Some("port"),
        (_, Some("-c")) => Some("container"),
        _ => None,
    };
    let base = known.map(str::to_string).unwrap_or_else(|| match option {
        Some(o) if o.starts_with("--") => o
            .trim_start_matches('-')
            .trim_end_matches('=')
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        _ => kind.to_string(),
    });
    let base = if base.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
        base
    } else {
        format!("p_{base}")
    };
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}{n}");
        n += 1;
    }
    name
}

/// A parameter name from what the values look like.
fn hint(program: &str, kind: &'static str, values: &BTreeSet<String>) -> &'static str {
    let all = |k: ParamKind| {
        values
            .iter()
            .all(|v| probe(k.clone()).validate_lexically(v).is_ok())
    };
    if kind != "value" {
        kind
    } else if matches!(program, "systemctl" | "journalctl") && all(ParamKind::SystemdUnit) {
        "unit"
    } else if matches!(program, "kubectl" | "helm") && all(ParamKind::K8sName) {
        "name"
    } else if values.iter().all(|v| v.starts_with('/')) {
        "path"
    } else {
        "value"
    }
}

fn probe(kind: ParamKind) -> Param {
    Param {
        name: "p".into(),
        description: String::new(),
        kind,
        required: true,
        default: None,
        allow_dash: false,
    }
}

/// The parameter declaration (TOML inline table) for the values seen, and a type word.
fn infer(
    program: &str,
    option: Option<&str>,
    values: &BTreeSet<String>,
) -> Result<(String, &'static str), String> {
    let all = |kind: ParamKind| {
        let p = probe(kind);
        values.iter().all(|v| p.validate_lexically(v).is_ok())
    };
    if program == "psql" && matches!(option, Some("-c" | "--command")) {
        let explain = values
            .iter()
            .any(|v| v.trim_start().to_ascii_lowercase().starts_with("explain"));
        let allow = if explain {
            "[\"select\", \"explain\"]"
        } else {
            "[\"select\"]"
        };
        use crate::policy::sql::{SqlKind, SqlOptions};
        let opts = SqlOptions {
            allow: if explain {
                vec![SqlKind::Select, SqlKind::Explain]
            } else {
                vec![SqlKind::Select]
            },
            ..SqlOptions::default()
        };
        if let Some(bad) = values.iter().find(|v| {
            probe(ParamKind::Sql(opts.clone()))
                .validate_lexically(v)
                .is_err()
        }) {
            return Err(format!(
                "SQL the sql type refuses (a write, several statements or a psql meta-command): {bad:?}"
            ));
        }
        return Ok((format!("{{ type = \"sql\", allow = {allow} }}"), "sql"));
    }
    let ints: Option<Vec<i64>> = values.iter().map(|v| v.parse::<i64>().ok()).collect();
    if let Some(ints) = ints {
        let (min, max) = (
            ints.iter().min().copied().unwrap_or(0),
            ints.iter().max().copied().unwrap_or(0),
        );
        return Ok((
            format!("{{ type = \"int\", min = {min}, max = {max} }}"),
            "count",
        ));
    }
    if values
        .iter()
        .all(|v| v.chars().any(|c| c.is_ascii_alphabetic()) && parse_duration(v).is_ok())
    {
        let longest = values
            .iter()
            .max_by_key(|v| parse_duration(v).map(|d| d.as_secs()).unwrap_or(0))
            .cloned()
            .unwrap_or_default();
        return Ok((
            format!(
                "{{ type = \"duration\", max_duration = {} }}",
                quote(&longest)
            ),
            "duration",
        ));
    }
    if values.iter().all(|v| v.starts_with('/')) {
        let mut roots: BTreeSet<PathBuf> = values
            .iter()
            .filter_map(|v| Path::new(v).parent().map(Path::to_path_buf))
            .filter(|p| p != Path::new("/"))
            .collect();
        if roots.is_empty()
            || values
                .iter()
                .any(|v| v.contains("/../") || v.ends_with("/.."))
        {
            return Err("paths directly under / (no narrower root to suggest)".into());
        }
        let snapshot = roots.clone();
        roots.retain(|r| !snapshot.iter().any(|o| o != r && r.starts_with(o)));
        let list: Vec<String> = roots
            .iter()
            .map(|r| quote(&r.display().to_string()))
            .collect();
        return Ok((
            format!("{{ type = \"path\", roots = [{}] }}", list.join(", ")),
            "path",
        ));
    }
    if values.len() <= 5 && values.iter().all(|v| !v.starts_with('-')) {
        let list: Vec<String> = values.iter().map(|v| quote(v)).collect();
        return Ok((
            format!("{{ type = \"enum\", values = [{}] }}", list.join(", ")),
            "value",
        ));
    }
    if matches!(program, "systemctl" | "journalctl") && all(ParamKind::SystemdUnit) {
        return Ok(("{ type = \"systemd-unit\" }".into(), "unit"));
    }
    if matches!(program, "kubectl" | "helm") && all(ParamKind::K8sName) {
        return Ok(("{ type = \"k8s-name\" }".into(), "name"));
    }
    if values.iter().all(|v| v.contains('.'))
        && all(ParamKind::Hostname)
        && values
            .iter()
            .all(|v| v.parse::<std::net::IpAddr>().is_err())
    {
        return Ok(("{ type = \"hostname\" }".into(), "host"));
    }
    const SAFE_PUNCT: &str = "._:@/+=,-";
    if values.iter().all(|v| {
        v.chars()
            .all(|c| c.is_ascii_alphanumeric() || SAFE_PUNCT.contains(c))
    }) {
        let mut class = String::new();
        let has = |f: fn(char) -> bool| values.iter().any(|v| v.chars().any(f));
        if has(|c| c.is_ascii_lowercase()) {
            class.push_str("a-z");
        }
        if has(|c| c.is_ascii_uppercase()) {
            class.push_str("A-Z");
        }
        if has(|c| c.is_ascii_digit()) {
            class.push_str("0-9");
        }
        for p in SAFE_PUNCT.chars().filter(|p| *p != '-') {
            if values.iter().any(|v| v.contains(p)) {
                class.push('\\');
                class.push(p);
            }
        }
        if values.iter().any(|v| v.contains('-')) {
            class.push_str("\\-");
        }
        let longest = values.iter().map(String::len).max().unwrap_or(1);
        let pattern = format!("[{class}]+");
        return Ok((
            format!(
                "{{ type = \"string\", pattern = {}, max_length = {} }}",
                quote(&pattern),
                (longest * 2).max(16)
            ),
            "value",
        ));
    }
    if values.len() <= 10 && values.iter().all(|v| !v.starts_with('-')) {
        let list: Vec<String> = values.iter().map(|v| quote(v)).collect();
        return Ok((
            format!("{{ type = \"enum\", values = [{}] }}", list.join(", ")),
            "value",
        ));
    }
    Err(format!(
        "{} different values with characters no safe pattern covers",
        values.len()
    ))
}

/// What a read-only psql draft's session is set to, as the postgresql pack does.
const PSQL_READ_ONLY: &str = "-c default_transaction_read_only=on -c statement_timeout=30s";

/// A verb name not in `names`: the program and subcommands (`kubectl-get`), then, when that is
/// taken, what this shape has last: a parameter (`journalctl-lines` for `-n {lines}`) or a
/// literal option (`frobnicate-none` for `--none`); a numbered suffix only when nothing else
/// tells it apart.
fn verb_name(
    program: &str,
    subcommands: &[String],
    shape: &[Shape],
    params: &[(String, String)],
    names: &BTreeSet<String>,
) -> String {
    let clean = |s: &str| {
        s.to_ascii_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "-")
            .trim_matches('-')
            .to_string()
    };
    let mut stem = clean(
        &std::iter::once(program.to_string())
            .chain(subcommands.iter().cloned())
            .collect::<Vec<_>>()
            .join("-"),
    );
    if stem.is_empty() {
        stem = "verb".into();
    }
    if !names.contains(&stem) {
        return stem;
    }
    let options = shape.iter().rev().filter_map(|s| match s {
        Shape::Literal(word) if word.starts_with('-') => Some(clean(word)),
        _ => None,
    });
    let words = params
        .iter()
        .rev()
        .map(|(name, _)| clean(name))
        .chain(options);
    for option in words.filter(|o| !o.is_empty()) {
        let name = format!("{stem}-{option}");
        if !names.contains(&name) {
            return name;
        }
    }
    let mut n = 2;
    loop {
        let name = format!("{stem}-{n}");
        if !names.contains(&name) {
            return name;
        }
        n += 1;
    }
}

fn draft(
    program: &str,
    subcommands: &[String],
    shape: &[Shape],
    samples: &[Sample<'_>],
    roles: &[String],
    names: &mut BTreeSet<String>,
) -> Result<SuggestedVerb, String> {
    let first = &samples[0].report.command;
    // Operand positions in argv: program, subcommands, then the shape.
    let offset = 1 + subcommands.len();
    let mut elements: Vec<String> = vec![];
    let mut params: Vec<(String, String)> = Vec::new();
    let mut param_at: BTreeMap<usize, (String, String)> = BTreeMap::new();
    let mut taken = BTreeSet::new();
    for (i, s) in shape.iter().enumerate() {
        let at = offset + i;
        match s {
            Shape::Literal(word) => {
                if word == "[" || word == "]" {
                    return Err(format!("`{first}`: a literal `[`/`]` element"));
                }
                elements.push(literal(word));
            }
            Shape::Slot(prefix) => {
                let values: BTreeSet<String> = samples
                    .iter()
                    .map(|s| s.argv[at][prefix.len()..].to_string())
                    .collect();
                if values.len() == 1 {
                    elements.push(literal(&samples[0].argv[at]));
                    continue;
                }
                let option = if prefix.is_empty() {
                    match shape.get(i.wrapping_sub(1)) {
                        Some(Shape::Literal(o)) if i > 0 => Some(o.as_str()),
                        _ => None,
                    }
                } else {
                    Some(prefix.as_str())
                };
                let (decl, kind) = infer(program, option, &values)
                    .map_err(|why| format!("`{first}` and {} similar: {why}", samples.len() - 1))?;
                let name = param_name(program, option, hint(program, kind, &values), &taken);
                taken.insert(name.clone());
                elements.push(format!("{}{{{name}}}", literal(prefix)));
                params.push((name.clone(), decl));
                param_at.insert(at, (name, prefix.clone()));
            }
        }
    }
    let (path, found) = resolve_program(program);
    let mut argv = vec![path.display().to_string()];
    if program == "psql" {
        // As the postgresql pack runs it: no ~/.psqlrc (it can run commands), never a password
        // prompt (it would hang the call).
        for (flag, alias) in [("-X", "--no-psqlrc"), ("--no-password", "-w")] {
            if !elements.iter().any(|e| e == flag || e == alias) {
                argv.push(flag.to_string());
            }
        }
    }
    argv.extend(subcommands.iter().map(|s| literal(s)));
    argv.extend(elements);
    let effects: Vec<Effect> = samples.iter().map(|s| s.report.effect).collect();
    let category = if effects.contains(&Effect::Destructive) {
        "destructive"
    } else if effects.iter().all(|e| *e == Effect::ReadOnly) {
        "read-only"
    } else {
        "mutating"
    };
    let name = verb_name(program, subcommands, shape, &params, names);
    names.insert(name.clone());
    let argv_toml: Vec<String> = argv.iter().map(|a| quote(a)).collect();
    let mut toml = String::new();
    let sources: Vec<String> = samples.iter().map(|s| s.report.source.clone()).collect();
    toml.push_str(&format!(
        "# from {} recorded command(s), e.g. `{}` ({})\n",
        samples.len(),
        comment(first),
        comment(&sources[0])
    ));
    if !found {
        toml.push_str(&format!(
            "# {} was not found on this host: check the program path\n",
            comment(program)
        ));
    }
    toml.push_str(&format!("[verb.{name}]\n"));
    toml.push_str(&format!(
        "description = {}\n",
        quote(
            &format!(
                "{} {} (suggested from {} recorded commands; review)",
                program,
                subcommands.join(" "),
                samples.len()
            )
            .replace("  ", " ")
        )
    ));
    toml.push_str(&format!("category = \"{category}\"\n"));
    let role_list: Vec<String> = roles.iter().map(|r| quote(r)).collect();
    toml.push_str(&format!("roles = [{}]\n", role_list.join(", ")));
    toml.push_str(&format!("command = [{}]\n", argv_toml.join(", ")));
    if program == "psql" && category == "read-only" {
        toml.push_str(&format!(
            "env = {{ PGOPTIONS = {} }}\n",
            quote(PSQL_READ_ONLY)
        ));
    }
    if category == "destructive" {
        let mut dry = vec![quote("/bin/echo"), quote("would run:")];
        dry.extend(argv_toml.iter().cloned());
        toml.push_str("# A dry run that shows the argv; replace it with the program's own dry run if it has one.\n");
        toml.push_str(&format!("dry_run = [{}]\n", dry.join(", ")));
    }
    for (pname, decl) in &params {
        toml.push_str(&format!("params.{pname} = {decl}\n"));
    }
    if !param_at.is_empty() {
        // The self-test (and `policy check`) renders every example on this host, where a path
        // parameter must exist: a recorded path that does not is left out, and said so.
        let is_path = |pname: &str| {
            params
                .iter()
                .any(|(name, decl)| name == pname && decl.contains("type = \"path\""))
        };
        let mut examples = BTreeSet::new();
        let mut absent = BTreeSet::new();
        for s in samples {
            let values: Vec<(&String, &str)> = param_at
                .iter()
                .map(|(at, (pname, prefix))| (pname, &s.argv[*at][prefix.len()..]))
                .collect();
            let missing: Vec<&str> = values
                .iter()
                .filter(|(pname, value)| is_path(pname) && !Path::new(value).exists())
                .map(|(_, value)| *value)
                .collect();
            if !missing.is_empty() {
                absent.extend(missing.into_iter().map(str::to_string));
                continue;
            }
            let pairs: Vec<String> = values
                .iter()
                .map(|(pname, value)| format!("{pname} = {}", quote(value)))
                .collect();
            examples.insert(format!("{{ {} }}", pairs.join(", ")));
            if examples.len() == 3 {
                break;
            }
        }
        if !absent.is_empty() {
            toml.push_str(&format!(
                "# No example with {}: not on this host, where the self-test renders examples.\n",
                comment(&absent.into_iter().collect::<Vec<_>>().join(", "))
            ));
        }
        if !examples.is_empty() {
            toml.push_str(&format!(
                "examples.accept = [{}]\n",
                examples.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    Ok(SuggestedVerb {
        name,
        toml,
        sources,
        argvs: samples.iter().map(|s| s.argv.clone()).collect(),
    })
}
