//! The self-test that gates service (invariant 8).
//!
//! `verbd serve` runs it after binding its socket (without listening) and dropping privileges,
//! and accepts no connection — and tells systemd nothing — until every check passes; a reload swaps
//! policies only when the new one passes. `verbd selftest --policy FILE` runs the same checks
//! offline. Every check is named and says PASS or FAIL with the reason and the fix.
//!
//! Checks: the policy's embedded examples; every verb binary (absolute, regular, executable, owned
//! by root or the daemon user, not writable by group/other, parents likewise, no set-id bit,
//! optional sha256 pin); per sandbox profile, a canary child (the verbd binary itself, in a hidden
//! mode) that must FAIL to write outside the write roots and to read any of the daemon's private
//! paths (policy, secret sources, credentials, state directory), get EPERM from a
//! denied syscall, fail to open a network socket when the network is off, fail to reach an unlisted
//! Unix socket by `connect` or by datagram (`SOCK_DGRAM`, `SOCK_RAW`), and see no_new_privs,
//! seccomp filter mode and empty capabilities; per profile, one child confined by exactly that
//! profile that executes (`AT_EXECVE_CHECK`) every program its verbs and the notifier run, with
//! their `#!` interpreters and loaders, and reads their libraries (`programs:PROFILE`, failing
//! naming the verb, the profile and the file; `AT_EXECVE_CHECK` does not look at the loader, so it
//! is checked on its own); a corpus of hostile values against every parameter;
//! secret sources' ownership and modes; file verbs' roots; and, when serving, the daemon's identity,
//! socket mode and group, state dir and journal.
#![forbid(unsafe_code)]

mod policy_checks;

use crate::policy::{Policy, RoleKind, Verb, VerbAction};
use crate::sandbox::{Network, PreparedSandbox, SandboxSpec};
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Hidden subcommand the canary child runs.
pub const CANARY_SUBCOMMAND: &str = "__sandbox-canary";

/// Test-only switch: run canaries *without* their sandbox, so the forbidden things succeed and the
/// self-test must fail. It can only make the self-test fail, never pass. Read only in builds with
/// the `test-hooks` feature (the integration tests'); every other build ignores it.
pub const UNSANDBOXED_CANARY_ENV: &str = "VERBD_TEST_UNSANDBOXED_CANARY";

/// The canary finds here a listening Unix socket outside the profile's `unix_sockets`, which its
/// connect must not reach (the connect broker of `sandbox::unix_broker`).
const CANARY_SOCKET_ENV: &str = "VERBD_CANARY_UNLISTED_SOCKET";

/// The canary finds here a bound datagram Unix socket, which no datagram it sends may reach
/// (`AF_UNIX` sockets other than stream and seqpacket cannot be created, `SOCK_RAW` included).
const CANARY_DATAGRAM_ENV: &str = "VERBD_CANARY_UNLISTED_DATAGRAM";

/// One named check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Where in the policy (or a pack) the checked thing is written, as `file:line:col`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// All checks of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
    /// Findings that do not fail the self-test (e.g. a short secret), shown with it.
    pub warnings: Vec<String>,
    pub elapsed_ms: f64,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed)
    }

    /// One line: `self-test passed: 57 checks in 23.1 ms` or the failure count.
    pub fn summary(&self) -> String {
        let failed = self.failures().count();
        if failed == 0 {
            format!(
                "self-test passed: {} checks in {:.1} ms",
                self.checks.len(),
                self.elapsed_ms
            )
        } else {
            format!(
                "self-test FAILED: {failed} of {} checks failed ({:.1} ms)",
                self.checks.len(),
                self.elapsed_ms
            )
        }
    }

    /// The human-readable report.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let at = match (&c.location, c.passed) {
                (Some(location), false) => format!("{location}: "),
                _ => String::new(),
            };
            out.push_str(&format!(
                "{} {}: {at}{}\n",
                if c.passed { "PASS" } else { "FAIL" },
                c.name,
                c.detail
            ));
            if let (false, Some(fix)) = (c.passed, &c.fix) {
                out.push_str(&format!("     fix: {fix}\n"));
            }
        }
        for w in &self.warnings {
            out.push_str(&format!("WARN {w}\n"));
        }
        out.push_str(&self.summary());
        out.push('\n');
        out
    }

    fn push(&mut self, name: impl Into<String>, result: Result<String, (String, String)>) {
        self.push_at(name, None, result);
    }

    /// [`push`](Self::push) for a check of something written at `location`.
    fn push_at(
        &mut self,
        name: impl Into<String>,
        location: Option<String>,
        result: Result<String, (String, String)>,
    ) {
        let name = name.into();
        self.checks.push(match result {
            Ok(detail) => Check {
                name,
                passed: true,
                detail,
                fix: None,
                location,
            },
            Err((detail, fix)) => Check {
                name,
                passed: false,
                detail,
                fix: Some(fix),
                location,
            },
        });
    }
}

