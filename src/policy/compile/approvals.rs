//! Compiling `[approvals]` and the approval settings of a verb: quorums that can be met,
//! break-glass roles that are people who may call the verb, a notifier that names only `{id}`,
//! defined secrets and a defined sandbox.
#![forbid(unsafe_code)]

use super::roles::check_approver_roles;
use super::{Ctx, DEFAULT_SANDBOX, command_template, duration_or};
use crate::policy::schema::{RawApprovalMode, RawApprovals, RawQuorum, RawVerb};
use crate::policy::{ApprovalMode, ApprovalsConfig, Category, Quorum, Role, RoleKind};
use crate::sandbox::SandboxSpec;
use crate::secrets::SecretSource;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::Duration;

/// Most distinct people a quorum may ask for.
pub const MAX_QUORUM: u32 = 16;

/// A quorum as written, checked on its own: a count of 1 to [`MAX_QUORUM`], human roles named
/// once each, a `max_per_role` of at least 1 that the roles of `from` can meet together.
fn build_quorum(
    ctx: &mut Ctx,
    place: &str,
    spanned: &toml::Spanned<RawQuorum>,
    roles: &BTreeMap<String, Role>,
) -> Option<Quorum> {
    let (raw, span) = (spanned.get_ref(), spanned.span());
    let errors_before = ctx.diagnostics.len();
    if raw.count == 0 || raw.count > MAX_QUORUM {
        ctx.at(
            span.clone(),
            format!(
                "{place}: quorum count = {}: give 1 to {MAX_QUORUM} distinct approvers",
                raw.count
            ),
        );
    }
    let from = check_approver_roles(ctx, &raw.from, roles);
    let mut seen = BTreeSet::new();
    for name in &from {
        if !seen.insert(name) {
            ctx.at(
                span.clone(),
                format!("{place}: quorum role `{name}` is named twice in `from`; name it once"),
            );
        }
    }
    match raw.max_per_role {
        Some(0) => ctx.at(
            span.clone(),
            format!("{place}: max_per_role = 0 would refuse every approval; give at least 1 or leave it out"),
        ),
        Some(max) if !from.is_empty() && max.saturating_mul(from.len() as u32) < raw.count => {
            ctx.at(
                span.clone(),
                format!(
                    "{place}: a quorum of {} can never be met: {} role(s) in `from` × max_per_role {max} give at most {}; raise max_per_role, add roles to `from` or lower count",
                    raw.count,
                    from.len(),
                    max.saturating_mul(from.len() as u32)
                ),
            );
        }
        _ => {}
    }
    if ctx.diagnostics.len() > errors_before {
        return None;
    }
    Some(Quorum {
        count: raw.count,
        from,
        max_per_role: raw.max_per_role,
    })
}

/// A verb's quorum (its own, or its category's) checked against who may approve the verb: every
/// role of `from` is one of its approver roles, and they can meet `max_per_role` together.
/// `None` when one person's approval is enough.
pub(super) fn verb_quorum(
    ctx: &mut Ctx,
    (name, span): (&str, &Range<usize>),
    raw: &RawVerb,
    (needs_approval, category): (bool, Option<Category>),
    approvals: &ApprovalsConfig,
    verb_approvers: &[String],
    roles: &BTreeMap<String, Role>,
) -> Option<Quorum> {
    let place = format!("verb `{name}`");
    let quorum = match &raw.quorum {
        Some(own) => {
            if !needs_approval {
                ctx.at(
                    own.span(),
                    format!("{place} runs without approval, so `quorum` has nothing to count; remove it or require approval"),
                );
                return None;
            }
            build_quorum(ctx, &place, own, roles)?
        }
        None if needs_approval => approvals
            .quorum
            .get(category.map_or("unspecified", Category::as_str))
            .cloned()?,
        None => return None,
    };
    let approver_roles: BTreeSet<&String> =
        approvals.approvers.iter().chain(verb_approvers).collect();
    for role in &quorum.from {
        if !approver_roles.contains(role) {
            ctx.at(
                span.clone(),
                format!("{place}: quorum role `{role}` cannot approve this verb; add it to the verb's `approvers` or to [approvals] approvers"),
            );
        }
    }
    let counted = if quorum.from.is_empty() {
        approver_roles.len()
    } else {
        quorum.from.len()
    } as u32;
    if let Some(max) = quorum.max_per_role
        && max.saturating_mul(counted) < quorum.count
    {
        ctx.at(
            span.clone(),
            format!(
                "{place}: a quorum of {} can never be met: {counted} approver role(s) × max_per_role {max}; raise max_per_role, add approver roles or lower count",
                quorum.count
            ),
        );
    }
    let one_person = Quorum {
        count: 1,
        from: Vec::new(),
        max_per_role: None,
    };
    (quorum != one_person).then_some(quorum)
}

