//! Compiling `[sandbox.*]`: inheritance in dependency order (cycles and unknown parents are
//! errors), the built-in `default` profile, paths that must exist, network modes, capabilities,
//! rlimits, umask and `run_as` (a user that exists, never root).
#![forbid(unsafe_code)]

use super::{Ctx, size_or};
use crate::policy::schema::{RawNetwork, RawNetworkMode, RawRlimits, RawRunAs, RawSandbox};
use crate::policy::units::{parse_duration, parse_mode};
use crate::protected::ProtectedNames;
use crate::sandbox::{Network, Rlimits, RunAs, SandboxSpec};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;

pub(super) fn build_sandboxes(
    ctx: &mut Ctx,
    raw: &BTreeMap<String, toml::Spanned<RawSandbox>>,
    protected: &ProtectedNames,
) -> BTreeMap<String, SandboxSpec> {
    let mut out = BTreeMap::new();
    if !raw.contains_key(DEFAULT_SANDBOX) {
        out.insert(DEFAULT_SANDBOX.to_string(), default_sandbox(protected));
    }
    // Resolve inheritance in dependency order; cycles and unknown parents are errors.
    let mut pending: Vec<&String> = raw.keys().collect();
    while !pending.is_empty() {
        let before = pending.len();
        pending.retain(|name| {
            let spanned = &raw[*name];
            let parent = spanned.get_ref().inherit.as_ref().map(|p| p.get_ref());
            let base = match parent {
                None => None,
                Some(p) if out.contains_key(p) => Some(out[p].clone()),
                Some(p) if raw.contains_key(p) => return true,
                Some(p) => {
                    ctx.at(
                        spanned.span(),
                        format!("sandbox `{name}` inherits from unknown sandbox `{p}`"),
                    );
                    Some(default_sandbox(protected))
                }
            };
            let spec = sandbox_spec(ctx, name, spanned, base, protected);
            out.insert((*name).clone(), spec);
            false
        });
        if pending.len() == before {
            for name in &pending {
                ctx.at(
                    raw[*name].span(),
                    format!("sandbox `{name}`: inheritance cycle"),
                );
            }
            break;
        }
    }
    out
}

/// Name of the profile a verb gets when it names none.
pub const DEFAULT_SANDBOX: &str = "default";

/// Read-only system roots of the built-in default profile, and of every profile without `read`
/// (those that exist on this host). docs/policy.md lists the same.
const DEFAULT_READ_ROOTS: &[&str] = &["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc"];

fn default_sandbox(protected: &ProtectedNames) -> SandboxSpec {
    SandboxSpec {
        name: DEFAULT_SANDBOX.into(),
        read: DEFAULT_READ_ROOTS
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect(),
        write: Vec::new(),
        private: Vec::new(),
        protected: protected.clone(),
        network: Network::None,
        keep_capabilities: Vec::new(),
        rlimits: Rlimits::default(),
        umask: None,
        run_as: None,
        unix_sockets: Vec::new(),
        keep_env: Vec::new(),
    }
}

fn sandbox_spec(
    ctx: &mut Ctx,
    name: &str,
    spanned: &toml::Spanned<RawSandbox>,
    base: Option<SandboxSpec>,
    protected: &ProtectedNames,
) -> SandboxSpec {
    let span = spanned.span();
    let raw = spanned.get_ref();
    // Without `inherit`, a profile starts from the built-in default: `read` absent means the
    // default read roots, `read = []` means none.
    let mut spec = base.unwrap_or_else(|| default_sandbox(protected));
    spec.name = name.to_string();
    if let Some(read) = &raw.read {
        spec.read = read.clone();
    }
    if let Some(write) = &raw.write {
        spec.write = write.clone();
    }
    check_paths(ctx, name, &span, &spec);
    if let Some(network) = &raw.network {
        spec.network = network_mode(ctx, name, &span, network);
    }
    if let Some(sockets) = &raw.unix_sockets {
        check_unix_sockets(ctx, name, &span, sockets);
        spec.unix_sockets = sockets.clone();
    }
    if let Some(keep_env) = &raw.keep_env {
        spec.keep_env = keep_env.clone();
    }
    if let Some(caps) = &raw.capabilities {
        spec.keep_capabilities = capabilities(ctx, name, &span, caps);
    }
    if let Some(r) = &raw.rlimits {
        apply_rlimits(ctx, r, &mut spec.rlimits);
    }
    if let Some(umask) = &raw.umask {
        match parse_mode(umask.get_ref()) {
            Ok(m) => spec.umask = Some(m),
            Err(e) => ctx.at(umask.span(), e),
        }
    }
    if let Some(run_as) = &raw.run_as {
        match resolve_run_as(run_as) {
            Ok(r) => spec.run_as = Some(r),
            Err(e) => ctx.at(span.clone(), format!("sandbox `{name}`: {e}")),
        }
    }
    spec
}