/// What the self-test needs to know beyond the policy.
pub struct Context<'a> {
    pub policy: &'a Policy,
    /// The daemon's private paths (`Loader::private_paths`): every canary must fail to read each.
    pub private: &'a [PathBuf],
    /// The uid the daemon runs as (after its privilege drop).
    pub daemon_uid: u32,
    /// The verbd binary, run as the sandbox canary.
    pub canary_exe: PathBuf,
    /// Present when serving: checked too.
    pub serving: Option<Serving<'a>>,
    /// A state dir whose journal tail should be verified (offline `selftest --state-dir`).
    pub state_dir: Option<&'a Path>,
    /// Loaded secrets, when available (their warnings are reported).
    pub secrets: Option<&'a crate::secrets::SecretStore>,
    /// Whether `verbd exec` can use a user and mount namespace on this host (probed by the
    /// offline `verbd selftest`, a single-threaded process; not by the daemon): reported.
    pub exec_namespaces: Option<crate::sandbox::NamespaceSupport>,
}

/// Facts about a running daemon.
pub struct Serving<'a> {
    pub state_dir: &'a Path,
    pub socket: Option<&'a Path>,
}

/// Run every check.
pub fn run(ctx: &Context) -> Report {
    let started = Instant::now();
    let mut report = Report {
        checks: Vec::new(),
        warnings: ctx.policy.warnings.clone(),
        elapsed_ms: 0.0,
    };
    let policy = ctx.policy;
    report.push(
        "policy",
        Ok(format!(
            "{}: {} verbs, {} roles, {} sandbox profiles, hash {}",
            policy.origin,
            policy.verbs.len(),
            policy.roles.len(),
            policy.sandboxes.len(),
            &policy.hash[..12]
        )),
    );
    policy_checks::add(&mut report, policy, ctx.daemon_uid);
    for verb in policy.verbs.values() {
        if let VerbAction::Command { template, dry_run } = &verb.action {
            check_binary(&mut report, ctx, verb, template.program());
            if let Some(d) = dry_run
                && d.program() != template.program()
            {
                check_binary(&mut report, ctx, verb, d.program());
            }
        }
    }
    if let Some(notify) = &policy.approvals.notify {
        check_binary_path(&mut report, ctx, "approvals.notify", notify.program(), None);
    }
    for spec in policy.sandboxes.values() {
        check_sandbox(&mut report, ctx, spec);
    }
    check_programs_start(&mut report, ctx);
    if let Some(support) = &ctx.exec_namespaces {
        // Informational, like the `policy` line: either answer is a working `verbd exec`.
        report.push(
            "exec-isolation",
            Ok(match support {
                crate::sandbox::NamespaceSupport::Available => "verbd exec keeps protected entries with its create broker (new protected names nowhere, protected entries unchanged at any depth); --mount-namespace is available on this host too (the probe's read-only bind refused a write)".to_string(),
                crate::sandbox::NamespaceSupport::Unavailable(reason) => format!(
                    "verbd exec keeps protected entries with its create broker (new protected names nowhere, protected entries unchanged at any depth); --mount-namespace is not available on this host ({reason})"
                ),
            }),
        );
    }
    let agent_uids = agent_uids(policy);
    for (name, source) in &policy.secrets {
        let checked = match ctx.secrets {
            Some(secrets) => secrets.check(name, source, ctx.daemon_uid, &agent_uids),
            None => crate::secrets::check_source(name, source, ctx.daemon_uid, &agent_uids)
                .map(|()| format!("{source} is private to the daemon")),
        };
        report.push(
            format!("secret:{name}"),
            checked.map_err(|p| (p.to_string(), p.fix.clone())),
        );
    }
    if let Some(secrets) = ctx.secrets {
        for warning in secrets.warnings() {
            report.warnings.push(warning);
        }
    }
    if let Some(serving) = &ctx.serving {
        check_serving(&mut report, ctx, serving);
    } else if let Some(dir) = ctx.state_dir {
        check_journal_tail(&mut report, dir);
    }
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    report
}

/// The self-test's checks of the policy itself, without sandboxes, programs, secrets or a
/// journal (`verbd policy check`): examples, hostile values, accounts, file roots, and the
/// warnings about verbs and patterns. The same functions run inside [`run`], so `policy check`
/// and the self-test give one verdict on them. `daemon_uid`: as for [`Context::daemon_uid`].
pub fn policy_report(policy: &Policy, daemon_uid: u32) -> Report {
    let started = Instant::now();
    let mut report = Report {
        checks: Vec::new(),
        warnings: policy.warnings.clone(),
        elapsed_ms: 0.0,
    };
    policy_checks::add(&mut report, policy, daemon_uid);
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    report
}

fn agent_uids(policy: &Policy) -> Vec<u32> {
    let mut uids = Vec::new();
    for role in policy.roles.values().filter(|r| r.kind == RoleKind::Agent) {
        uids.extend(&role.uids);
        for user in &role.users {
            if let Ok(Some(u)) = nix::unistd::User::from_name(user) {
                uids.push(u.uid.as_raw());
            }
        }
        for group in &role.groups {
            if let Ok(Some(g)) = nix::unistd::Group::from_name(group) {
                for member in &g.mem {
                    if let Ok(Some(u)) = nix::unistd::User::from_name(member) {
                        uids.push(u.uid.as_raw());
                    }
                }
            }
        }
    }
    uids.sort_unstable();
    uids.dedup();
    uids
}

