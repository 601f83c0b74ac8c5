//! The self-test's checks of the policy itself, which need neither a sandbox nor a daemon: the
//! embedded examples, the corpus of hostile values against every parameter, the accounts the
//! policy names, and the file verbs' roots; and the warnings for verbs that look more dangerous
//! than they are marked. `verbd policy check` runs exactly these, on the same host, so a policy
//! it passes never fails them when `verbd serve` starts.
//!
//! Verdicts: an example that does not behave, a parameter that lets a hostile value through, a
//! daemon user or socket group that does not exist, and a file root the daemon user cannot use
//! are failures. A role member (user or group) that does not exist is a warning: it grants nothing
//! (fail closed), accounts of agents and people are often created after the policy or come from a
//! directory service that may be unreachable at that moment, and one policy may serve hosts that
//! do not all have every person — refusing to serve over one of them would take every verb away
//! from everyone. A verb that runs without approval while `policy coverage` judges its command
//! destructive or credential-reading (or mutating, when it is marked read-only), and a string
//! pattern that accepts any text of any length, are warnings too: the policy says what the operator meant, and these name
//! where it may not be what they meant.
#![forbid(unsafe_code)]

use super::Report;
use crate::files::{FileOp, FileVerbSpec};
use crate::policy::params::{Param, ParamKind};
use crate::policy::template::Template;
use crate::policy::{
    Category, Policy, PreparedAction, ProposedCall, Role, Verb, VerbAction, Verdict,
};
use crate::policy_tools::danger::{self, Effect};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The checks and warnings of this module for `policy`, in the order of its verbs.
pub(super) fn add(report: &mut Report, policy: &Policy, daemon_uid: u32) {
    let roles: Vec<&Role> = policy.roles.values().collect();
    let corpus = hostile_corpus();
    check_accounts(report, policy);
    for verb in policy.verbs.values() {
        check_examples(report, policy, &roles, verb);
        check_validator(report, policy, &roles, verb, &corpus);
        match &verb.action {
            VerbAction::File(spec) => check_file_roots(report, verb, spec, daemon_uid),
            VerbAction::Command { template, dry_run } => {
                warn_about_danger(report, policy, verb, template);
                if let Some(dry_run) = dry_run {
                    warn_about_danger(report, policy, verb, dry_run);
                }
            }
        }
        warn_about_open_patterns(report, policy, verb);
    }
}

fn verb_location(policy: &Policy, verb: &Verb) -> Option<String> {
    policy
        .locations
        .get(&format!("verb.{}", verb.name))
        .cloned()
}

fn check_examples(report: &mut Report, policy: &Policy, roles: &[&Role], verb: &Verb) {
    if verb.examples_accept.is_empty() && verb.examples_reject.is_empty() {
        return;
    }
    let mut problems = Vec::new();
    for example in &verb.examples_accept {
        if let Verdict::Refuse(r) =
            policy.evaluate(roles, &verb.name, &crate::policy::text_args(example))
        {
            problems.push(format!(
                "accept example {example:?} was refused: {}",
                r.message()
            ));
        }
    }
    for example in &verb.examples_reject {
        match policy.evaluate(roles, &verb.name, &crate::policy::text_args(example)) {
            Verdict::Refuse(refusal) => {
                use crate::policy::Refusal;
                let named = match &refusal {
                    Refusal::Invalid(r) => example.contains_key(&r.param),
                    Refusal::UnknownParam { param, .. } => example.contains_key(param),
                    Refusal::Missing { .. } => true,
                    _ => false,
                };
                if !named {
                    problems.push(format!(
                        "reject example {example:?} was refused for another reason: {}",
                        refusal.message()
                    ));
                }
            }
            _ => problems.push(format!("reject example {example:?} was ACCEPTED")),
        }
    }
    let total = verb.examples_accept.len() + verb.examples_reject.len();
    report.push_at(
        format!("examples:{}", verb.name),
        verb_location(policy, verb),
        if problems.is_empty() {
            Ok(format!("{total} example(s) behave"))
        } else {
            Err((
                problems.join("; "),
                "fix the parameter types or the examples in the policy (an include's `values` \
                 turn a pack's examples outside them into ones that must be refused)"
                    .into(),
            ))
        },
    );
}

