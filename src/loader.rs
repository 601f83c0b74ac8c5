//! The one policy loader, used by `serve`, reload (SIGHUP or `verbd reload`) and `verbd selftest`.
//!
//! A policy goes through four steps, in this order, and nowhere else:
//! 1. [`Loader::compile`]: the TOML file (or the embedded demo) into a checked [`Policy`], with
//!    every error at file:line:col;
//! 2. [`Loader::prepare`]: secrets read (before the privilege drop: they may be root-only; on a
//!    reload, the values in force are kept where their source did not change), the
//!    scrubber built from them, every sandbox profile prepared once (Landlock rule template and
//!    seccomp programs; read-only twins for dry runs) with the daemon's private paths
//!    ([`Loader::private_paths`]) out of every child's reach, per-verb concurrency permits;
//! 3. [`Loader::self_test`]: the start-up self-test (`selftest`), whose [`Report`] gates service.
//!
//! `serve` runs steps 1–2 before binding and dropping privileges and step 3 once it is the daemon
//! user with its journal open; reload runs all of them ([`Loader::load`]) and swaps in only a
//! policy that passed; `verbd selftest` runs 1 and 3, loading secrets only for their warnings
//! (whether each source is usable is one of the self-test's checks).
//!
//! Invariant: whatever the daemon serves passed all steps; a failure at any step is a
//! [`LoadError`] and nothing of the new policy is used.
#![forbid(unsafe_code)]

use crate::policy::{self, Policy, PolicyError, VerbAction};
use crate::sandbox::{PreparedSandbox, SandboxError, SandboxSpec};
use crate::scrub::{ScrubError, Scrubber};
use crate::secrets::{CREDENTIALS_DIRECTORY_VAR, SecretError, SecretSource, SecretStore};
use crate::selftest::{self, Report};
use crate::slots::FairSlots;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the policy comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// The demo policy built into the binary (`verbd serve` without `--policy`).
    Embedded,
    File(PathBuf),
}

impl PolicySource {
    pub fn from_flag(path: Option<PathBuf>) -> PolicySource {
        path.map_or(PolicySource::Embedded, PolicySource::File)
    }
}

/// A policy with everything prepared for serving.
pub struct Prepared {
    pub policy: Policy,
    pub sandboxes: Sandboxes,
    /// The same profiles without write roots, for dry runs (only profiles of verbs with one).
    pub dry_run_sandboxes: Sandboxes,
    pub secrets: SecretStore,
    pub scrubber: Scrubber,
    /// Verbs with `max_concurrent`: their slots (a fair queue, like the daemon's own).
    pub verb_permits: BTreeMap<String, Arc<FairSlots>>,
}