fn check_binary(report: &mut Report, ctx: &Context, verb: &Verb, program: &Path) {
    check_binary_path(
        report,
        ctx,
        &format!("binary:{}", verb.name),
        program,
        verb.sha256.as_deref(),
    );
}

fn check_binary_path(
    report: &mut Report,
    ctx: &Context,
    name: &str,
    program: &Path,
    pin: Option<&str>,
) {
    let result = (|| -> Result<String, (String, String)> {
        let shown = program.display();
        if !program.is_absolute() {
            return Err((
                format!("{shown} is not absolute"),
                "use an absolute path".into(),
            ));
        }
        let real = std::fs::canonicalize(program).map_err(|e| {
            (
                format!("{shown}: {e}"),
                format!("install {shown}, or remove the verb"),
            )
        })?;
        let meta = std::fs::metadata(&real)
            .map_err(|e| (format!("{}: {e}", real.display()), "check the file".into()))?;
        if !meta.is_file() {
            return Err((
                format!("{} is not a regular file", real.display()),
                "point the verb at the program itself".into(),
            ));
        }
        let mode = meta.permissions().mode();
        if mode & 0o111 == 0 {
            return Err((
                format!("{} is not executable", real.display()),
                format!("chmod 0755 {}", real.display()),
            ));
        }
        if mode & 0o6000 != 0 {
            return Err((
                format!(
                    "{} has a setuid/setgid bit (mode {:04o})",
                    real.display(),
                    mode & 0o7777
                ),
                format!(
                    "chmod u-s,g-s {} (verbs run without privileges; a set-id binary defeats that)",
                    real.display()
                ),
            ));
        }
        let owner_ok = |uid: u32| uid == 0 || uid == ctx.daemon_uid;
        if !owner_ok(meta.uid()) || mode & 0o022 != 0 {
            return Err((
                format!(
                    "{} is owned by uid {} with mode {:04o}: someone other than root could replace it",
                    real.display(),
                    meta.uid(),
                    mode & 0o7777
                ),
                format!("chown root:root {0} && chmod go-w {0}", real.display()),
            ));
        }
        let mut dir = real.parent();
        while let Some(d) = dir {
            let dm = std::fs::metadata(d).map_err(|e| {
                (
                    format!("{}: {e}", d.display()),
                    "check the directory".into(),
                )
            })?;
            let dmode = dm.permissions().mode();
            if !owner_ok(dm.uid()) || dmode & 0o022 != 0 {
                return Err((
                    format!(
                        "parent directory {} is owned by uid {} with mode {:04o}: the binary could be swapped",
                        d.display(),
                        dm.uid(),
                        dmode & 0o7777
                    ),
                    parent_fix(d, dmode, real.as_path()),
                ));
            }
            dir = d.parent();
        }
        if let Some(pin) = pin {
            let bytes = std::fs::read(&real)
                .map_err(|e| (format!("{}: {e}", real.display()), "check the file".into()))?;
            let digest = crate::digest::sha256_hex(&bytes);
            if digest != pin {
                return Err((
                    format!(
                        "{} has sha256 {digest}, the policy pins {pin}",
                        real.display()
                    ),
                    "reinstall the expected program, or update the pin after reviewing the change"
                        .into(),
                ));
            }
            return Ok(format!(
                "{} is safe and matches its sha256 pin",
                real.display()
            ));
        }
        Ok(format!(
            "{} is root-owned, not writable by others, no set-id bit",
            real.display()
        ))
    })();
    report.push(name, result);
}

/// The fix for a program below a directory others can change. A shared directory that must stay
/// writable by everyone (the sticky, world-writable `/tmp` and `/var/tmp`) is never to be
/// changed: the program has to move out of it.
fn parent_fix(dir: &Path, mode: u32, program: &Path) -> String {
    let elsewhere = format!(
        "install {} in a directory that only root can change, all the way up (e.g. \
         /usr/local/bin, or /opt/NAME/bin owned by root, mode 0755), and point the verb there",
        program.display()
    );
    if mode & 0o1002 == 0o1002 {
        format!(
            "{} is a shared directory (mode {:04o}) that must stay writable by everyone; {elsewhere}",
            dir.display(),
            mode & 0o7777
        )
    } else {
        format!(
            "{elsewhere}; or, if nothing else needs to write there, chown root {0} && chmod go-w {0}",
            dir.display()
        )
    }
}

/// Who runs which program in which profile: `(profile, who, program)`, `who` as messages name it.
fn programs_by_profile(policy: &Policy) -> BTreeMap<&str, Vec<(String, &Path)>> {
    let mut by_profile: BTreeMap<&str, Vec<(String, &Path)>> = BTreeMap::new();
    for verb in policy.verbs.values() {
        if let VerbAction::Command { template, dry_run } = &verb.action {
            let entry = by_profile.entry(verb.sandbox.as_str()).or_default();
            entry.push((format!("verb `{}`", verb.name), template.program()));
            if let Some(dry_run) = dry_run {
                entry.push((format!("verb `{}` (dry run)", verb.name), dry_run.program()));
            }
        }
    }
    if let Some(notify) = &policy.approvals.notify {
        by_profile
            .entry(policy.approvals.notify_sandbox.as_str())
            .or_default()
            .push(("approvals.notify".into(), notify.program()));
    }
    by_profile
}