/// Every read and write root is absolute and exists (verbd never skips a missing path silently).
fn check_paths(ctx: &mut Ctx, name: &str, span: &Range<usize>, spec: &SandboxSpec) {
    for path in spec.read.iter().chain(&spec.write) {
        if !path.is_absolute() {
            ctx.at(
                span.clone(),
                format!("sandbox `{name}`: path {path:?} must be absolute"),
            );
        } else if !path.exists() {
            ctx.at(
                span.clone(),
                format!(
                    "sandbox `{name}`: path {} does not exist (create it or remove it from the profile; verbd never skips a missing path silently)",
                    path.display()
                ),
            );
        }
    }
}

/// `network`: none, full, or a non-empty list of TCP ports 1-65535.
fn network_mode(ctx: &mut Ctx, name: &str, span: &Range<usize>, network: &RawNetwork) -> Network {
    match network {
        RawNetwork::Mode(RawNetworkMode::None) => Network::None,
        RawNetwork::Mode(RawNetworkMode::Full) => Network::Full,
        RawNetwork::Ports(ports) => {
            if ports.connect_tcp.is_empty() || ports.connect_tcp.contains(&0) {
                ctx.at(
                    span.clone(),
                    format!("sandbox `{name}`: network.connect_tcp lists ports 1-65535 (at least one); for no network write network = \"none\""),
                );
            }
            Network::ConnectTcp(ports.connect_tcp.clone())
        }
    }
}

/// Each Unix socket path is absolute and fits `sun_path`.
fn check_unix_sockets(ctx: &mut Ctx, name: &str, span: &Range<usize>, sockets: &[PathBuf]) {
    for path in sockets {
        if !path.is_absolute() || path.as_os_str().len() >= 108 {
            ctx.at(
                span.clone(),
                format!("sandbox `{name}`: unix_sockets entry {path:?} must be an absolute path shorter than 108 bytes"),
            );
        }
    }
}

/// The capabilities kept, each a known name with or without `CAP_`, in any case.
fn capabilities(
    ctx: &mut Ctx,
    name: &str,
    span: &Range<usize>,
    caps: &[String],
) -> Vec<caps::Capability> {
    caps.iter()
        .filter_map(|c| {
            let upper = c.to_ascii_uppercase();
            let full = if upper.starts_with("CAP_") {
                upper
            } else {
                format!("CAP_{upper}")
            };
            full.parse::<caps::Capability>()
                .map_err(|_| {
                    ctx.at(
                        span.clone(),
                        format!("sandbox `{name}`: unknown capability {c:?}"),
                    )
                })
                .ok()
        })
        .collect()
}

/// The limits the profile sets, over those it inherited; CPU time at least one second.
fn apply_rlimits(ctx: &mut Ctx, r: &RawRlimits, limits: &mut Rlimits) {
    if let Some(cpu) = &r.cpu {
        match parse_duration(cpu.get_ref()) {
            Ok(d) => limits.cpu_seconds = d.as_secs().max(1),
            Err(e) => ctx.at(cpu.span(), e),
        }
    }
    limits.address_space_bytes = size_or(ctx, &r.address_space, limits.address_space_bytes);
    limits.file_size_bytes = size_or(ctx, &r.file_size, limits.file_size_bytes);
    if let Some(n) = r.open_files {
        limits.open_files = n;
    }
    if let Some(n) = r.processes {
        limits.processes = n;
    }
}

fn resolve_run_as(raw: &RawRunAs) -> Result<RunAs, String> {
    let (uid, primary_gid) = match raw.user.parse::<u32>() {
        Ok(uid) => (uid, None),
        Err(_) => match nix::unistd::User::from_name(&raw.user) {
            Ok(Some(u)) => (u.uid.as_raw(), Some(u.gid.as_raw())),
            _ => return Err(format!("run_as user {:?} does not exist", raw.user)),
        },
    };
    if uid == 0 {
        return Err("run_as must not be root".into());
    }
    let gid = match &raw.group {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match nix::unistd::Group::from_name(g) {
                Ok(Some(group)) => group.gid.as_raw(),
                _ => return Err(format!("run_as group {g:?} does not exist")),
            },
        },
        None => primary_gid.unwrap_or(uid),
    };
    if gid == 0 {
        return Err("run_as group must not be root".into());
    }
    Ok(RunAs { uid, gid })
}