/// Why a policy cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Policy(#[from] PolicyError),
    #[error("sandbox profile `{profile}`: {source}")]
    Sandbox {
        profile: String,
        source: SandboxError,
    },
    #[error("secrets: {0}")]
    Secrets(#[from] SecretError),
    #[error("scrub patterns: {0}")]
    Scrub(#[from] ScrubError),
    #[error("the self-test failed: {}", failures(.0))]
    SelfTest(Box<Report>),
    #[error("the daemon's own files cannot be protected: {0}")]
    Private(#[from] crate::protected::ProtectedError),
}

fn failures(report: &Report) -> String {
    let failed: Vec<String> = report
        .failures()
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    format!("{}: {}", report.summary(), failed.join("; "))
}

/// What the self-test checks beyond the policy.
pub enum Scope<'a> {
    /// The daemon at start: its socket and state dir too.
    Serving {
        state_dir: &'a Path,
        socket: Option<&'a Path>,
    },
    /// A reload: the policy and the host only.
    Reload,
    /// `verbd selftest`: the journal's tail too when a state dir is given.
    Offline { state_dir: Option<&'a Path> },
}

/// Loads one policy source.
pub struct Loader {
    pub source: PolicySource,
    /// The daemon's state directory, once known: one of its private paths.
    pub state_dir: Option<PathBuf>,
}

impl Loader {
    pub fn new(source: PolicySource) -> Loader {
        Loader {
            source,
            state_dir: None,
        }
    }

    /// The same loader, knowing the daemon's state directory.
    pub fn with_state_dir(self, state_dir: PathBuf) -> Loader {
        Loader {
            state_dir: Some(state_dir),
            ..self
        }
    }

    /// The daemon's private paths, which no child may read or write whatever its profile says
    /// (issue 11.3): the policy file and the files it includes, every secret source file,
    /// `$CREDENTIALS_DIRECTORY`, and the state directory (journal, keys, witness). Canonical
    /// where they exist; sorted, without duplicates.
    pub fn private_paths(&self, policy: &Policy) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        if let PolicySource::File(path) = &self.source {
            paths.push(path.clone());
        }
        paths.extend(policy.included.iter().cloned());
        paths.extend(policy.secrets.values().filter_map(|source| match source {
            SecretSource::File(path) => Some(path.clone()),
            SecretSource::Credential(_) | SecretSource::Env(_) => None,
        }));
        paths.extend(std::env::var_os(CREDENTIALS_DIRECTORY_VAR).map(PathBuf::from));
        paths.extend(self.state_dir.iter().cloned());
        let mut private: Vec<PathBuf> = paths
            .into_iter()
            .map(|path| std::fs::canonicalize(&path).unwrap_or(path))
            .filter(|path| path.is_absolute())
            .collect();
        private.sort();
        private.dedup();
        private
    }

    /// Step 1: compile.
    pub fn compile(&self) -> Result<Policy, PolicyError> {
        match &self.source {
            PolicySource::File(path) => policy::load_file(path),
            PolicySource::Embedded => {
                policy::compile(policy::DEMO_POLICY, "<embedded demo policy>")
            }
        }
    }

    /// Step 2: secrets, scrubber, sandboxes, permits. All allocation-heavy work happens here,
    /// once. (`${secret_file:…}` copies are memfds handed to one child: no profile needs a
    /// directory for them.)
    pub fn prepare(
        &self,
        policy: Policy,
        secrets_in_force: Option<&SecretStore>,
    ) -> Result<Prepared, LoadError> {
        let secrets = match secrets_in_force {
            Some(previous) => SecretStore::reload(&policy.secrets, previous)?,
            None => SecretStore::load(&policy.secrets)?,
        };
        let scrubber = Scrubber::new(&secrets, &policy.scrub_patterns, policy.scrub_builtin)?;
        let private = self.private_paths(&policy);
        let policy = protect_private_paths(policy, &private)?;
        let (sandboxes, dry_run_sandboxes) = prepare_sandboxes(&policy, &private)?;
        let verb_permits = policy
            .verbs
            .values()
            .filter_map(|v| {
                v.max_concurrent
                    .map(|n| (v.name.clone(), FairSlots::new(n)))
            })
            .collect();
        Ok(Prepared {
            policy,
            sandboxes,
            dry_run_sandboxes,
            secrets,
            scrubber,
            verb_permits,
        })
    }

    /// Step 3: the self-test. `daemon_uid` is the uid the daemon runs (or will run) as.
    pub fn self_test(
        &self,
        policy: &Policy,
        secrets: Option<&SecretStore>,
        daemon_uid: u32,
        scope: Scope<'_>,
    ) -> Report {
        let canary_exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                return Report {
                    checks: vec![selftest::Check {
                        name: "canary".into(),
                        passed: false,
                        detail: format!("cannot locate the verbd binary to run as the canary: {e}"),
                        fix: Some("run verbd from an installed path".into()),
                        location: None,
                    }],
                    warnings: Vec::new(),
                    elapsed_ms: 0.0,
                };
            }
        };
        // Only the offline self-test probes namespaces: the probe forks a child that allocates,
        // which a multithreaded daemon must not do.
        let (serving, state_dir, exec_namespaces) = match scope {
            Scope::Serving { state_dir, socket } => {
                (Some(selftest::Serving { state_dir, socket }), None, None)
            }
            Scope::Reload => (None, None, None),
            Scope::Offline { state_dir } => {
                (None, state_dir, Some(crate::sandbox::probe_namespaces()))
            }
        };
        let private = self.private_paths(policy);
        selftest::run(&selftest::Context {
            policy,
            private: &private,
            daemon_uid,
            canary_exe,
            serving,
            state_dir,
            secrets,
            exec_namespaces,
        })
    }

    /// All steps (a reload): a prepared policy that passed its self-test, with the secrets in
    /// force kept where their sources did not change ([`SecretStore::reload`]).
    pub fn load(
        &self,
        daemon_uid: u32,
        secrets_in_force: &SecretStore,
    ) -> Result<(Prepared, Report), LoadError> {
        let prepared = self.prepare(self.compile()?, Some(secrets_in_force))?;
        let report = self.self_test(
            &prepared.policy,
            Some(&prepared.secrets),
            daemon_uid,
            Scope::Reload,
        );
        if !report.passed() {
            return Err(LoadError::SelfTest(Box::new(report)));
        }
        Ok((prepared, report))
    }
}