/// For every (program, profile) pair of the policy: the program, its interpreters and its
/// libraries can be executed and read inside exactly that profile — observed by one child per
/// profile, confined by the profile as the daemon prepares it (module `program_files` lists the
/// files, `PreparedSandbox::observe` tries them).
fn check_programs_start(report: &mut Report, ctx: &Context) {
    let mut needed_by_program: BTreeMap<
        &Path,
        Result<Vec<crate::program_files::NeededFile>, String>,
    > = BTreeMap::new();
    for (profile, programs) in programs_by_profile(ctx.policy) {
        // A program that does not exist fails its `binary:` check; nothing to probe here.
        let programs: Vec<(String, &Path)> =
            programs.into_iter().filter(|(_, p)| p.exists()).collect();
        let Some(spec) = ctx.policy.sandboxes.get(profile) else {
            continue;
        };
        if programs.is_empty() {
            continue;
        }
        let result = (|| -> Result<String, (String, String)> {
            let mut problems = Vec::new();
            let mut checks: Vec<(PathBuf, bool)> = Vec::new();
            for (_, program) in &programs {
                let needed = needed_by_program.entry(program).or_insert_with(|| {
                    crate::program_files::needed(program).map_err(|e| e.to_string())
                });
                match needed {
                    Ok(files) => {
                        for file in files.iter() {
                            let check = (file.path.clone(), file.execute);
                            if !checks.contains(&check) {
                                checks.push(check);
                            }
                        }
                    }
                    Err(e) => problems.push(e.clone()),
                }
            }
            let exact = SandboxSpec {
                private: ctx.private.to_vec(),
                ..spec.clone()
            };
            let prepared = PreparedSandbox::prepare(exact).map_err(|e| {
                (
                    format!("the profile cannot be prepared: {e}"),
                    "fix the profile's paths".into(),
                )
            })?;
            let outcomes = prepared.observe(&checks).map_err(|e| {
                (
                    format!("the program probe could not run: {e}"),
                    "check that the kernel supports Landlock ABI 6 and seccomp".into(),
                )
            })?;
            let mut unobservable = Vec::new();
            for (who, program) in &programs {
                let Some(Ok(files)) = needed_by_program.get(program) else {
                    continue;
                };
                for file in files {
                    let index = checks
                        .iter()
                        .position(|(p, x)| *p == file.path && *x == file.execute)
                        .expect("every needed file was checked");
                    let errno = outcomes[index];
                    if errno == 0 {
                        continue;
                    }
                    if file.execute && errno == libc::EINVAL {
                        unobservable.push(file.path.display().to_string());
                        continue;
                    }
                    problems.push(format!(
                        "{who} cannot start in profile `{profile}`: {} ({}) cannot be {}: {}",
                        file.path.display(),
                        file.role,
                        if file.execute { "executed" } else { "read" },
                        std::io::Error::from_raw_os_error(errno)
                    ));
                }
            }
            if !unobservable.is_empty() {
                unobservable.sort();
                unobservable.dedup();
                report.warnings.push(format!(
                    "profile `{profile}`: execution of {} not observed (the kernel lacks AT_EXECVE_CHECK, Linux 6.14)",
                    unobservable.join(", ")
                ));
            }
            problems.dedup();
            if problems.is_empty() {
                Ok(format!(
                    "{} program(s) can start: {} files executed or read by a child confined by the profile",
                    programs.len(),
                    checks.len()
                ))
            } else {
                Err((
                    problems.join("; "),
                    format!(
                        "add the directories holding them to `read` of [sandbox.{profile}] (`verbd sandbox why {profile} PATH exec` shows the deciding rule)"
                    ),
                ))
            }
        })();
        report.push(format!("programs:{profile}"), result);
    }
}

/// The canary's findings, one per line: `name ok detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryFinding {
    pub name: String,
    pub confined: bool,
    pub detail: String,
}

fn check_sandbox(report: &mut Report, ctx: &Context, spec: &SandboxSpec) {
    let name = format!("sandbox:{}", spec.name);
    if let Some(run_as) = spec.run_as
        && !crate::sandbox::identity::permits(run_as.uid, run_as.gid)
    {
        let (uids, gids) = crate::sandbox::identity::guarded_ids().unwrap_or_default();
        report.push(
            name,
            Err((
                format!(
                    "run_as uid {} gid {} is not one this daemon may switch to: its identity guard, set at start from the policy it started with, allows uids {uids:?} and gids {gids:?}; restart the daemon to serve a new run_as user",
                    run_as.uid, run_as.gid
                ),
                "restart the daemon (a reload cannot widen the ids its identity guard allows)"
                    .into(),
            )),
        );
        return;
    }
    let result = run_canary(ctx, spec);
    report.push(name, result);
}

