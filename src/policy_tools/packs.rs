//! Which pack would cover a command the policy does not: `policy coverage` names it beside the
//! command, and `policy suggest` proposes including it before drafting a verb of its own.
//!
//! Every pack file (`*.toml`) in the pack directories is compiled on its own, in a policy that
//! gives all its verbs to one agent role and declares (by name only) the secrets it refers to,
//! its parameter types as the pack ships them: not narrowed to a site. A command is a pack's
//! when coverage finds it covered there, through the same matcher and validators as for the
//! operator's policy. The pack directories are the ones given (`--packs`; the Debian package
//! installs its packs in `/usr/share/doc/verbd/examples/packs`), else those of the packs the
//! policy already includes, so the answer depends on the policy, not on what the host has.
//!
//! Invariants: a pack is only named, never included: the operator's policy is not changed and
//! nothing is run; only a command coverage could read as one plain argv is looked up; a pack
//! that does not compile on its own is reported as a problem, not silently passed over.
#![forbid(unsafe_code)]

use super::coverage::{self, CommandReport, PackHint, Report, Status};
use super::sources::{Entry, Format, Recorded};
use crate::policy::params::ParamKind;
use crate::policy::{self, Policy};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The role every verb of a pack is given when the pack is compiled on its own.
const PACK_ROLE: &str = "agent";

/// One pack, compiled on its own.
struct Pack {
    name: String,
    path: PathBuf,
    policy: Policy,
    included: bool,
}

/// The packs found in the pack directories.
pub struct Catalog {
    packs: Vec<Pack>,
    /// Pack files that could not be read or compiled, with why.
    pub problems: Vec<String>,
}

/// The pack directories to look in when none are given: those of the packs `policy` includes.
pub fn default_dirs(policy: &Policy) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in policy.included.iter().filter_map(|p| p.parent()) {
        if !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// The secrets a pack's text refers to (`${secret:NAME}`, `${secret_file:NAME}`).
fn referenced_secrets(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for marker in ["${secret:", "${secret_file:"] {
        let mut rest = text;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// Compile the pack at `path` on its own, every verb given to [`PACK_ROLE`].
fn compile_pack(path: &Path) -> Result<Policy, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut policy_text = format!(
        "version = 1\ninclude = [{{ path = {}, roles = [\"{PACK_ROLE}\"] }}]\n[roles.{PACK_ROLE}]\nuids = [65534]\n",
        crate::terminal::toml_string(&path.to_string_lossy())
    );
    for secret in referenced_secrets(&text) {
        policy_text.push_str(&format!("[secrets.{secret}]\ncredential = \"{secret}\"\n"));
    }
    policy::compile_in(&policy_text, &path.display().to_string(), None).map_err(|e| e.to_string())
}

/// The parameters of `verb` among `args` whose type holds a site's values.
fn site_params(policy: &Policy, verb: &str, args: &BTreeMap<String, String>) -> Vec<String> {
    let Some(verb) = policy.verbs.get(verb) else {
        return Vec::new();
    };
    args.keys()
        .filter(|name| {
            verb.params.get(*name).is_some_and(|p| {
                matches!(
                    p.kind,
                    ParamKind::Hostname
                        | ParamKind::K8sName
                        | ParamKind::SystemdUnit
                        | ParamKind::Str { .. }
                )
            })
        })
        .cloned()
        .collect()
}

impl Catalog {
    /// Compile every `*.toml` directly in `dirs` (pack tests live in a subdirectory), in name
    /// order; `policy` tells which of them it already includes.
    pub fn load(dirs: &[PathBuf], policy: &Policy) -> Catalog {
        let mut catalog = Catalog {
            packs: Vec::new(),
            problems: Vec::new(),
        };
        let mut seen = BTreeSet::new();
        for dir in dirs {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) => {
                    catalog
                        .problems
                        .push(format!("pack directory {}: {e}", dir.display()));
                    continue;
                }
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
                .collect();
            files.sort();
            for file in files {
                let path = std::fs::canonicalize(&file).unwrap_or(file);
                if !seen.insert(path.clone()) {
                    continue;
                }
                match compile_pack(&path) {
                    Ok(compiled) => catalog.packs.push(Pack {
                        name: path
                            .file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        included: policy.included.contains(&path),
                        path,
                        policy: compiled,
                    }),
                    Err(e) => catalog.problems.push(format!(
                        "pack {} does not compile alone: {e}",
                        path.display()
                    )),
                }
            }
        }
        catalog
    }

    /// How many packs were compiled.
    pub fn len(&self) -> usize {
        self.packs.len()
    }

    /// Whether no pack was found.
    pub fn is_empty(&self) -> bool {
        self.packs.is_empty()
    }

    /// The first pack (packs the policy already includes first, then by name) that covers the
    /// uncovered command `report`, if any.
    pub fn covering(&self, report: &CommandReport) -> Option<PackHint> {
        if report.status != Status::Uncovered {
            return None;
        }
        let argv = report.matched_argv.as_ref()?;
        let entry = Entry {
            source: report.source.clone(),
            format: Format::Plain,
            command: Recorded::Argv(argv.clone()),
        };
        let mut order: Vec<&Pack> = self.packs.iter().filter(|p| p.included).collect();
        order.extend(self.packs.iter().filter(|p| !p.included));
        order.into_iter().find_map(|pack| {
            let role = pack.policy.roles.get(PACK_ROLE)?;
            let mut ignored = 0;
            let reports = coverage::analyze_entry(&pack.policy, &[role], &entry, &mut ignored);
            match reports.as_slice() {
                [found] if found.status == Status::Covered => Some(PackHint {
                    pack: pack.name.clone(),
                    path: pack.path.display().to_string(),
                    site_params: site_params(&pack.policy, found.verb.as_deref()?, &found.args),
                    verb: found.verb.clone()?,
                    args: found.args.clone(),
                    needs_approval: found.needs_approval,
                    included: pack.included,
                }),
                _ => None,
            }
        })
    }

    /// Name, for every uncovered command of `report`, the pack that covers it; the catalog's
    /// problems join the report's.
    pub fn annotate(&self, report: &mut Report) {
        for command in &mut report.commands {
            command.pack = self.covering(command);
        }
        report.summary.uncovered_in_packs =
            report.commands.iter().filter(|c| c.pack.is_some()).count();
        report.problems.extend(self.problems.iter().cloned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_by_both_markers() {
        let text = r#"command = "kubectl --kubeconfig ${secret_file:kubeconfig} get"
env = { PGPASSWORD = "${secret:pg_password}" }"#;
        assert_eq!(
            referenced_secrets(text).into_iter().collect::<Vec<_>>(),
            vec!["kubeconfig".to_string(), "pg_password".to_string()]
        );
    }
}