/// A verb's `break_glass` roles: human roles that may call the verb, on a verb that needs
/// approval (there is nothing to skip otherwise).
pub(super) fn verb_break_glass(
    ctx: &mut Ctx,
    name: &str,
    raw: &RawVerb,
    needs_approval: bool,
    roles: &BTreeMap<String, Role>,
) -> Vec<String> {
    for spanned in &raw.break_glass {
        let (role, span) = (spanned.get_ref(), spanned.span());
        match roles.get(role) {
            None => ctx.at(span, format!("verb `{name}`: break_glass role `{role}` is not defined in [roles]")),
            Some(r) if r.kind != RoleKind::Human => ctx.at(
                span,
                format!("verb `{name}`: break_glass role `{role}` is an agent role; break-glass is for people (a verb an agent runs without approval is approval = \"none\")"),
            ),
            Some(_) if !raw.roles.contains(role) => ctx.at(
                span,
                format!("verb `{name}`: break_glass role `{role}` may not call the verb; add it to the verb's `roles`"),
            ),
            Some(_) if !needs_approval => ctx.at(
                span,
                format!("verb `{name}` runs without approval, so `break_glass` has nothing to skip; remove it"),
            ),
            Some(_) => {}
        }
    }
    raw.break_glass
        .iter()
        .map(|r| r.get_ref().clone())
        .collect()
}

pub(super) fn build_approvals(
    ctx: &mut Ctx,
    raw: &RawApprovals,
    roles: &BTreeMap<String, Role>,
) -> ApprovalsConfig {
    let approvers = check_approver_roles(ctx, &raw.approvers, roles);
    let notify = raw.notify.as_ref().and_then(|n| command_template(ctx, n));
    ApprovalsConfig {
        mode: match raw.mode {
            RawApprovalMode::Interactive => ApprovalMode::Interactive,
            RawApprovalMode::Headless => ApprovalMode::Headless,
        },
        approvers,
        expires: duration_or(ctx, &raw.expires, Duration::from_secs(30 * 60)),
        notify,
        notify_sandbox: raw
            .notify_sandbox
            .as_ref()
            .map_or_else(|| DEFAULT_SANDBOX.to_string(), |s| s.get_ref().clone()),
        quorum: raw
            .quorum
            .iter()
            .filter_map(|(category, q)| {
                let place = format!("[approvals.quorum] {category}");
                match category.as_str() {
                    "mutating" | "destructive" => {}
                    "read-only" => {
                        ctx.at(
                            q.span(),
                            format!("{place}: a read-only verb runs without approval, so a quorum has nothing to count; remove it"),
                        );
                        return None;
                    }
                    other => {
                        ctx.at(
                            q.span(),
                            format!("[approvals.quorum]: unknown category `{other}`; use `mutating` or `destructive`"),
                        );
                        return None;
                    }
                }
                build_quorum(ctx, &place, q, roles).map(|q| (category.clone(), q))
            })
            .collect(),
    }
}

/// The notifier names only `{id}`, secrets that exist and a sandbox profile that exists.
pub(super) fn check_notify(
    ctx: &mut Ctx,
    raw: &RawApprovals,
    approvals: &ApprovalsConfig,
    secrets: &BTreeMap<String, SecretSource>,
    sandboxes: &BTreeMap<String, SandboxSpec>,
) {
    if let (Some(template), Some(raw_notify)) = (&approvals.notify, &raw.notify) {
        for (element, _) in template.elements() {
            for param in element.params().filter(|p| *p != "id") {
                ctx.at(
                    raw_notify.span(),
                    format!(
                        "[approvals] notify: `{{{param}}}` is not a placeholder of the notifier (only {{id}}; the proposal itself arrives on stdin)"
                    ),
                );
            }
            for secret in element.secrets().filter(|s| !secrets.contains_key(*s)) {
                ctx.at(
                    raw_notify.span(),
                    format!(
                        "[approvals] notify uses secret `{secret}`, which is not defined in [secrets]"
                    ),
                );
            }
        }
    }
    if let Some(name) = &raw.notify_sandbox
        && !sandboxes.contains_key(name.get_ref())
    {
        ctx.at(
            name.span(),
            format!(
                "[approvals] notify_sandbox: sandbox `{}` is not defined",
                name.get_ref()
            ),
        );
    }
}