/// Runs the canary through the daemon's spawner, in the daemon's working directory.
fn canary_through_spawner(
    spawner: &crate::spawner::Spawner,
    program: &Path,
    args: &[std::ffi::OsString],
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    plan: crate::sandbox::remote::RemotePlan,
) -> std::io::Result<std::process::Output> {
    use std::os::unix::ffi::OsStrExt;
    let program = program.as_os_str().as_bytes();
    let argv: Vec<Vec<u8>> = std::iter::once(program.to_vec())
        .chain(args.iter().map(|a| a.as_bytes().to_vec()))
        .collect();
    let env: Vec<Vec<u8>> = env
        .iter()
        .map(|(name, value)| [name.as_bytes(), b"=", value.as_bytes()].concat())
        .collect();
    let cwd = std::env::current_dir()?;
    let request = crate::sandbox::remote::SpawnRequest {
        program,
        argv: &argv,
        env: &env,
        cwd: cwd.as_os_str().as_bytes(),
        stdio: [-1; 3],
        keep_fds: &[],
    };
    spawner.output(&request, plan)
}

fn run_canary(ctx: &Context, spec: &SandboxSpec) -> Result<String, (String, String)> {
    // The canary is the verbd binary: let it be loaded (the binary and the system libraries);
    // nothing about writes, syscalls, network or capabilities changes.
    let mut canary_spec = SandboxSpec {
        private: ctx.private.to_vec(),
        ..spec.clone()
    };
    for extra in [
        ctx.canary_exe.as_path(),
        Path::new("/lib"),
        Path::new("/lib64"),
        Path::new("/usr/lib"),
        Path::new("/proc"),
    ] {
        if extra.exists() && !canary_spec.read.iter().any(|r| extra.starts_with(r)) {
            canary_spec.read.push(extra.to_path_buf());
        }
    }
    let prepared = PreparedSandbox::prepare(canary_spec).map_err(|e| {
        (
            format!("the profile cannot be prepared: {e}"),
            "fix the profile's paths".into(),
        )
    })?;
    let outside = canary_outside_dir(spec);
    let mut args: Vec<std::ffi::OsString> = vec![
        CANARY_SUBCOMMAND.into(),
        "--outside".into(),
        outside.clone().into(),
    ];
    if spec.network == Network::None {
        args.push("--network-none".into());
    }
    if spec.network != Network::Full {
        args.push("--fast-open-refused".into());
    }
    for private in ctx.private.iter().filter(|p| p.exists()) {
        args.push("--private".into());
        args.push(private.into());
    }
    if !spec.keep_capabilities.is_empty() {
        args.push("--keeps-capabilities".into());
    }
    if !PreparedSandbox::drops_bounding_set() {
        args.push("--bounding-kept".into());
    }
    let unlisted = UnlistedSocket::listen().map_err(|e| {
        (
            format!("cannot create the canary's unlisted socket: {e}"),
            "the self-test needs a writable temporary directory".into(),
        )
    })?;
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
        (CANARY_SOCKET_ENV.into(), unlisted.path.clone().into()),
        (
            CANARY_DATAGRAM_ENV.into(),
            unlisted.datagram_path.clone().into(),
        ),
    ];
    let unsandboxed =
        cfg!(feature = "test-hooks") && std::env::var_os(UNSANDBOXED_CANARY_ENV).is_some();
    let install_error = |e: crate::sandbox::SandboxError| {
        (
            format!("cannot install the sandbox: {e}"),
            "see the error".to_string(),
        )
    };
    // In the daemon the canary is forked by the spawner, exactly as every verb's child is.
    let output = match crate::spawner::installed() {
        Some(spawner) if !unsandboxed => {
            let plan = prepared.remote_canary_plan().map_err(install_error)?;
            canary_through_spawner(spawner, &ctx.canary_exe, &args, &env, plan)
        }
        _ => {
            let mut cmd = Command::new(&ctx.canary_exe);
            cmd.args(&args)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if !unsandboxed {
                prepared.install_canary(&mut cmd).map_err(install_error)?;
            }
            cmd.output()
        }
    };
    let out = output.map_err(|e| {
        let detail = match crate::sandbox::spawn_failure(&e) {
            Some(stage) => format!("the sandbox could not be applied: {stage}"),
            None => format!("the canary could not start: {e}"),
        };
        (detail, "check that the kernel supports Landlock ABI 6 and seccomp, and that the unit's SystemCallFilter allows landlock_* and seccomp".into())
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut findings: Vec<CanaryFinding> = text.lines().filter_map(parse_finding).collect();
    if unlisted.was_reached() {
        findings.push(CanaryFinding {
            name: "unix-socket".into(),
            confined: false,
            detail: format!("a connection reached {}", unlisted.path.display()),
        });
    }
    if let Some(datagram) = unlisted.datagram_received() {
        findings.push(CanaryFinding {
            name: "unix-datagram".into(),
            confined: false,
            detail: format!(
                "the datagram {datagram:?} reached {}",
                unlisted.datagram_path.display()
            ),
        });
    }
    if findings.is_empty() {
        return Err((
            format!(
                "the canary reported nothing (exit {:?}): {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            "run `verbd selftest` by hand to see the canary's error".into(),
        ));
    }
    let escaped: Vec<String> = findings
        .iter()
        .filter(|f| !f.confined)
        .map(|f| format!("{}: {}", f.name, f.detail))
        .collect();
    if escaped.is_empty() {
        // A kept bounding set is confined by other means: say which.
        let capabilities = findings
            .iter()
            .find(|f| f.name == "capabilities")
            .map(|f| format!("; capabilities: {}", f.detail))
            .unwrap_or_default();
        Ok(format!(
            "canary confined: {}{capabilities}; {}",
            findings
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            prepared.denial_log()
        ))
    } else {
        Err((
            format!("the canary did forbidden things: {}", escaped.join("; ")),
            "the sandbox is not effective on this host: check the kernel (Landlock, seccomp), the unit's SystemCallFilter, and the profile".into(),
        ))
    }
}

/// A listening Unix socket and a bound datagram socket in a fresh directory, open to every uid
/// (so only the sandbox can stop a connect or a datagram), removed on drop.
struct UnlistedSocket {
    dir: PathBuf,
    path: PathBuf,
    listener: std::os::unix::net::UnixListener,
    datagram_path: PathBuf,
    datagram: std::os::unix::net::UnixDatagram,
}

impl UnlistedSocket {
    fn listen() -> std::io::Result<UnlistedSocket> {
        use std::os::unix::fs::PermissionsExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("verbd-canary-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let socket = UnlistedSocket {
            path: dir.join("unlisted.sock"),
            listener: std::os::unix::net::UnixListener::bind(dir.join("unlisted.sock"))?,
            datagram_path: dir.join("unlisted.dgram"),
            datagram: std::os::unix::net::UnixDatagram::bind(dir.join("unlisted.dgram"))?,
            dir,
        };
        std::fs::set_permissions(&socket.dir, std::fs::Permissions::from_mode(0o755))?;
        for path in [&socket.path, &socket.datagram_path] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))?;
        }
        socket.listener.set_nonblocking(true)?;
        socket.datagram.set_nonblocking(true)?;
        Ok(socket)
    }

    fn was_reached(&self) -> bool {
        self.listener.accept().is_ok()
    }

    /// The first datagram that arrived, if any.
    fn datagram_received(&self) -> Option<String> {
        let mut buffer = [0u8; 64];
        let n = self.datagram.recv(&mut buffer).ok()?;
        Some(String::from_utf8_lossy(&buffer[..n]).into_owned())
    }
}