/// Hostile values every parameter is tried with.
fn hostile_corpus() -> Vec<String> {
    vec![
        "-x".into(),
        "--help".into(),
        "--output=/etc/passwd".into(),
        "a\0b".into(),
        "a\nb".into(),
        "a\rb".into(),
        "../../../etc/passwd".into(),
        "/etc/../etc/shadow".into(),
        "$(id)".into(),
        "`id`".into(),
        ";id".into(),
        "| id".into(),
        "a".repeat(1 << 20),
        "\u{202e}evil".into(),
    ]
}

fn check_validator(
    report: &mut Report,
    policy: &Policy,
    roles: &[&Role],
    verb: &Verb,
    corpus: &[String],
) {
    if verb.params.is_empty() {
        return;
    }
    let base: BTreeMap<String, String> = verb.examples_accept.first().cloned().unwrap_or_default();
    let mut problems = Vec::new();
    let mut tried = 0;
    for param in verb.params.values() {
        for value in corpus.iter().map(String::as_str) {
            tried += 1;
            let Ok(normalized) = param.validate(value) else {
                continue;
            };
            let content = matches!(param.kind, ParamKind::Content { .. });
            if !content && normalized.contains(['\0', '\n', '\r']) {
                problems.push(format!("`{}` accepted a control character", param.name));
            }
            if !content && normalized.len() > 64 * 1024 {
                problems.push(format!(
                    "`{}` accepted a {}-byte value",
                    param.name,
                    normalized.len()
                ));
            }
            if matches!(param.kind, ParamKind::Path { .. })
                && Path::new(&normalized)
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                problems.push(format!("`{}` accepted a path with `..`", param.name));
            }
            // Option injection: with the rest of the call complete, a leading dash must never
            // begin an argv element unless the parameter opted in.
            if value.starts_with('-') && !param.allow_dash {
                let mut args = base.clone();
                args.insert(param.name.clone(), value.to_string());
                if let Verdict::Run(call) | Verdict::Propose(ProposedCall { call, .. }) =
                    policy.evaluate(roles, &verb.name, &crate::policy::text_args(&args))
                    && let PreparedAction::Exec { argv, .. } = &call.action
                    && argv.display().iter().skip(1).any(|e| e.starts_with(value))
                {
                    problems.push(format!(
                        "`{}` let {value:?} begin an argv element",
                        param.name
                    ));
                }
            }
        }
    }
    problems.dedup();
    report.push_at(
        format!("validator:{}", verb.name),
        verb_location(policy, verb),
        if problems.is_empty() {
            Ok(format!("{tried} hostile values refused or kept harmless"))
        } else {
            Err((
                problems.join("; "),
                "tighten the parameter's type or pattern".into(),
            ))
        },
    );
}

