//! Compiling `[roles]`, and the check every place that names approver roles shares: each exists
//! and is a human role.
#![forbid(unsafe_code)]

use super::Ctx;
use crate::policy::schema::{RawCommandMode, RawRole, RawRoleKind};
use crate::policy::{CommandMode, Role, RoleKind};
use std::collections::BTreeMap;

/// The roles; an agent role without its own `commands` takes `default_mode` (`[commands] mode`).
pub(super) fn build_roles(
    raw: &BTreeMap<String, toml::Spanned<RawRole>>,
    default_mode: Option<RawCommandMode>,
) -> BTreeMap<String, Role> {
    raw.iter()
        .map(|(name, r)| {
            let r = r.get_ref();
            let kind = match r.kind {
                RawRoleKind::Agent => RoleKind::Agent,
                RawRoleKind::Human => RoleKind::Human,
            };
            let inherited = match kind {
                RoleKind::Agent => default_mode,
                RoleKind::Human => None,
            };
            (
                name.clone(),
                Role {
                    name: name.clone(),
                    kind,
                    users: r.users.clone(),
                    groups: r.groups.clone(),
                    uids: r.uids.clone(),
                    commands: match r.commands.or(inherited).unwrap_or_default() {
                        RawCommandMode::Off => CommandMode::Off,
                        RawCommandMode::Advise => CommandMode::Advise,
                        RawCommandMode::Rewrite => CommandMode::Rewrite,
                    },
                },
            )
        })
        .collect()
}

/// Every approver role named exists and is human; a problem is located at the name itself.
pub(super) fn check_approver_roles(
    ctx: &mut Ctx,
    names: &[toml::Spanned<String>],
    roles: &BTreeMap<String, Role>,
) -> Vec<String> {
    for spanned in names {
        let (name, span) = (spanned.get_ref(), spanned.span());
        match roles.get(name) {
            None => ctx.at(span, format!("approver role `{name}` is not defined")),
            Some(r) if r.kind != RoleKind::Human => ctx.at(
                span,
                format!(
                    "approver role `{name}` is an agent role; approvers must be roles with kind = \"human\""
                ),
            ),
            Some(_) => {}
        }
    }
    names.iter().map(|n| n.get_ref().clone()).collect()
}