impl Drop for UnlistedSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.datagram_path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A directory outside every write root that exists and would normally be writable (by root).
fn canary_outside_dir(spec: &SandboxSpec) -> PathBuf {
    let candidates = [
        std::env::temp_dir(),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/tmp"),
    ];
    candidates
        .into_iter()
        .find(|c| {
            c.is_dir()
                && !spec
                    .write
                    .iter()
                    .any(|w| c.starts_with(w) || w.starts_with(c))
        })
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn parse_finding(line: &str) -> Option<CanaryFinding> {
    let mut parts = line.splitn(3, ' ');
    let name = parts.next()?.to_string();
    let confined = match parts.next()? {
        "confined" => true,
        "ESCAPED" => false,
        _ => return None,
    };
    Some(CanaryFinding {
        name,
        confined,
        detail: parts.next().unwrap_or_default().to_string(),
    })
}

/// What the canary child tries (its hidden subcommand's flags).
#[derive(Debug, Clone)]
pub struct CanaryPlan {
    /// A directory outside every write root: creating a file there must fail.
    pub outside: PathBuf,
    /// The profile has `network = "none"`: an `AF_INET` socket must be refused.
    pub network_none: bool,
    /// The profile's network is not `full`: a `MSG_FASTOPEN` send must be refused.
    pub fast_open_refused: bool,
    /// The profile keeps capabilities: the empty-sets probe is skipped.
    pub keeps_capabilities: bool,
    /// The daemon cannot empty its children's bounding set (it lacks `CAP_SETPCAP`, as every
    /// unprivileged daemon does): a full bounding set is then confined only with `no_new_privs`
    /// and empty permitted, effective, inheritable and ambient sets, which is what makes it
    /// grant nothing at `execve` (no file capability or set-id bit is honoured, and nothing is
    /// inherited).
    pub bounding_kept: bool,
    /// The daemon's private paths: reading each must fail.
    pub private: Vec<PathBuf>,
}

/// The canary child: try each forbidden thing and report. Prints `name confined|ESCAPED detail`.
pub fn canary_main(plan: &CanaryPlan) -> i32 {
    let outside = plan.outside.as_path();
    let network_none = plan.network_none;
    let keeps_caps = plan.keeps_capabilities;
    let mut lines = Vec::new();
    let mut report = |name: &str, confined: bool, detail: String| {
        lines.push(format!(
            "{name} {} {detail}",
            if confined { "confined" } else { "ESCAPED" }
        ));
    };
    let probe = outside.join(format!("verbd-canary-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            report(
                "write-outside",
                false,
                format!("created {}", probe.display()),
            );
        }
        Err(e) => report("write-outside", true, e.to_string()),
    }
    if !plan.private.is_empty() {
        let readable: Vec<String> = plan
            .private
            .iter()
            .filter(|path| readable(path))
            .map(|path| path.display().to_string())
            .collect();
        if readable.is_empty() {
            report(
                "private-paths",
                true,
                format!("none of {} readable", plan.private.len()),
            );
        } else {
            report(
                "private-paths",
                false,
                format!("read the daemon's {}", readable.join(", ")),
            );
        }
    }
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        Ok(()) => report(
            "denied-syscall",
            false,
            "unshare(CLONE_NEWUSER) succeeded".into(),
        ),
        Err(nix::errno::Errno::EPERM) => report("denied-syscall", true, "unshare: EPERM".into()),
        Err(e) => report(
            "denied-syscall",
            false,
            format!("unshare failed with {e}, not EPERM"),
        ),
    }
    if network_none {
        match nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Inet,
            nix::sys::socket::SockType::Stream,
            nix::sys::socket::SockFlag::empty(),
            None,
        ) {
            Ok(_) => report("network", false, "socket(AF_INET) succeeded".into()),
            Err(e) => report("network", true, format!("socket(AF_INET): {e}")),
        }
    }
    if plan.fast_open_refused {
        // fd -1: the filter answers before the kernel would look at the descriptor (EBADF).
        let flags = nix::sys::socket::MsgFlags::from_bits_retain(libc::MSG_FASTOPEN);
        match nix::sys::socket::send(-1, b"", flags) {
            Err(nix::errno::Errno::EPERM) => {
                report("fast-open", true, "send(MSG_FASTOPEN): EPERM".into())
            }
            other => report(
                "fast-open",
                false,
                format!("send(MSG_FASTOPEN) reached the kernel: {other:?}"),
            ),
        }
    }
    if let Some(path) = std::env::var_os(CANARY_SOCKET_ENV) {
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(_) => report(
                "unix-socket",
                false,
                format!("connected to {}", Path::new(&path).display()),
            ),
            Err(e) => report("unix-socket", true, format!("connect: {e}")),
        }
    }
    if let Some(path) = std::env::var_os(CANARY_DATAGRAM_ENV) {
        let (confined, detail) = send_unix_datagrams(Path::new(&path));
        report("unix-datagram", confined, detail);
    }
    let nnp = nix::sys::prctl::get_no_new_privs().unwrap_or(false);
    report(
        "no-new-privs",
        nnp,
        format!("no_new_privs={}", u8::from(nnp)),
    );
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Seccomp:"))
                .map(|l| l["Seccomp:".len()..].trim().to_string())
        });
    // The canary's profile always includes /proc for reading; unreadable means unverified.
    let seccomp_mode = seccomp.unwrap_or_else(|| "unreadable".into());
    report(
        "seccomp",
        seccomp_mode == "2",
        format!("mode {seccomp_mode}"),
    );
    if !keeps_caps {
        let (confined, detail) = capability_finding(nnp, plan.bounding_kept);
        report("capabilities", confined, detail);
    }
    println!("{}", lines.join("\n"));
    0
}

