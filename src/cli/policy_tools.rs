//! `verbd policy …`: the policy, offline (check and explain here; coverage, suggest, test and
//! schema in `verbd::policy_tools`).
#![forbid(unsafe_code)]

use super::{EXIT_CHECK_FAILED, EXIT_INVALID, parse_kv};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use verbd::policy::{self, PreparedAction, ProposedCall, Verdict};

/// `verbd policy …`
#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum PolicyCommand {
    /// Check a policy file: compile it (errors show file:line:col), then run the self-test's
    /// checks that need no sandbox (examples, hostile values, accounts, file roots); exit 1 on
    /// any error, as `verbd selftest` would fail
    Check {
        /// The policy file
        file: PathBuf,
    },
    /// Print the argv a verb would run with these arguments, without running it
    Explain {
        /// The policy file
        file: PathBuf,
        /// The verb's name
        verb: String,
        /// Arguments as key=value
        args: Vec<String>,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Replay recorded agent commands (shell lines, JSONL, Claude Code or Codex transcripts)
    /// against a policy: what is covered, what needs approval, what is not and why. Exit 1 when
    /// a destructive or credential-reading command would run without approval.
    Coverage {
        /// The policy file
        policy: PathBuf,
        /// Files, directories or globs (e.g. '~/.claude/projects/*/*.jsonl')
        #[arg(long, required = true, num_args = 1..)]
        from: Vec<PathBuf>,
        /// How the report is printed
        #[arg(long, value_enum, default_value = "text")]
        format: super::policy_report::ReportFormat,
        /// Replay as these roles (default: every agent role)
        #[arg(long)]
        role: Vec<String>,
        /// Directories of packs to name for uncovered commands (default: those of the packs
        /// the policy includes; the package installs its packs in
        /// /usr/share/doc/verbd/examples/packs)
        #[arg(long)]
        packs: Vec<PathBuf>,
    },
    /// Draft verbs (TOML to review and paste) for the commands coverage finds uncovered
    Suggest {
        /// The policy file
        policy: PathBuf,
        /// Files, directories or globs of recorded commands (as for coverage)
        #[arg(long, required = true, num_args = 1..)]
        from: Vec<PathBuf>,
        /// Replay as these roles (default: every agent role)
        #[arg(long)]
        role: Vec<String>,
        /// Directories of packs to propose before drafting verbs (default: as for coverage)
        #[arg(long)]
        packs: Vec<PathBuf>,
    },
    /// Check expected verdicts (run, propose, refuse with its rule) for calls and recorded
    /// commands; exit 1 on any mismatch
    Test {
        /// The policy file
        policy: PathBuf,
        /// The TOML file of expected verdicts (see policy/packs/tests/)
        tests: PathBuf,
        /// How the results are printed (junit: JUnit XML for CI)
        #[arg(long, value_enum, default_value = "text")]
        format: super::policy_report::TestFormat,
    },
    /// Print the polkit rule that lets the daemon's user start/stop/restart/reload exactly the
    /// units the policy's systemctl verbs name (install it as
    /// /etc/polkit-1/rules.d/50-verbd.rules); exit 1, naming the verb, when a verb does not
    /// bound its units
    Polkit {
        /// The policy file
        policy: PathBuf,
        /// The daemon's user (default: the policy's daemon.user, else verbd, the packaged
        /// unit's user)
        #[arg(long)]
        user: Option<String>,
    },
    /// Print the JSON Schema of the policy format (--pack: of a pack file)
    Schema {
        /// The schema of a pack file instead of a policy
        #[arg(long)]
        pack: bool,
    },
}

/// Runs one `verbd policy` subcommand.
pub fn run(command: PolicyCommand) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Check { file } => check(&file),
        PolicyCommand::Explain {
            file,
            verb,
            args,
            json,
        } => explain(&file, &verb, &args, json),
        PolicyCommand::Coverage {
            policy,
            from,
            format,
            role,
            packs,
        } => Ok(ExitCode::from(super::policy_report::coverage(
            &policy, &from, format, &role, &packs,
        ))),
        PolicyCommand::Suggest {
            policy,
            from,
            role,
            packs,
        } => Ok(ExitCode::from(super::policy_report::suggest(
            &policy, &from, &role, &packs,
        ))),
        PolicyCommand::Test {
            policy,
            tests,
            format,
        } => Ok(ExitCode::from(super::policy_report::test(
            &policy, &tests, format,
        ))),
        PolicyCommand::Polkit { policy, user } => polkit(&policy, user),
        PolicyCommand::Schema { pack } => Ok(ExitCode::from(super::policy_report::schema(pack))),
    }
}