/// The daemon user and the socket groups must exist (an error: the daemon could not start as
/// configured); role members that do not exist are warnings (see the module's doc).
fn check_accounts(report: &mut Report, policy: &Policy) {
    let at = |key: &str| {
        policy
            .locations
            .get(key)
            .map_or_else(String::new, |l| format!(" ({l})"))
    };
    let daemon = &policy.daemon;
    let mut named = Vec::new();
    let mut missing = Vec::new();
    if let Some(user) = &daemon.user {
        match nix::unistd::User::from_name(user) {
            Ok(Some(_)) => named.push(format!("daemon user {user}")),
            Ok(None) => missing.push(format!(
                "daemon.user {user:?}{} does not exist",
                at("daemon.user")
            )),
            Err(e) => missing.push(format!("daemon.user {user:?}: cannot look it up: {e}")),
        }
    }
    for (key, group) in [
        ("daemon.socket_group", &daemon.socket_group),
        (
            "daemon.approver_socket_group",
            &daemon.approver_socket_group,
        ),
    ] {
        let Some(group) = group else { continue };
        match nix::unistd::Group::from_name(group) {
            Ok(Some(_)) => named.push(format!("group {group}")),
            Ok(None) => missing.push(format!("{key} {group:?}{} does not exist", at(key))),
            Err(e) => missing.push(format!("{key} {group:?}: cannot look it up: {e}")),
        }
    }
    if !named.is_empty() || !missing.is_empty() {
        report.push(
            "accounts",
            if missing.is_empty() {
                Ok(format!("{} exist", named.join(", ")))
            } else {
                Err((
                    missing.join("; "),
                    "create them (the package's systemd-sysusers file creates verbd, \
                     verbd-agents and verbd-approvers), or correct the names in [daemon]"
                        .into(),
                ))
            },
        );
    }
    for role in policy.roles.values() {
        let place = at(&format!("roles.{}", role.name));
        for user in role.users.iter().filter(|u| *u != crate::policy::INVOKER) {
            if let Ok(None) = nix::unistd::User::from_name(user) {
                report.warnings.push(format!(
                    "role `{}`{place}: user {user:?} does not exist on this host, so the role \
                     matches no one by that name (a typo there leaves verbs nobody can call or \
                     approve)",
                    role.name
                ));
            }
        }
        for group in &role.groups {
            if let Ok(None) = nix::unistd::Group::from_name(group) {
                report.warnings.push(format!(
                    "role `{}`{place}: group {group:?} does not exist on this host, so the role \
                     matches no one through it (a typo there leaves verbs nobody can call or \
                     approve)",
                    role.name
                ));
            }
        }
    }
}

/// What a file verb needs of each root: to write (and create) in it, or to read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RootUse {
    Write,
    Read,
}

impl RootUse {
    fn of(op: FileOp) -> RootUse {
        match op {
            FileOp::Write | FileOp::Append => RootUse::Write,
            FileOp::Read | FileOp::List => RootUse::Read,
        }
    }

    fn verb(self) -> &'static str {
        match self {
            RootUse::Write => "write",
            RootUse::Read => "read",
        }
    }

    /// rwx bits needed on the root itself.
    fn bits(self) -> u32 {
        match self {
            RootUse::Write => 0o3,
            RootUse::Read => 0o5,
        }
    }
}

/// A file verb's roots are valid, and the daemon's uid can use each as the verb needs.
fn check_file_roots(report: &mut Report, verb: &Verb, spec: &FileVerbSpec, daemon_uid: u32) {
    let name = format!("file-roots:{}", verb.name);
    if let Err(e) = spec.validate() {
        report.push(
            name,
            Err((
                e.to_string(),
                "create the root directory (owned by the daemon user), or fix roots = [...]".into(),
            )),
        );
        return;
    }
    let need = RootUse::of(spec.op);
    let account = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(daemon_uid))
        .ok()
        .flatten();
    let who = account.as_ref().map_or_else(
        || format!("uid {daemon_uid}"),
        |u| format!("{} (uid {daemon_uid})", u.name),
    );
    let name_for_fix = account
        .as_ref()
        .map_or_else(|| daemon_uid.to_string(), |u| u.name.clone());
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    for root in &spec.roots {
        if let Err(why) = daemon_may_use(root, need, daemon_uid, account.as_ref()) {
            problems.push(format!(
                "the daemon user {who} cannot {} {}: {why}",
                need.verb(),
                root.display()
            ));
            let grant = match need {
                RootUse::Write => "rwx",
                RootUse::Read => "rx",
            };
            fixes.push(format!(
                "setfacl -m u:{name_for_fix}:{grant} {0} (or chown {name_for_fix} {0}); under \
                 systemd also ReadWritePaths={0} in a drop-in when the verb writes",
                root.display()
            ));
        }
    }
    report.push(
        name,
        if problems.is_empty() {
            Ok(format!(
                "{} root(s) the daemon user {who} can {}",
                spec.roots.len(),
                need.verb()
            ))
        } else {
            Err((problems.join("; "), fixes.join("; ")))
        },
    );
}

