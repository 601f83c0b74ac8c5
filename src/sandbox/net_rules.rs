//! Landlock TCP port rules for `network = { connect_tcp = [PORT, …] }`.
//!
//! A second Landlock ruleset, stacked on the filesystem one in the child (Landlock domains nest;
//! every layer must allow an access). It handles `bind` and `connect` on TCP: binding any TCP
//! port is refused, connecting is allowed only to the listed ports. The seccomp argument filter
//! (module `seccomp`) lets only `AF_UNIX` and TCP sockets be created in this mode, because
//! Landlock governs neither UDP nor other protocols. The connect broker (module `unix_broker`)
//! performs every `connect` on the child's behalf and applies the same port list itself (its own
//! connect is not under the child's Landlock domain); the Landlock layer keeps holding for
//! `bind`. Landlock hooks only `connect(2)`: TCP Fast Open, which connects inside
//! `sendto`/`sendmsg` (`MSG_FASTOPEN`), passes it, so the seccomp argument filter refuses those
//! flags instead.
//!
//! Invariant: built once per profile at policy load, cloned (one `dup`) per spawn, like the
//! filesystem template; an `Err` means the kernel lacks Landlock network rules (ABI ≥ 4), and the
//! profile is refused rather than run without them.
#![forbid(unsafe_code)]

use landlock::{
    ABI, Access, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr,
};

use super::fs_rules::DenialLog;
use super::{Network, SandboxError};

/// The oldest Landlock ABI with TCP port rules.
const NET_ABI: ABI = ABI::V4;

/// The port ruleset of `network`, or `None` when the mode needs none (`none`: no TCP socket can
/// exist; `full`: no restriction).
pub(super) fn build(
    network: &Network,
    log: DenialLog,
) -> Result<Option<RulesetCreated>, SandboxError> {
    let Network::ConnectTcp(ports) = network else {
        return Ok(None);
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::from_all(NET_ABI))
        .map_err(net_error)?
        .create()
        .map_err(net_error)?;
    if log == DenialLog::Audit {
        ruleset = ruleset.log_new_exec(true).map_err(net_error)?;
    }
    for &port in ports {
        ruleset = ruleset
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(net_error)?;
    }
    Ok(Some(ruleset))
}

fn net_error(err: landlock::RulesetError) -> SandboxError {
    SandboxError::Landlock(format!(
        "TCP port rules (`connect_tcp`) need Landlock ABI 4 (Linux 6.7): {err}"
    ))
}