/// Compile a policy file (errors show file:line:col), then run the self-test's checks of the
/// policy itself (`verbd::selftest::policy_report`), so a policy this passes never fails them
/// when the daemon starts on this host.
pub fn check(file: &Path) -> anyhow::Result<ExitCode> {
    let p = match policy::load_file(file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(EXIT_CHECK_FAILED));
        }
    };
    let report = verbd::selftest::policy_report(&p, verbd::privileges::daemon_uid_for(&p));
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let mut failed = false;
    for c in report.failures() {
        failed = true;
        let at = c.location.as_deref().unwrap_or(&p.origin);
        eprintln!("{at}: {}: {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            eprintln!("     fix: {fix}");
        }
    }
    if failed {
        return Ok(ExitCode::from(EXIT_CHECK_FAILED));
    }
    println!(
        "{}: ok ({} verbs, {} roles, {} sandbox profiles; {} checks of the self-test passed)",
        file.display(),
        p.verbs.len(),
        p.roles.len(),
        p.sandboxes.len(),
        report.checks.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The argv a verb would run with these arguments, without running it (as an operator: every
/// role counts).
pub fn explain(file: &Path, verb: &str, args: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let policy = match policy::load_file(file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(EXIT_CHECK_FAILED));
        }
    };
    let raw = policy::text_args(&parse_kv(args)?);
    let roles: Vec<&policy::Role> = policy.roles.values().collect();
    let (call, decision, category) = match policy.evaluate(&roles, verb, &raw) {
        Verdict::Run(call) => (call, "runs at once", None),
        Verdict::Propose(ProposedCall { call, category, .. }) => {
            (call, "needs human approval", Some(category))
        }
        Verdict::Refuse(refusal) => {
            eprintln!("refused: {}", refusal.message());
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let category = category.unwrap_or_else(|| {
        policy
            .verbs
            .get(verb)
            .map_or("unspecified", |v| v.category_label())
    });
    let env: BTreeMap<String, String> = match &call.action {
        PreparedAction::Exec { env, .. } => {
            env.iter().map(|(k, v)| (k.clone(), v.display())).collect()
        }
        PreparedAction::File(_) => BTreeMap::new(),
    };
    let dry_run = match &call.action {
        PreparedAction::Exec {
            dry_run: Some(d), ..
        } => Some(d.display()),
        _ => None,
    };
    let limits = &call.limits;
    if json {
        let out = serde_json::json!({
            "verb": verb,
            "category": category,
            "decision": decision,
            "args": call.args,
            "args_hash": call.args_hash,
            "argv": call.display_argv(),
            "dry_run": dry_run,
            "env": env,
            "sandbox": limits.sandbox,
            "timeout_ms": limits.timeout.as_millis() as u64,
            "max_output": limits.max_output,
            "cwd": limits.cwd,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("verb:     {verb} ({category}, {decision})");
        println!("argv:     {}", shell_words::join(call.display_argv()));
        if let Some(d) = dry_run {
            println!("dry-run:  {}", shell_words::join(d));
        }
        for (k, val) in &env {
            println!("env:      {k}={val}");
        }
        println!("sandbox:  {}", limits.sandbox);
        println!("hash:     {}", call.args_hash);
    }
    Ok(ExitCode::SUCCESS)
}

/// `verbd policy polkit`: the rule on stdout, or why none can be given.
fn polkit(file: &Path, user: Option<String>) -> anyhow::Result<ExitCode> {
    use verbd::policy_tools::polkit;
    let policy = match policy::load_file(file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(EXIT_CHECK_FAILED));
        }
    };
    let grants = match polkit::grants(&policy) {
        Ok(grants) => grants,
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            return Ok(ExitCode::from(EXIT_CHECK_FAILED));
        }
    };
    let user = user
        .or_else(|| policy.daemon.user.clone())
        .unwrap_or_else(|| "verbd".to_string());
    verbd::print_lossy!("{}", polkit::rule(&grants, &user, &policy.origin));
    Ok(ExitCode::SUCCESS)
}