/// Whether `uid` may use `root` as `need` says. When this process runs as `uid` (the daemon
/// after its privilege drop, or an unprivileged `verbd selftest`), the kernel answers
/// (`faccessat` with the effective ids: modes, ACLs, read-only mounts and all); a root process
/// checking for a daemon user it will become reads owner, group and mode bits of the root and
/// every directory above it (an ACL granting more is not seen there), with the user's primary
/// group, the only one the daemon keeps.
fn daemon_may_use(
    root: &Path,
    need: RootUse,
    uid: u32,
    account: Option<&nix::unistd::User>,
) -> Result<(), String> {
    use nix::unistd::AccessFlags;
    if nix::unistd::geteuid().as_raw() == uid {
        let flags = match need {
            RootUse::Write => AccessFlags::W_OK | AccessFlags::X_OK,
            RootUse::Read => AccessFlags::R_OK | AccessFlags::X_OK,
        };
        return nix::unistd::faccessat(
            nix::fcntl::AT_FDCWD,
            root,
            flags,
            nix::fcntl::AtFlags::AT_EACCESS,
        )
        .map_err(|errno| errno.desc().to_string());
    }
    if uid == 0 {
        return Ok(());
    }
    let gid = account.map_or(uid, |u| u.gid.as_raw());
    let allows = |meta: &std::fs::Metadata, bits: u32| {
        let mode = meta.permissions().mode();
        let granted = if meta.uid() == uid {
            mode >> 6
        } else if meta.gid() == gid {
            mode >> 3
        } else {
            mode
        };
        granted & bits == bits
    };
    let describe = |path: &Path, meta: &std::fs::Metadata| {
        format!(
            "{} is owned by uid {} gid {} with mode {:04o}",
            path.display(),
            meta.uid(),
            meta.gid(),
            meta.permissions().mode() & 0o7777
        )
    };
    for dir in root.ancestors().skip(1) {
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !allows(&meta, 0o1) {
            return Err(format!("it cannot search {}", describe(dir, &meta)));
        }
    }
    let meta = std::fs::metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    if !allows(&meta, need.bits()) {
        return Err(describe(root, &meta));
    }
    if need == RootUse::Write
        && let Ok(stat) = nix::sys::statvfs::statvfs(root)
        && stat.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY)
    {
        return Err("it is on a read-only file system".into());
    }
    Ok(())
}

/// A verb that runs without a human's approval, or is marked read-only, while `policy coverage`
/// judges its command as doing more: a warning naming the judgement and the fix.
fn warn_about_danger(report: &mut Report, policy: &Policy, verb: &Verb, template: &Template) {
    if verb.needs_approval {
        return;
    }
    let read_only = verb.category == Some(Category::ReadOnly);
    let Some((effect, why, argv)) = most_severe(template, &verb.params) else {
        return;
    };
    let fix = match effect {
        Effect::Destructive => {
            "mark it category = \"destructive\" (a human approves, after a dry run)"
        }
        Effect::CredentialRead => {
            "make a human approve it (approval = \"required\", or category = \"mutating\"), or change what it runs"
        }
        Effect::Mutating if read_only => "mark it category = \"mutating\" (a human approves)",
        Effect::Mutating | Effect::Unknown | Effect::ReadOnly => return,
    };
    let place = verb_location(policy, verb).map_or_else(String::new, |l| format!(" ({l})"));
    report.warnings.push(format!(
        "verb `{}`{place} runs without approval ({}), but `{}` is {} as `policy coverage` \
         judges it ({why}): {fix}",
        verb.name,
        verb.category_label(),
        argv.join(" "),
        effect.as_str()
    ));
}