/// The canary's capability sets. Every set must be empty, except the bounding set of a child
/// whose daemon could not empty it (`bounding_kept`): that one is reported, and confined only
/// when `no_new_privs` is set and the four other sets are empty, so that no `execve` can turn it
/// into a capability.
fn capability_finding(no_new_privs: bool, bounding_kept: bool) -> (bool, String) {
    let sets = [
        ("effective", caps::CapSet::Effective, false),
        ("permitted", caps::CapSet::Permitted, false),
        ("inheritable", caps::CapSet::Inheritable, false),
        ("ambient", caps::CapSet::Ambient, false),
        ("bounding", caps::CapSet::Bounding, bounding_kept),
    ];
    let mut held = Vec::new();
    let mut bounding = 0;
    for (name, set, may_be_kept) in sets {
        match caps::read(None, set) {
            Ok(c) if c.is_empty() => {}
            Ok(c) if may_be_kept => bounding = c.len(),
            Ok(c) => held.push(format!("{name}={}", c.len())),
            Err(e) => held.push(format!("{name} unreadable ({e})")),
        }
    }
    if !held.is_empty() {
        return (false, held.join(","));
    }
    if bounding == 0 {
        return (true, "all sets empty".into());
    }
    if !no_new_privs {
        return (
            false,
            format!("bounding={bounding} without no_new_privs: an execve could gain from it"),
        );
    }
    (
        true,
        format!(
            "bounding={bounding} kept (the daemon has no CAP_SETPCAP to empty it); inert: no_new_privs, permitted/effective/inheritable/ambient empty"
        ),
    )
}

/// Can this process read `path` (list it, for a directory)?
fn readable(path: &Path) -> bool {
    use std::io::Read;
    if path.is_dir() {
        return std::fs::read_dir(path).is_ok();
    }
    std::fs::File::open(path).is_ok_and(|mut file| file.read(&mut [0u8; 1]).is_ok())
}

