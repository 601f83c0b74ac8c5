//! The `verbd policy coverage|suggest|test|schema` commands: load, run, print, and the exit
//! code. `main.rs` only parses arguments and calls these.
//!
//! Everything printed that came from the history (file names included) passes through
//! [`verbd::terminal`]'s escaping, on stdout and stderr, in text, JSON and TOML.
//!
//! Exit codes: 0 success; 1 a failed check (policy errors, `policy test` mismatches, and
//! `coverage` finding a destructive or credential-reading command a verb would run without
//! approval); 65 unusable input (unreadable `--from`, a malformed tests file, an unknown role).
//! The codes are [`verbd::exit`]'s.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use verbd::exit::{EXIT_CHECK_FAILED, EXIT_INVALID, EXIT_SUCCESS};
use verbd::policy::{self, Policy, Role, RoleKind};
use verbd::policy_tools::{cases, coverage, packs, sources, suggest};
use verbd::terminal::{escape, json_visible};

/// How a coverage report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
}

/// How `policy test` results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestFormat {
    Text,
    Json,
    Junit,
}

fn load(path: &Path) -> Result<Policy, u8> {
    policy::load_file(path).map_err(|e| {
        eprintln!("{e}");
        EXIT_CHECK_FAILED
    })
}

/// The roles to replay as: the named ones, or every agent role of the policy.
fn roles<'a>(policy: &'a Policy, names: &[String]) -> Result<Vec<&'a Role>, u8> {
    if names.is_empty() {
        let agents: Vec<&Role> = policy
            .roles
            .values()
            .filter(|r| r.kind == RoleKind::Agent)
            .collect();
        if agents.is_empty() {
            eprintln!(
                "{}: defines no agent role; name the roles to replay as with --role",
                policy.origin
            );
            return Err(EXIT_INVALID);
        }
        return Ok(agents);
    }
    names
        .iter()
        .map(|n| {
            policy.roles.get(n).ok_or_else(|| {
                eprintln!(
                    "role `{n}` is not defined in {} (defined: {})",
                    policy.origin,
                    policy.roles.keys().cloned().collect::<Vec<_>>().join(", ")
                );
                EXIT_INVALID
            })
        })
        .collect()
}

fn collect(from: &[PathBuf]) -> Result<sources::Collected, u8> {
    let inputs = sources::expand_inputs(from).map_err(|e| {
        eprintln!("--from {}", escape(&e.to_string()));
        EXIT_INVALID
    })?;
    let collected = sources::read_files(&inputs);
    if collected.entries.is_empty() && !collected.problems.is_empty() {
        for p in &collected.problems {
            eprintln!("{}", escape(p));
        }
        return Err(EXIT_INVALID);
    }
    Ok(collected)
}

/// The packs to look in: `dirs` when given, else [`packs::default_dirs`].
fn pack_catalog(policy: &Policy, dirs: &[PathBuf]) -> packs::Catalog {
    let dirs = if dirs.is_empty() {
        packs::default_dirs(policy)
    } else {
        dirs.to_vec()
    };
    packs::Catalog::load(&dirs, policy)
}

/// `verbd policy coverage POLICY --from … [--format text|json] [--role R…] [--packs DIR…]`
pub fn coverage(
    policy_path: &Path,
    from: &[PathBuf],
    format: ReportFormat,
    role_names: &[String],
    pack_dirs: &[PathBuf],
) -> u8 {
    let run = || -> Result<u8, u8> {
        let policy = load(policy_path)?;
        let roles = roles(&policy, role_names)?;
        let collected = collect(from)?;
        let mut report = coverage::run(&policy, &roles, &collected);
        pack_catalog(&policy, pack_dirs).annotate(&mut report);
        match format {
            ReportFormat::Json => println!(
                "{}",
                json_visible(
                    &serde_json::to_string_pretty(&report).map_err(|_| EXIT_CHECK_FAILED)?
                )
            ),
            ReportFormat::Text => print!("{}", coverage::render_text(&report)),
        }
        Ok(if report.summary.dangerous_without_approval > 0 {
            EXIT_CHECK_FAILED
        } else {
            EXIT_SUCCESS
        })
    };
    run().unwrap_or_else(|code| code)
}

/// `verbd policy suggest POLICY --from … [--role R…] [--packs DIR…]`: TOML to review and
/// paste; commands a pack covers are proposed as that pack's include, not as drafted verbs.
pub fn suggest(
    policy_path: &Path,
    from: &[PathBuf],
    role_names: &[String],
    pack_dirs: &[PathBuf],
) -> u8 {
    let run = || -> Result<u8, u8> {
        let policy = load(policy_path)?;
        let roles = roles(&policy, role_names)?;
        let collected = collect(from)?;
        let mut report = coverage::run(&policy, &roles, &collected);
        pack_catalog(&policy, pack_dirs).annotate(&mut report);
        let role_list: Vec<String> = roles.iter().map(|r| r.name.clone()).collect();
        let text = std::fs::read_to_string(policy_path).map_err(|e| {
            eprintln!("{}: {e}", policy_path.display());
            EXIT_INVALID
        })?;
        let drafted = suggest::suggest(&policy, &text, policy_path.parent(), &role_list, &report);
        print!("{}", drafted.render());
        Ok(EXIT_SUCCESS)
    };
    run().unwrap_or_else(|code| code)
}

/// `verbd policy test POLICY TESTS.toml [--format text|json|junit]`
pub fn test(policy_path: &Path, tests_path: &Path, format: TestFormat) -> u8 {
    let run = || -> Result<u8, u8> {
        let policy = load(policy_path)?;
        let suite = cases::load(tests_path).map_err(|e| {
            eprintln!("{e}");
            EXIT_INVALID
        })?;
        let results = cases::run(&policy, &suite).map_err(|e| {
            eprintln!("{e}");
            EXIT_INVALID
        })?;
        match format {
            TestFormat::Text => print!("{}", results.render_text()),
            TestFormat::Json => println!(
                "{}",
                serde_json::to_string_pretty(&results).map_err(|_| EXIT_CHECK_FAILED)?
            ),
            TestFormat::Junit => print!(
                "{}",
                results.render_junit(&tests_path.display().to_string())
            ),
        }
        Ok(if results.passed() {
            EXIT_SUCCESS
        } else {
            EXIT_CHECK_FAILED
        })
    };
    run().unwrap_or_else(|code| code)
}

/// `verbd policy schema [--pack]`: the JSON Schema of the policy (or pack) format.
pub fn schema(pack: bool) -> u8 {
    let schema = if pack {
        schemars::schema_for!(verbd::policy::include::RawPack)
    } else {
        schemars::schema_for!(verbd::policy::schema::RawPolicy)
    };
    match serde_json::to_string_pretty(&schema) {
        Ok(text) => {
            println!("{text}");
            EXIT_SUCCESS
        }
        Err(e) => {
            eprintln!("cannot print the schema: {e}");
            EXIT_CHECK_FAILED
        }
    }
}