/// Most argv variants [`most_severe`] judges one by one; past it, each choice is varied alone.
const MAX_COMBINATIONS: usize = 4096;

/// The most severe judgement of the argv `template` can render: every combination of the values
/// of the elements that are a whole enum (or bool) parameter (when there are more than
/// [`MAX_COMBINATIONS`], each element's values while the others take their first);
/// an element with another parameter stays as written (`{repo}`), holding its place, since its
/// value is not known here.
fn most_severe(
    template: &Template,
    params: &BTreeMap<String, Param>,
) -> Option<(Effect, String, Vec<String>)> {
    let choices: Vec<Vec<Option<String>>> = template
        .elements()
        .map(|(element, _)| {
            let param = element.sole_param().and_then(|name| params.get(name));
            match param.map(|p| &p.kind) {
                Some(ParamKind::Enum { values }) => values.iter().cloned().map(Some).collect(),
                Some(ParamKind::Bool { flag }) => vec![None, Some(flag.clone())],
                // The SQL type accepts reading statements only (`SqlKind`): one stands for all.
                Some(ParamKind::Sql(_)) => vec![Some("SELECT 1".to_string())],
                _ => vec![Some(element.text())],
            }
        })
        .collect();
    let combinations = choices
        .iter()
        .try_fold(1usize, |n, c| n.checked_mul(c.len()))
        .filter(|n| *n <= MAX_COMBINATIONS);
    let candidates: Vec<Vec<Option<String>>> = match combinations {
        Some(_) => choices
            .iter()
            .fold(vec![Vec::new()], |partial, alternatives| {
                partial
                    .iter()
                    .flat_map(|prefix| {
                        alternatives.iter().map(move |alternative| {
                            let mut next = prefix.clone();
                            next.push(alternative.clone());
                            next
                        })
                    })
                    .collect()
            }),
        None => {
            let first: Vec<Option<String>> = choices.iter().map(|c| c[0].clone()).collect();
            let mut one_at_a_time = vec![first.clone()];
            for (index, alternatives) in choices.iter().enumerate() {
                for alternative in alternatives.iter().skip(1) {
                    let mut candidate = first.clone();
                    candidate[index] = alternative.clone();
                    one_at_a_time.push(candidate);
                }
            }
            one_at_a_time
        }
    };
    candidates
        .into_iter()
        .map(|candidate| {
            let argv: Vec<String> = std::iter::once(template.program().display().to_string())
                .chain(candidate.into_iter().flatten())
                .collect();
            let (effect, why) = danger::classify(&argv);
            (effect, why, argv)
        })
        .min_by_key(|(effect, _, _)| *effect)
}

/// Text no parameter of a command should need: shell syntax, a path out of every directory, a
/// space. A pattern that accepts these, and as much of them as anyone may send, places no
/// constraint on the value (`.*`, `.+`); a pattern that bounds the length or the characters
/// (a search pattern for grep: `[^\x00-\x1f]{1,200}`) was written on purpose.
const ANY_TEXT: &[&str] = &["$(reboot); rm -rf / #", "../../../etc/shadow"];

/// A string parameter whose pattern accepts any text of any length: a warning.
fn warn_about_open_patterns(report: &mut Report, policy: &Policy, verb: &Verb) {
    let long = ANY_TEXT[0].repeat(64);
    for param in verb.params.values() {
        let ParamKind::Str {
            pattern, source, ..
        } = &param.kind
        else {
            continue;
        };
        if ANY_TEXT.iter().all(|text| pattern.is_match(text)) && pattern.is_match(&long) {
            let place = verb_location(policy, verb).map_or_else(String::new, |l| format!(" ({l})"));
            report.warnings.push(format!(
                "verb `{}`{place}: the pattern {source:?} of parameter `{}` accepts any text of \
                 any length (e.g. {:?}), so the program gets whatever the agent writes there: \
                 narrow it to the values the parameter needs",
                verb.name, param.name, ANY_TEXT[0]
            ));
        }
    }
}