/// Tries to send a datagram to `path` from an `AF_UNIX` socket of every type the kernel makes a
/// datagram socket of (`SOCK_DGRAM`, and `SOCK_RAW`, which `AF_UNIX` turns into one). Confined
/// when every socket was refused with EPERM.
fn send_unix_datagrams(path: &Path) -> (bool, String) {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, sendto, socket};
    let Ok(address) = UnixAddr::new(path) else {
        return (
            false,
            format!("{} is not a Unix socket address", path.display()),
        );
    };
    let mut outcomes = Vec::new();
    let mut confined = true;
    for (name, kind) in [
        ("SOCK_DGRAM", SockType::Datagram),
        ("SOCK_RAW", SockType::Raw),
    ] {
        match socket(AddressFamily::Unix, kind, SockFlag::SOCK_CLOEXEC, None) {
            Err(nix::errno::Errno::EPERM) => outcomes.push(format!("socket({name}): EPERM")),
            Err(e) => {
                confined = false;
                outcomes.push(format!("socket({name}) failed with {e}, not EPERM"));
            }
            Ok(fd) => {
                confined = false;
                let sent = sendto(
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    name.as_bytes(),
                    &address,
                    nix::sys::socket::MsgFlags::empty(),
                );
                outcomes.push(match sent {
                    Ok(n) => format!("socket({name}) was created and sent {n} bytes"),
                    Err(e) => format!("socket({name}) was created (sendto: {e})"),
                });
            }
        }
    }
    (confined, outcomes.join(" and "))
}

fn check_serving(report: &mut Report, ctx: &Context, serving: &Serving) {
    let policy = ctx.policy;
    let euid = nix::unistd::geteuid();
    report.push(
        "identity",
        if euid.is_root() && !policy.daemon.allow_root {
            Err((
                "the daemon is still root after start-up".into(),
                "set [daemon] user".into(),
            ))
        } else {
            Ok(format!("running as uid {}", euid.as_raw()))
        },
    );
    if let Some(socket) = serving.socket {
        let result = std::fs::symlink_metadata(socket)
            .map_err(|e| {
                (
                    format!("{}: {e}", socket.display()),
                    "check the socket path".into(),
                )
            })
            .and_then(|m| {
                let mode = m.permissions().mode() & 0o7777;
                if mode != policy.daemon.socket_mode {
                    return Err((
                        format!(
                            "{} has mode {mode:04o}, the policy says {:04o}",
                            socket.display(),
                            policy.daemon.socket_mode
                        ),
                        "restart the daemon; if this persists, check the socket unit's SocketMode="
                            .into(),
                    ));
                }
                if let Some(group) = &policy.daemon.socket_group {
                    let gid = nix::unistd::Group::from_name(group)
                        .ok()
                        .flatten()
                        .map(|g| g.gid.as_raw());
                    if gid != Some(m.gid()) {
                        return Err((
                            format!(
                                "{} belongs to gid {}, the policy says group {group}",
                                socket.display(),
                                m.gid()
                            ),
                            "check SocketGroup= in verbd.socket".into(),
                        ));
                    }
                }
                Ok(format!("{} mode {mode:04o}", socket.display()))
            });
        report.push("socket", result);
    }
    let dir = serving.state_dir;
    report.push(
        "state-dir",
        private_to(
            dir,
            euid.as_raw(),
            &format!("chown the daemon user {0} && chmod 0700 {0}", dir.display()),
        ),
    );
    for name in [crate::journal::SEAL_STATE_FILE, crate::journal::KEY_FILE] {
        let key = dir.join(name);
        if name == crate::journal::KEY_FILE && !key.exists() {
            continue;
        }
        report.push(
            "journal-key",
            private_to(
                &key,
                euid.as_raw(),
                &format!("chmod 0600 {}", key.display()),
            ),
        );
    }
    check_journal_tail(report, dir);
}

/// Is `path` owned by `uid` with no group/other permission bits?
fn private_to(path: &Path, uid: u32, fix: &str) -> Result<String, (String, String)> {
    let meta = std::fs::metadata(path)
        .map_err(|e| (format!("{}: {e}", path.display()), fix.to_string()))?;
    let mode = meta.permissions().mode() & 0o777;
    if meta.uid() != uid || mode & 0o077 != 0 {
        return Err((
            format!(
                "{} is owned by uid {} with mode {mode:04o}; it must be the daemon's alone",
                path.display(),
                meta.uid()
            ),
            fix.to_string(),
        ));
    }
    Ok(format!(
        "{} owned by the daemon, mode {mode:04o}",
        path.display()
    ))
}

fn check_journal_tail(report: &mut Report, dir: &Path) {
    if !dir.join(crate::journal::JOURNAL_FILE).exists() {
        report.push("journal", Ok("no journal yet".into()));
        return;
    }
    report.push(
        "journal",
        crate::journal::tail(dir, 1)
            .map(|r| match r.last() {
                Some(last) => format!("chain verifies since the last checkpoint (seq {})", last.seq),
                None => "empty".into(),
            })
            .map_err(|e| {
                (
                    e.to_string(),
                    "run `verbd audit verify` to find the damage; never delete records to make this pass".into(),
                )
            }),
    );
}

/// How long a self-test may take before it is reported as slow (startup must stay fast).
pub const BUDGET: Duration = Duration::from_secs(1);