/// The file verbs run in the daemon itself, not in a sandboxed child, so the private paths that
/// keep children away (the state directory, secret sources, the policy) must also be protected
/// paths of every file verb — read and write, with everything beneath them — and of the hook's
/// `check`, whatever roots the policy gives them.
fn protect_private_paths(
    mut policy: Policy,
    private: &[PathBuf],
) -> Result<Policy, crate::protected::ProtectedError> {
    policy.protected = policy.protected.clone().with_paths(private)?;
    for verb in policy.verbs.values_mut() {
        if let VerbAction::File(spec) = &mut verb.action {
            spec.protected = spec.protected.clone().with_paths(private)?;
        }
    }
    Ok(policy)
}

/// Prepared sandbox profiles by name.
type Sandboxes = BTreeMap<String, Arc<PreparedSandbox>>;

/// Every profile, with the daemon's `private` paths out of reach, and the read-only twins for
/// dry runs.
fn prepare_sandboxes(
    policy: &Policy,
    private: &[PathBuf],
) -> Result<(Sandboxes, Sandboxes), LoadError> {
    // Only profiles of verbs with a dry run need the read-only twin (each prepare opens every
    // root for Landlock).
    let dry_run_profiles: BTreeSet<&str> = policy
        .verbs
        .values()
        .filter(|v| {
            matches!(
                v.action,
                VerbAction::Command {
                    dry_run: Some(_),
                    ..
                }
            )
        })
        .map(|v| v.sandbox.as_str())
        .collect();
    let mut sandboxes = BTreeMap::new();
    let mut dry_run_sandboxes = BTreeMap::new();
    for (name, spec) in &policy.sandboxes {
        let spec = SandboxSpec {
            private: private.to_vec(),
            ..spec.clone()
        };
        let prepare = |spec: SandboxSpec| {
            PreparedSandbox::prepare(spec)
                .map(|sandbox| {
                    #[cfg(feature = "test-hooks")]
                    let sandbox = crate::test_hooks::fail_stage_if_asked(name, sandbox);
                    Arc::new(sandbox)
                })
                .map_err(|source| LoadError::Sandbox {
                    profile: name.clone(),
                    source,
                })
        };
        sandboxes.insert(name.clone(), prepare(spec.clone())?);
        if dry_run_profiles.contains(name.as_str()) {
            let read_only = SandboxSpec {
                write: Vec::new(),
                ..spec.clone()
            };
            dry_run_sandboxes.insert(name.clone(), prepare(read_only)?);
        }
    }
    Ok((sandboxes, dry_run_sandboxes))
}
